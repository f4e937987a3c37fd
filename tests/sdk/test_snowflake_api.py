"""kubepool.jobs against the public API of Snowflake's `snowflake.ml.jobs` as published (snowflake-ml-python
2.6.0, read from its wheel with `ast`, never imported): every public name, every parameter of the shared
functions and of MLJob's methods, positional where Snowflake's are, and every keyword option its option parsing
pops out of `**kwargs` — each honoured or refused with a ValueError that names it, never dropped with a log line
(#38 item 1). What kubepool does not have yet is listed in GAPS, so closing one or opening a new one fails this
test until the list says so."""

from __future__ import annotations

import ast
import inspect
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kubepool import jobs
from kubepool.jobs import options

# Public names of snowflake.ml.jobs that kubepool does not offer yet (issue #17 item 4): each needs a Kubernetes
# meaning (a stage is an S3 prefix or a PVC path; a code bundle a stored payload many jobs reuse), never a stub.
GAPS: set[str] = set()
SHARED_FUNCTIONS = ("submit_file", "submit_directory", "submit_from_stage", "list_jobs", "get_job", "delete_job", "remote")
BUNDLE_FUNCTIONS = ("register_code_bundle", "register_job_from_code_bundle", "delete_code_bundle")
MLJOB_METHODS = ("get_logs", "show_logs", "wait", "result", "distributed_result", "cancel", "get_ray_dashboard_url")


def _module(wheel: zipfile.ZipFile, name: str) -> ast.Module:
    return ast.parse(wheel.read(f"snowflake/ml/jobs/{name}.py").decode())


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg != "self"]


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _accepts(fn: Any, param: str) -> bool:
    """Taken by name, or through **kwargs where it is one of Snowflake's options (each checked by
    test_every_keyword_option_is_honoured_or_refused)."""
    ps = inspect.signature(fn).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ps.values())
    return param in ps or (takes_kwargs and param in options.SNOWFLAKE_OPTIONS)


def _positional(fn: ast.FunctionDef) -> list[str]:
    return [x.arg for x in fn.args.posonlyargs + fn.args.args if x.arg not in ("self", "cls")]


def _our_positional(fn: Any) -> list[str]:
    return [n for n, p in inspect.signature(fn).parameters.items()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) and n != "self"]


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


def test_positional_parameters_are_where_snowflakes_are(wheel: zipfile.ZipFile) -> None:
    """`get_job(id, session)`, `delete_job(job, session)`, `list_jobs(10, None, None, session)`,
    `show_logs(limit, instance_id, verbose)`: Snowflake's positional parameters, in its order, are ours."""
    theirs = _functions(_module(wheel, "manager")) | _functions(_module(wheel, "decorators"))
    for name in SHARED_FUNCTIONS:
        want = _positional(theirs[name])
        assert _our_positional(getattr(jobs, name))[:len(want)] == want, f"{name}: Snowflake's positional {want}"
    [cls] = [n for n in _module(wheel, "job").body if isinstance(n, ast.ClassDef) and n.name == "MLJob"]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    for name in MLJOB_METHODS:
        want = _positional(methods[name])
        assert _our_positional(getattr(jobs.MLJob, name))[:len(want)] == want, f"MLJob.{name}: Snowflake's positional {want}"


def _popped(fn: ast.FunctionDef) -> set[str]:
    """The keys a Snowflake function takes out of its kwargs: `kwargs.pop("key", ...)` and `"key" in kwargs`."""
    keys = set()
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "pop"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "kwargs" and node.args
                and isinstance(node.args[0], ast.Constant)):
            keys.add(node.args[0].value)
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.ops[0], ast.In)
                and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == "kwargs"):
            keys.add(node.left.value)
    return keys


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    [c] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    [m] = [n for n in c.body if isinstance(n, ast.FunctionDef) and n.name == name]
    return m


def _passed(fn: ast.FunctionDef, callee: str) -> set[str]:
    """The keywords `fn` passes to `callee` itself (a caller cannot give those through its own kwargs)."""
    return {k.arg for node in ast.walk(fn) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == callee for k in node.keywords if k.arg}


def snowflake_keyword_options(wheel: zipfile.ZipFile) -> dict[str, set[str]]:
    """Per public function, the options Snowflake takes through its **kwargs (read from the code that pops them)."""
    common = _popped(_functions(ast.parse(wheel.read("snowflake/ml/jobs/_utils/option_parsing.py").decode()))["pop_common_options"])
    manager, decorators = _functions(_module(wheel, "manager")), _functions(_module(wheel, "decorators"))
    create = _popped(_method(_module(wheel, "job_definition"), "MLJobDefinition", "_create")) | common
    submit_job = manager["_submit_job"]
    out = {name: (create | _popped(submit_job)) - set(_params(submit_job)) - set(_params(manager[name]))
           for name in ("submit_file", "submit_directory", "submit_from_stage")}
    out["remote"] = create - _passed(decorators["remote"], "_create") - set(_params(decorators["remote"]))
    bundle = _functions(_module(wheel, "code_bundle"))["register_code_bundle"]
    out["register_code_bundle"] = (_popped(bundle) | common) - set(_params(bundle))
    register = _method(_module(wheel, "job_definition"), "MLJobDefinition", "register")
    out["MLJobDefinition.register"] = create - set(_params(register))
    return out


# A value each option is given (a set one: a refusal shows).
SAMPLES: dict[str, Any] = {
    "min_instances": 1, "parallel": True, "preflight": "wiring", "env_vars": {"A": "1"}, "enable_metrics": False,
    "imports": [], "runtime_environment": "registry.example/runtime:1", "artifact_repositories": ["repo"],
    "database": "DB", "schema": "team", "query_warehouse": "WH", "name": "named", "comment": "a comment",
    "spec_overrides": {}, "num_instances": 2, "additional_payloads": [], "secrets": ["hf-token"],
    "external_access_integrations": ["PYPI"], "overwrite": True, "default_args": ["--x", "1"], "payload": object(),
    "arg_protocol": "cli", "entrypoint": "train.py", "pip_requirements": ["tqdm"], "target_instances": 2,
}


def _call(fn_name: str, tmp_path: Path, **kw: Any) -> Any:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    if fn_name == "submit_file":
        return jobs.submit_file(script, "cpu", **kw)
    if fn_name == "submit_directory":
        return jobs.submit_directory(tmp_path, "cpu", entrypoint="train.py", **kw)
    if fn_name == "submit_from_stage":
        return jobs.submit_from_stage("configmap://code", "cpu", entrypoint="train.py", **kw)
    if fn_name == "register_code_bundle":
        return jobs.register_code_bundle(script, "cpu", None, **kw)
    if fn_name == "MLJobDefinition.register":
        return jobs.MLJobDefinition.register(script, "cpu", **{"overwrite": True, **kw})

    def fn() -> int:
        return 1

    return jobs.remote("cpu", **kw)(fn)()


def test_every_keyword_option_is_honoured_or_refused(wheel: zipfile.ZipFile, fake_kube: Any, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Every option Snowflake's functions take through **kwargs: a clear ValueError naming it, or taken with no
    'ignoring' warning (its effect: tests/sdk/unit/test_options.py)."""
    dropped = []
    for name, keys in snowflake_keyword_options(wheel).items():
        for key in sorted(keys):
            caplog.clear()
            try:
                _call(name, tmp_path, **{key: SAMPLES[key]})
            except ValueError as e:
                assert key in str(e) or key == "parallel", f"{name}({key}=...) refused without naming it: {e}"
                continue
            if any("ignoring" in r.getMessage().lower() for r in caplog.records):
                dropped.append(f"{name}({key}=...)")
    assert not dropped, f"accepted and dropped: {dropped}"
