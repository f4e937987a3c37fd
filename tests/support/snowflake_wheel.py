"""Snowflake's published code as a test oracle: the snowflake-ml-python wheel (downloaded once into
~/.cache/kubepool/wheels), read with `ast` or with one module file run in isolation — the package itself needs
Snowpark and a Snowflake account, so only the imports a module makes at its top are stubbed, never its logic."""

from __future__ import annotations

import importlib.util
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from support.wheels import cached_wheel

WHEEL_VERSION = "2.6.0"


def wheel_path() -> Path:
    return cached_wheel("snowflake-ml-python", WHEEL_VERSION, "py3-none-any", "the wheel only, to read its code")


def source(member: str) -> str:
    """One file of the wheel, e.g. `snowflake/ml/jobs/job.py`."""
    with zipfile.ZipFile(wheel_path()) as z:
        return z.read(member).decode()


def load(member: str, monkeypatch: pytest.MonkeyPatch, stubs: dict[str, dict[str, Any]] | None = None,
         name: str | None = None) -> types.ModuleType:
    """Run one module file of the wheel as a module of its own. `stubs` maps each module it imports at its top
    that cannot be imported here to the attributes it needs (packages on the way are made empty); they are put in
    sys.modules only for this test (monkeypatch)."""
    for mod, attrs in (stubs or {}).items():
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):
            dotted = ".".join(parts[:i])
            if dotted not in sys.modules or i == len(parts):
                stub = types.ModuleType(dotted)
                stub.__path__ = []
                monkeypatch.setitem(sys.modules, dotted, stub)
            if i > 1:
                monkeypatch.setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[dotted], raising=False)
        for key, value in attrs.items():
            setattr(sys.modules[mod], key, value)
    module_name = name or "snowflake_wheel_" + member.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_loader(module_name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = member
    monkeypatch.setitem(sys.modules, module_name, module)
    exec(compile(source(member), member, "exec"), module.__dict__)  # noqa: S102 - the product's own code, the oracle
    return module
