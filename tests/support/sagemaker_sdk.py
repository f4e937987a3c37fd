"""The SageMaker Python SDK v2's published code as a test oracle: its wheel (downloaded once into
~/.cache/kubepool/wheels, never installed: its dependencies conflict with the venv's), read with `ast`, and its
validation functions run alone, with only the names they use at call time given to them."""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Mapping
from typing import Any

from support.wheels import cached_wheel

WHEEL_VERSION = "2.257.7"


def wheel() -> zipfile.ZipFile:
    return zipfile.ZipFile(cached_wheel("sagemaker", WHEEL_VERSION, "py3-none-any", "the wheel only, to read its code"))


def module(name: str) -> ast.Module:
    """`sagemaker/pytorch/estimator.py` as `pytorch/estimator`."""
    return ast.parse(wheel().read(f"sagemaker/{name}.py").decode())


def _find(tree: ast.AST, name: str) -> ast.FunctionDef | ast.ClassDef:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
    raise LookupError(name)


def params(mod: str, cls: str, fn: str = "__init__") -> list[str]:
    """The named parameters of a method, in order (self left out)."""
    node = _find(_find(module(mod), cls), fn)
    assert isinstance(node, ast.FunctionDef)
    a = node.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg != "self"]


def constant(mod: str, name: str, cls: str | None = None) -> Any:
    """A module's (or class's) assignment `NAME = <literal>` or `NAME = f("<literal>")`: the literal."""
    scope: ast.AST = _find(module(mod), cls) if cls else module(mod)
    for node in getattr(scope, "body", []):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value.args[0] if isinstance(node.value, ast.Call) else node.value
            return ast.literal_eval(value)
    raise LookupError(name)


def function(mod: str, name: str, names: Mapping[str, Any] | None = None, cls: str | None = None) -> Any:
    """One function (or a class's method) of the SDK, compiled alone with `names` as its globals."""
    node = _find(_find(module(mod), cls), name) if cls else _find(module(mod), name)
    namespace: dict[str, Any] = dict(names or {})
    exec(compile(ast.Module(body=[node], type_ignores=[]), f"sagemaker/{mod}.py", "exec"), namespace)  # noqa: S102
    return namespace[name]
