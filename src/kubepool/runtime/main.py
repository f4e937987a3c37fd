"""The instance supervisor: what `python -m kubepool.runtime` does on every instance of a job.

1. Reads the contract and this instance's identity; prepares the SageMaker tree and channel data.
2. Head mode (Snowflake's default): starts or joins the Ray cluster. The head runs the launcher (payload)
   and, when it ends, tells the workers to leave and stops Ray; workers wait for that word.
3. Per-instance (`parallel`) and `sagemaker` modes: every instance runs the launcher with its topology env.
SIGTERM stops the payload and Ray and exits 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from kubepool import naming
from kubepool import payload_format as payload
from kubepool.contract import (
    DEFAULT_BASE_DIR,
    DEFAULT_HEAD_LOST_TIMEOUT_SECONDS,
    DEFAULT_RAY_TEMP_DIR,
    ENV_BASE_DIR,
    ENV_HEAD_LOST_TIMEOUT,
    ENV_INSTANCE_ID,
    ENV_PAYLOAD_DIR,
    ENV_RAY_PORT_OFFSET,
    ENV_RAY_TEMP_DIR,
    ENV_TERMINATION_LOG,
    PAYLOAD_DIR,
    PIP_DIR,
    PIP_INSTALL_FAILED,
    TERMINATION_MESSAGE_PATH,
    InstanceIdentity,
    JobContract,
    RunMode,
    load_contract,
    resolve_replica_index,
)
from kubepool.runtime import (
    channels,
    checkpoints,
    hosts,
    outputs,
    pip,
    ray_node,
    result,
    sagemaker,
    script_mode,
    shutdown,
    snowflake,
)

LEAVE_ACK_SECONDS = 15.0  # Snowflake's signal_workers --wait-time
CHILD_STOP_SECONDS = 10.0
# The head's own start is not part of the instances timeout: Snowflake's clock starts in the launcher.
HEAD_START_SECONDS = 180.0
EXIT_SIGTERM = 128 + signal.SIGTERM


class Terminated(Exception):
    """SIGTERM arrived; unwinds to the cleanup in `finally` blocks."""


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one unwind; a second signal must not interrupt cleanup
    raise Terminated()


def log(msg: str) -> None:
    print(f"kubepool[{os.environ.get(ENV_INSTANCE_ID, '?')}]: {msg}", flush=True)


def fail(msg: str, env: Mapping[str, str], code: int = 1, reason: str | None = None) -> int:
    """An instance that fails before or around the payload still tells the operator why (and, for failures
    the runtime names, the reason the job gets)."""
    log(msg)
    res = result.ExecutionResult(False, code, error=msg, reason=reason)
    instance_id = int(env.get(ENV_INSTANCE_ID, "-1"))
    result.write_termination_log(Path(env.get(ENV_TERMINATION_LOG, TERMINATION_MESSAGE_PATH)), res, instance_id)
    return code


def unpack_payload(mounted: Path, env: Mapping[str, str]) -> Path:
    """The SDK ships code as a flat ConfigMap plus a manifest (`kubepool.payload_format`): rebuild its tree in
    SageMaker's code dir, which is writable. Code without a manifest (a PVC, the image) runs where it is."""
    if not (mounted / payload.MANIFEST_KEY).is_file():
        return mounted
    code_dir = sagemaker.Layout(Path(env.get(ENV_BASE_DIR, DEFAULT_BASE_DIR))).code_dir
    files = payload.unpack(mounted, code_dir)
    log(f"payload: {len(files)} files in {code_dir}")
    return code_dir


def prepare_script(contract: JobContract, env: dict[str, str], unpacked: bool) -> script_mode.ScriptMode | None:
    """Script mode (sagemaker_program, sagemaker_submit_directory): the source dir extracted into the code dir,
    its requirements installed, the payload dir pointed at it; None when the job is not in script mode."""
    sm = script_mode.of(contract)
    if sm is None:
        return None
    if sm.submit_dir is None:
        code_dir = Path(env.get(ENV_PAYLOAD_DIR, PAYLOAD_DIR))
    elif unpacked:  # the SDK's ConfigMap code was unpacked where the source dir would go: two sources, refused
        raise script_mode.ScriptModeError(f"the job ships code and names {script_mode.SUBMIT_DIR_HP} "
                                          f"{sm.submit_dir}: give one")
    else:
        code_dir = sagemaker.Layout(Path(env.get(ENV_BASE_DIR, DEFAULT_BASE_DIR))).code_dir
        done = script_mode.fetch(sm, sm.submit_dir, code_dir, env, script_mode.job_s3_endpoint(contract))
        if script_mode.says(sm):
            log(f"script mode: {done}")
    new_env, pipped = script_mode.install(sm, code_dir, Path(PIP_DIR), env)
    env.update(new_env)
    if pipped and script_mode.says(sm):
        log(f"script mode: {script_mode.REQUIREMENTS}: {pipped}")
    env[ENV_PAYLOAD_DIR] = str(code_dir)
    env.update(script_mode.environment(sm, env))
    return sm


def prepare(contract: JobContract, me: InstanceIdentity, env: Mapping[str, str], gpus: int,
            script: script_mode.ScriptMode | None = None) -> dict[str, str]:
    """Writes /opt/ml (config files, channel data) and returns the SM_* env for this instance."""
    problem = sagemaker.framework_problem(env)  # after pip: the job's requirements may bring the framework
    if problem:
        raise sagemaker.FrameworkMismatch(problem)
    layout = sagemaker.Layout(Path(env.get(ENV_BASE_DIR, DEFAULT_BASE_DIR)))
    tenv = sagemaker.training_env(
        contract,
        me,
        layout,
        num_cpus=contract.group_of(me.group).whole_cpus,
        num_gpus=gpus,
        module_dir=env.get(ENV_PAYLOAD_DIR, PAYLOAD_DIR),
        entry=script_mode.training_entry(script, Path(env.get(ENV_PAYLOAD_DIR, PAYLOAD_DIR))) if script else None,
    )
    sagemaker.write_config_files(layout, tenv, sagemaker.hyperparameters(contract))
    placed = channels.materialize(contract, me, layout.data_dir, env)
    for name, keys in placed.items():
        log(f"channel {name}: {len(keys)} objects")
    return {**sagemaker.env_vars(tenv), **sagemaker.torchrun_env(contract, me, tenv)}


def run_launcher(env: Mapping[str, str]) -> int:
    proc = subprocess.Popen([sys.executable, "-m", "kubepool.runtime.launcher"], env=dict(env))
    try:
        code = proc.wait()
        if code < 0:  # killed (the OOM killer's SIGKILL, say) before it could report: report for it
            return fail(f"the payload was killed by signal {-code}", env, 128 - code)
        return code
    finally:
        if proc.poll() is None:  # only on SIGTERM: stop the payload before Ray goes away under it
            proc.terminate()
            try:
                proc.wait(CHILD_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_head(contract: JobContract, me: InstanceIdentity, spec: ray_node.NodeSpec, env: dict[str, str]) -> int:
    server = shutdown.ShutdownServer(spec.pod_ip, naming.SHUTDOWN_PORT, ray_node.auth_token(env))
    server.start()  # before Ray: a worker that reaches the GCS can always reach this too
    node: ray_node.RayNode | None = None
    try:
        node = ray_node.start_node(contract, me, spec, env, time.monotonic() + HEAD_START_SECONDS)
        assert node is not None  # the head never gives up early
        log(f"Ray head started on {spec.pod_ip}:{contract.ray.gcs_port}")
        code = run_launcher({**env, **snowflake.head_env(contract, me, spec.pod_ip)})
        log(f"the launcher exited with code {code}")
        return code
    finally:
        server.request_leave()
        missing = server.wait_acks(LEAVE_ACK_SECONDS)
        if missing:
            log(f"workers {sorted(missing)} did not acknowledge the shutdown")
        if node is not None:
            node.stop()
        server.close()


def run_worker(contract: JobContract, me: InstanceIdentity, spec: ray_node.NodeSpec, env: dict[str, str], deadline: float) -> int:
    token = ray_node.auth_token(env)
    watch = shutdown.HeadWatch(
        shutdown.poll_url(spec.head_ip, naming.SHUTDOWN_PORT, me.instance_id),
        float(env.get(ENV_HEAD_LOST_TIMEOUT, DEFAULT_HEAD_LOST_TIMEOUT_SECONDS)),
        ask=lambda url: shutdown.ask_head(url, token),
    )
    node = ray_node.start_node(contract, me, spec, env, deadline, give_up=lambda: watch.check() is not None)
    if node is None:
        outcome = watch.outcome
    else:
        log(f"Worker node started on {spec.pod_ip}, joined {spec.head_ip}:{contract.ray.gcs_port}")
        try:
            outcome = shutdown.await_leave(watch, node_alive=node.alive)
        finally:
            node.stop()
    if outcome is shutdown.WorkerOutcome.LEAVE:
        log("the head finished the job; leaving")
        return 0
    return fail(f"leaving without the head's word: {outcome.value if outcome else 'unknown'}", env)


def run_ray_mode(contract: JobContract, me: InstanceIdentity, env: dict[str, str], gpus: int, deadline: float) -> int:
    pod_ip = hosts.pod_ip(env)
    spec = ray_node.NodeSpec(
        pod_ip=pod_ip,
        head_ip=pod_ip if me.is_head else hosts.resolve(contract.head_address, deadline),
        temp_dir=Path(env.get(ENV_RAY_TEMP_DIR, DEFAULT_RAY_TEMP_DIR)),
        port_offset=int(env[ENV_RAY_PORT_OFFSET]) if ENV_RAY_PORT_OFFSET in env else None,
        gpus=gpus,
    )
    ray_env = ray_node.ray_env(contract, env)
    if me.is_head:
        return run_head(contract, me, spec, ray_env)
    return run_worker(contract, me, spec, ray_env, deadline)


def parallel_ips(contract: JobContract, me: InstanceIdentity, env: Mapping[str, str], deadline: float) -> list[str]:
    """Snowflake's static topology: the IPs of the instances that take part, in instance order. This instance's
    own is the pod's (its DNS record may not exist yet). The first minInstances must resolve (until the instances
    timeout); the others may never exist (the operator admits a job with fewer than target when the pool is
    short), so each gets until the min wait and is left out if it has no address by then."""
    optional_until = min(deadline, time.monotonic() + contract.effective_min_wait())
    ips = []
    for inst in sorted(contract.instances, key=lambda i: i.instance_id):
        if inst.instance_id == me.instance_id:
            ips.append(hosts.pod_ip(env))
        elif inst.instance_id < contract.min_instances:
            ips.append(hosts.resolve(inst.dns, deadline))
        else:
            try:
                ips.append(hosts.resolve(inst.dns, optional_until))
            except OSError:
                log(f"instance {inst.instance_id} ({inst.dns}) has no address: running without it")
    return ips


def run(env: dict[str, str]) -> int:
    contract, instance_id = load_contract(env)
    me = contract.identity(instance_id)
    # An instance's own wait to reach its peers counts from its start: one added later by scale_cluster gets the
    # whole timeout. The head's gate, which fails the job, counts from its own start (launcher.gate_instances).
    deadline = time.monotonic() + contract.instances_timeout_seconds
    log(f"{contract.job_name}: instance {me.instance_id} ({me.host}, group {me.group}), mode {contract.mode.value}")
    mounted = Path(env.get(ENV_PAYLOAD_DIR, PAYLOAD_DIR))
    env[ENV_PAYLOAD_DIR] = str(unpack_payload(mounted, env))
    if contract.pip_requirements:  # before Ray and the payload: both start with the packages in place
        log(f"pip: installing {len(contract.pip_requirements)} requirement(s) into {PIP_DIR}")
        pip_env, done = pip.install(contract.pip_requirements, Path(PIP_DIR), env)
        env.update(pip_env)
        log(f"pip: {done}")
    script = prepare_script(contract, env, unpacked=env[ENV_PAYLOAD_DIR] != str(mounted))
    gpus = ray_node.detect_gpus()
    sm_env = prepare(contract, me, env, gpus, script)
    outputs.claim(contract, env)  # an earlier same-name job's outputs are never overwritten: refused here
    syncer = start_checkpoints(contract, env)
    try:
        code = run_payload(contract, me, env, sm_env, gpus, deadline)
    finally:
        if syncer is not None:
            log(f"checkpoints: {len(syncer.stop())} file(s) uploaded at the end")
    return finish(contract, me, env, code)


def start_checkpoints(contract: JobContract, env: Mapping[str, str]) -> checkpoints.Syncer | None:
    """An S3 checkpoint location: restore it into the checkpoint dir, then keep it in sync while the payload runs."""
    if contract.checkpoint_s3 is None:
        return None
    local = sagemaker.Layout(Path(env.get(ENV_BASE_DIR, DEFAULT_BASE_DIR))).base / "checkpoints"
    local.mkdir(parents=True, exist_ok=True)
    restored = checkpoints.restore(contract.checkpoint_s3, local, env)
    log(f"checkpoints: {len(restored)} file(s) restored from {contract.checkpoint_s3.location}")
    syncer = checkpoints.Syncer(contract.checkpoint_s3, local, env)
    syncer.mark_current()
    syncer.start()
    return syncer


def run_payload(contract: JobContract, me: InstanceIdentity, env: dict[str, str], sm_env: Mapping[str, str], gpus: int,
                deadline: float) -> int:
    if contract.mode is RunMode.HEAD:
        return run_ray_mode(contract, me, env, gpus, deadline)
    if contract.mode is RunMode.SAGEMAKER:
        env.update(sm_env)  # peers are names (algo-N, MASTER_ADDR): the script resolves what it uses
    else:
        env.update(snowflake.parallel_env(me, parallel_ips(contract, me, env, deadline)))
    return run_launcher(env)


def finish(contract: JobContract, me: InstanceIdentity, env: Mapping[str, str], code: int) -> int:
    """After the payload: its own failure words (/opt/ml/output/failure) become the instance's message, and its
    outputs are kept (spec.output); outputs that cannot be kept fail an instance that succeeded."""
    layout = sagemaker.Layout(Path(env.get(ENV_BASE_DIR, DEFAULT_BASE_DIR)))
    said = outputs.failure_reason(layout) if code else None
    try:
        for where in outputs.keep(contract, me, layout, env):
            log(f"output: {where}")
    except Exception as e:  # noqa: BLE001 - storage errors of any kind: the job must say its outputs are lost
        return fail(f"outputs could not be kept: {type(e).__name__}: {e}", env, code or 1)
    return fail(said, env, code) if said else code


def main() -> int:
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        os.environ.update(resolve_replica_index(os.environ))  # a KubeRay worker learns its instance here
        return run(dict(os.environ))
    except Terminated:
        return fail("SIGTERM: stopped the payload and Ray", os.environ, EXIT_SIGTERM)
    except ray_node.RayStartError as e:
        return fail(str(e), os.environ)
    except pip.PipInstallFailed as e:
        return fail(str(e), os.environ, reason=PIP_INSTALL_FAILED)
    except Exception as e:  # noqa: BLE001 - whatever stops an instance, the operator gets the reason
        traceback.print_exc()
        return fail(f"{type(e).__name__}: {e}", os.environ)
