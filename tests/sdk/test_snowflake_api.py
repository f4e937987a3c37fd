"""kubepool.jobs against the public API of Snowflake's `snowflake.ml.jobs` as published (snowflake-ml-python
2.6.0, read from its wheel with `ast`, never imported): every public name, every parameter of the shared
functions and of MLJob's methods. A Snowflake-only parameter is accepted where it has no Kubernetes meaning
(logged, submission._IGNORED_SNOWFLAKE_ARGS); what kubepool does not have yet is listed in GAPS, so closing one or
opening a new one fails this test until the list says so."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kubepool import jobs
from kubepool.jobs import submission

WHEEL_VERSION = "2.6.0"
CACHE = Path.home() / ".cache" / "kubepool" / "wheels"
# Public names of snowflake.ml.jobs that kubepool does not offer yet (issue #17 item 4): each needs a Kubernetes
# meaning (a stage is an S3 prefix or a PVC path; a code bundle a stored payload many jobs reuse), never a stub.
GAPS: set[str] = set()
SHARED_FUNCTIONS = ("submit_file", "submit_directory", "submit_from_stage", "list_jobs", "get_job", "delete_job", "remote")
BUNDLE_FUNCTIONS = ("register_code_bundle", "register_job_from_code_bundle", "delete_code_bundle")
MLJOB_METHODS = ("get_logs", "show_logs", "wait", "result", "distributed_result", "cancel", "get_ray_dashboard_url")


@pytest.fixture(scope="module")
def wheel() -> zipfile.ZipFile:
    path = CACHE / f"snowflake_ml_python-{WHEEL_VERSION}-py3-none-any.whl"
    if not path.exists():
        print(f"downloading snowflake-ml-python {WHEEL_VERSION} (the wheel only, to read its API)", file=sys.stderr)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(CACHE),
                               f"snowflake-ml-python=={WHEEL_VERSION}"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and path.exists(), f"cannot download the wheel from the package index:\n{proc.stderr}"
    return zipfile.ZipFile(path)


def _module(wheel: zipfile.ZipFile, name: str) -> ast.Module:
    return ast.parse(wheel.read(f"snowflake/ml/jobs/{name}.py").decode())


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg != "self"]


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _accepts(fn: Any, param: str) -> bool:
    ps = inspect.signature(fn).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ps.values())
    return param in ps or (takes_kwargs and param in submission._IGNORED_SNOWFLAKE_ARGS)


def test_every_public_name(wheel: zipfile.ZipFile) -> None:
    init = _module(wheel, "__init__")
    [names] = [ast.literal_eval(n.value) for n in init.body if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)]
    missing = {n for n in names if not hasattr(jobs, n)}
    assert missing == GAPS, f"not in kubepool.jobs: {sorted(missing - GAPS)}; no longer missing: {sorted(GAPS - missing)}"


def test_every_parameter_of_the_shared_functions(wheel: zipfile.ZipFile) -> None:
    theirs = _functions(_module(wheel, "manager")) | _functions(_module(wheel, "decorators"))
    for name in SHARED_FUNCTIONS:
        refused = [p for p in _params(theirs[name]) if not _accepts(getattr(jobs, name), p)]
        assert not refused, f"{name} does not take Snowflake's {refused}"


def test_every_parameter_of_mljobs_methods(wheel: zipfile.ZipFile) -> None:
    [cls] = [n for n in _module(wheel, "job").body if isinstance(n, ast.ClassDef) and n.name == "MLJob"]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    for name in MLJOB_METHODS:
        ours = inspect.signature(getattr(jobs.MLJob, name)).parameters
        refused = [p for p in _params(methods[name]) if p not in ours]
        assert not refused, f"MLJob.{name} does not take Snowflake's {refused}"


def test_every_parameter_of_code_bundles_and_job_definitions(wheel: zipfile.ZipFile) -> None:
    theirs = _functions(_module(wheel, "code_bundle"))
    for name in BUNDLE_FUNCTIONS:
        refused = [p for p in _params(theirs[name]) if not _accepts(getattr(jobs, name), p)]
        assert not refused, f"{name} does not take Snowflake's {refused}"
    [cls] = [n for n in _module(wheel, "job_definition").body if isinstance(n, ast.ClassDef) and n.name == "MLJobDefinition"]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    for name in ("__init__", "register", "__call__", "delete"):
        ours = getattr(jobs.MLJobDefinition, name)
        refused = [p for p in _params(methods[name]) if p not in ("cls",) and not _accepts(ours, p)]
        assert not refused, f"MLJobDefinition.{name} does not take Snowflake's {refused}"
