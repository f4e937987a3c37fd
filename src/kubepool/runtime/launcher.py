"""Runs the user's entrypoint in its own process (`python -m kubepool.runtime.launcher`), as Snowflake's
`mljob_launcher.py` does: banners, the instance gate (head mode), the entrypoint, then the outcome.

Entrypoint kinds: a .py file (runpy, `sys.argv`, the `__return__` global is the value), a module, a
`function` of a file (@remote: imported or cloudpickled, called, its return value recorded) or a command list.
The process's exit code is the payload's.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import runpy
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import cloudpickle

from kubepool.contract import (
    DEFAULT_BASE_DIR,
    ENV_BASE_DIR,
    ENV_INSTANCE_ID,
    ENV_PAYLOAD_DIR,
    ENV_RESULT_DIR,
    ENV_TERMINATION_LOG,
    INSTANCES_UNAVAILABLE,
    PAYLOAD_DIR,
    TERMINATION_MESSAGE_PATH,
    Entrypoint,
    JobContract,
    RunMode,
    load_contract,
)
from kubepool.runtime import gate, result, result_store, script_mode, snowflake
from kubepool.runtime.sagemaker import Layout


def log(msg: str) -> None:
    print(f"kubepool[{os.environ.get(ENV_INSTANCE_ID, '?')}]: {msg}", flush=True)


def exit_code_of(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def load_function(path: Path, name: str) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    if path.suffix == ".pkl":
        obj = cloudpickle.loads(path.read_bytes())
        if isinstance(obj, tuple):
            fn, args, kwargs = obj
            return fn, tuple(args), dict(kwargs)
        return obj, (), {}
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # cloudpickle and dataclasses look the module up by name
    spec.loader.exec_module(module)
    return getattr(module, name), (), {}


def run_entrypoint(ep: Entrypoint, payload_dir: Path, extra_args: list[str]) -> tuple[int, Any]:
    """(exit code, return value). Exceptions propagate to the caller."""
    args = [*extra_args, *ep.args]
    workdir = payload_dir / ep.working_dir if ep.working_dir else payload_dir
    if workdir.is_dir():
        os.chdir(workdir)
    # Like Snowflake's launcher: the payload dir and its zips are importable.
    sys.path[:0] = [str(payload_dir), *(str(z) for z in sorted(payload_dir.glob("*.zip")))]
    if ep.command:
        return subprocess.run([*ep.command, *args]).returncode, None
    path = payload_dir / ep.path if ep.path else None
    try:
        if ep.function:
            if path is None:
                raise ValueError("entrypoint.function needs entrypoint.path")
            fn, fargs, kwargs = load_function(path, ep.function)
            return 0, fn(*fargs, *args, **kwargs)
        if ep.module:
            sys.argv = [ep.module, *args]
            runpy.run_module(ep.module, run_name="__main__", alter_sys=True)
            return 0, None
        if path is not None:
            sys.argv = [str(path), *args]
            globs = runpy.run_path(str(path), run_name="__main__")
            return 0, globs.get("__return__")
    except SystemExit as e:
        return exit_code_of(e), None
    raise ValueError("the entrypoint names no path, module, function or command")


def count_alive_nodes() -> int:
    import ray

    return sum(1 for n in ray.nodes() if n.get("Alive"))


def gate_instances(contract: JobContract, env: Mapping[str, str]) -> int:
    """Snowflake's wait_for_instances against this Ray cluster, its clock started here (after pip install, data
    download and Ray start) and tuned by the job's env as Snowflake's launcher is; the driver disconnects
    afterwards so the payload's own `ray.init(address="auto")` starts clean."""
    import ray

    spec = gate.spec_from_env(contract.target_instances, contract.min_instances, contract.instances_timeout_seconds,
                              contract.min_wait_seconds, env)
    ray.init(address=env["RAY_ADDRESS"], logging_level=logging.WARNING, log_to_driver=False)
    try:
        return gate.wait_for_instances(spec, count_alive_nodes, clock=time.monotonic, sleep=time.sleep, log=log)
    finally:
        ray.shutdown()


def hyperparameter_args(contract: JobContract, env: Mapping[str, str]) -> list[str]:
    """The hyperparameters as arguments (SM_USER_ARGS) for the program SageMaker mode runs as the toolkit does
    (script mode's program, an entry file or module). A command is SageMaker's ContainerEntrypoint (script mode
    refuses one): it runs with its own arguments alone, as on SageMaker (`bash --epochs 3 -c ...` is no command)."""
    if contract.mode is not RunMode.SAGEMAKER or contract.entrypoint.command:
        return []
    return list(json.loads(env.get("SM_USER_ARGS", "[]")))


def execute(contract: JobContract, env: Mapping[str, str]) -> result.ExecutionResult:
    payload_dir = Path(env.get(ENV_PAYLOAD_DIR, PAYLOAD_DIR))
    try:
        if contract.mode is RunMode.HEAD:
            gate_instances(contract, env)
    except gate.InstancesTimeoutError as e:  # instances that run but never joined: the job's reason says so
        log(str(e))
        return result.ExecutionResult(False, 1, error=f"{type(e).__name__}: {e}", reason=INSTANCES_UNAVAILABLE)
    except Exception as e:  # noqa: BLE001 - this cluster cannot be reached: the job fails with the reason
        log(f"cannot wait for instances: {e}")
        return result.ExecutionResult(False, 1, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
    script = script_mode.of(contract)  # script mode runs sagemaker_program as the toolkit would
    ep = script_mode.entrypoint(script, payload_dir, contract.entrypoint.args) if script else contract.entrypoint
    print(snowflake.LOG_START_MSG, flush=True)
    try:
        code, value = run_entrypoint(ep, payload_dir, hyperparameter_args(contract, env))
    except Exception as e:  # noqa: BLE001 - the payload's failure is the job's result, not a crash
        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)  # inside the banners: it is the payload's output
        return result.ExecutionResult(False, 1, error=f"{type(e).__name__}: {e}", traceback=tb, exception=e)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        print(snowflake.LOG_END_MSG, flush=True)
    if code != 0:
        return result.ExecutionResult(False, code, error=f"the payload exited with code {code}")
    return result.ExecutionResult(True, 0, value=value)


def report(res: result.ExecutionResult, contract: JobContract, instance_id: int, env: Mapping[str, str],
           patch: result_store.Patch | None = None) -> None:
    why_not = result_store.store(contract, instance_id, res, env, patch)
    if why_not:
        log(why_not)
    result.write_termination_log(Path(env.get(ENV_TERMINATION_LOG, TERMINATION_MESSAGE_PATH)), res, instance_id)
    if ENV_RESULT_DIR in env:
        result.write_result_file(Path(env[ENV_RESULT_DIR]), res)
    if contract.mode is RunMode.SAGEMAKER:
        # The toolkit's output/success | output/failure files.
        out = Layout(Path(env.get(ENV_BASE_DIR, DEFAULT_BASE_DIR))).output_dir
        out.mkdir(parents=True, exist_ok=True)
        marker = out / ("success" if res.success else "failure")
        if not marker.exists():  # the payload's own failure words win (they become the job's message)
            marker.write_text(res.error)


def main() -> int:
    env = dict(os.environ)
    contract, instance_id = load_contract(env)
    res = execute(contract, env)
    report(res, contract, instance_id, env)
    return res.exit_code


if __name__ == "__main__":
    sys.exit(main())
