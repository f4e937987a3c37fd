"""One pod's lifecycle on a local node (`PodWorker`): IP, volumes, /etc/hosts, init containers in order,
containers with their restart policy and back-off, activeDeadlineSeconds, status reporting, graceful
deletion, and adoption of runs a previous agent process left running."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import shutil
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.core.client import PatchType
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret

from kubepool.local.agent import runner
from kubepool.local.agent.config import ClusterInfo, Layout, NodeConfig, default_path, image_paths
from kubepool.local.agent.ipam import Ipam
from kubepool.local.agent.podspec import (
    ConfigError,
    ContainerState,
    Defaults,
    EnvSources,
    Mount,
    command_line,
    conditions,
    decode_secret,
    env_references,
    plan_mounts,
    pod_phase,
    resolve_env,
    run_as,
    will_restart,
)
from kubepool.local.agent.probes import Prober
from kubepool.local.agent.runner import Run
from kubepool.local.agent.volumes import VolumeError, Volumes

Obj = dict[str, Any]
log = logging.getLogger(__name__)
RETRY_S = 2.0
BACKOFF_START_S, BACKOFF_MAX_S = 5.0, 160.0
MESSAGE_MAX = 4096
FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES = 80, 2048
VOLUME_REFRESH_S = 60.0  # ConfigMap/Secret/token projections follow their sources (tokens last an hour)
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeContext:
    """What every pod worker of the node shares."""

    client: AsyncClient
    layout: Layout
    node: NodeConfig
    cluster: ClusterInfo
    ipam: Ipam
    allocatable: Mapping[str, str]
    hosts: Callable[[Obj, str], str]  # (pod, its IP) → its /etc/hosts as the namespace stands now


def termination_message(run_dir: Path, policy: str, exit_code: int) -> str:
    """The container's termination message file, or its log's tail with FallbackToLogsOnError."""
    path = run_dir / runner.TERMINATION_LOG
    text = path.read_bytes()[:MESSAGE_MAX].decode("utf-8", "replace") if path.exists() else ""
    if not text and policy == "FallbackToLogsOnError" and exit_code != 0 and (run_dir / runner.LOG).exists():
        lines = (run_dir / runner.LOG).read_bytes().splitlines()[-FALLBACK_LOG_LINES:]
        text = b"\n".join(lines)[-FALLBACK_LOG_BYTES:].decode("utf-8", "replace")
    return text


class PodWorker:
    def __init__(self, ctx: NodeContext, pod: Obj, on_done: Callable[[str], None]) -> None:
        self.ctx = ctx
        self.pod = pod
        meta = pod["metadata"]
        self.uid, self.ns, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.dir = ctx.layout.pod_dir(self.uid)
        self.on_done = on_done
        spec = pod["spec"]
        self.policy: str = spec.get("restartPolicy") or "Always"
        self.init_states = [
            ContainerState(c["name"], c.get("image", "")) for c in spec.get("initContainers") or []
        ]
        self.states = [ContainerState(c["name"], c.get("image", "")) for c in spec["containers"]]
        self.runs: dict[str, Run] = {}
        self.ip: str | None = None
        self.initialized = not self.init_states
        self.init_failed = False
        self.failure: tuple[str, str] | None = None  # pod-level (reason, message), e.g. DeadlineExceeded
        self.stopping = False  # being deleted: nothing restarts, so the phase becomes terminal
        self.start_time: str | None = (pod.get("status") or {}).get("startTime")
        self.volumes = Volumes(ctx.client, pod, self.dir, ctx.allocatable)
        self.volume_sources: dict[str, str] = {}
        self.dirty = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.lifecycle: asyncio.Task[None] | None = None
        self.terminating: asyncio.Task[None] | None = None
        self.status_sent: Obj | None = None

    # --- entry points used by the agent -----------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=getattr(coro, "__qualname__", "pod task"))
        task.add_done_callback(self._log_failure)
        return task

    def _log_failure(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("pod %s/%s: %s failed", self.ns, self.name, task.get_name(), exc_info=task.exception())

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "pod.json").write_text(
            json.dumps({"namespace": self.ns, "name": self.name, "uid": self.uid})
        )
        self.tasks.append(self._spawn(self._status_loop()))
        if (self.pod.get("status") or {}).get("phase") not in TERMINAL:
            self.lifecycle = self._spawn(self._lifecycle())
        if self.pod["metadata"].get("deletionTimestamp"):
            self.update(self.pod)

    def update(self, pod: Obj) -> None:
        self.pod = pod
        self.volumes.pod = pod  # downward API files follow label and annotation changes
        if pod["metadata"].get("deletionTimestamp") and self.terminating is None:
            meta, spec = pod["metadata"], pod["spec"]
            grace = meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30))
            self.terminating = self._spawn(self._terminate(float(grace), delete=True))

    def gone(self) -> None:
        """The pod object was removed (force deletion): stop at once."""
        if self.terminating is None:
            self.terminating = self._spawn(self._terminate(0, delete=False))

    async def shutdown(self) -> None:
        """The agent stops: stop the processes, and mark the runs so the next agent starts them again."""
        for task in [self.lifecycle, *self.tasks]:
            if task is not None:
                task.cancel()
        for run in self.runs.values():
            if run.alive():
                (run.dir / runner.AGENT_STOPPED).touch()
        await asyncio.gather(*(r.stop(2.0) for r in self.runs.values()))

    def write_hosts(self, content: str) -> None:
        path = self.dir / "etc-hosts"
        if self.ip is None or (path.exists() and path.read_text() == content):
            return
        # In place, not by rename: containers see this file through a bind mount of its inode.
        with open(path, "a+") as f:
            f.seek(0)
            f.truncate()
            f.write(content)

    def log_run(self, container: str, previous: bool) -> Run | None:
        """The run whose log `kubectl logs [--previous]` shows."""
        latest = runner.latest_run(self.dir / "containers" / container)
        if latest is None:
            return None
        n = latest[0] - (1 if previous else 0)
        return self.runs.get(container) if not previous and container in self.runs else runner.find(self.dir / "containers" / container / str(n))  # fmt: skip

    # --- lifecycle -----------------------------------------------------------------------------------------
    async def _lifecycle(self) -> None:
        host_network = bool(self.pod["spec"].get("hostNetwork"))
        self.ip = self.ctx.node.ip if host_network else self.ctx.ipam.ip_for(self.uid)
        self.start_time = self.start_time or runner.now()
        for sub in ("home", "tmp"):
            (self.dir / sub).mkdir(exist_ok=True)
        (self.dir / "tmp").chmod(0o1777)
        uid = run_as(self.pod, {}).uid
        if uid is not None:
            os.chown(self.dir / "home", uid, -1)
        # Names must resolve from the first instruction on, before any watch event refreshes the file.
        self.write_hosts(self.ctx.hosts(self.pod, self.ip))
        self._mark()
        self.volume_sources = await self._until_ok(
            self.volumes.materialize, [*self.init_states, *self.states]
        )
        self.tasks.append(self._spawn(self._refresh_volumes()))
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        if deadline is not None:
            self.tasks.append(self._spawn(self._deadline(float(deadline))))
        for spec, state in zip(self.pod["spec"].get("initContainers") or [], self.init_states, strict=True):
            for s in self.states:
                s.state = {"waiting": {"reason": "PodInitializing"}}
            while True:
                code = await self._run_once(spec, state)
                if code == 0:
                    break
                if self.policy == "Never":
                    self.init_failed = True
                    self._mark()
                    return
                await self._back_off(state, code)
        self.initialized = True
        self._mark()
        await asyncio.gather(
            *(
                self._keep_running(c, s)
                for c, s in zip(self.pod["spec"]["containers"], self.states, strict=True)
            )
        )

    async def _keep_running(self, spec: Obj, state: ContainerState) -> None:
        while True:
            code = await self._run_once(spec, state)
            if not will_restart(self.policy, code):
                return
            await self._back_off(state, code)

    async def _back_off(self, state: ContainerState, code: int) -> None:
        delay = min(BACKOFF_START_S * 2 ** min(state.restart_count, 10), BACKOFF_MAX_S)
        state.last_state = {"terminated": state.state["terminated"]}
        state.state = {"waiting": {"reason": "CrashLoopBackOff",
                                   "message": f"back-off {delay:.0f}s restarting failed container={state.name} pod={self.name}_{self.ns}({self.uid})"}}  # fmt: skip
        self._mark()
        await asyncio.sleep(delay)
        state.restart_count += 1

    async def _run_once(self, spec: Obj, state: ContainerState) -> int:
        """Run (or adopt) one run of a container to its end; returns its exit code."""
        cdir = self.dir / "containers" / state.name
        latest = runner.latest_run(cdir)
        run: Run | None = None
        if (
            latest is not None
            and latest[0] >= state.restart_count
            and not (latest[1] / runner.AGENT_STOPPED).exists()
        ):
            state.restart_count = latest[0]
            run = runner.find(latest[1])  # left by a previous agent process: adopt it, or take its exit
        if run is None:
            run_dir = cdir / str(state.restart_count)
            sandbox = await self._until_ok(lambda: self._sandbox_spec(spec, run_dir), [state])
            run = await runner.start(run_dir, sandbox)
        self.runs[state.name] = run
        state.state = {"running": {"startedAt": run.started_at}}
        state.ready = spec.get("readinessProbe") is None  # without a readiness probe, running is ready
        self._mark()
        probing = self._spawn(self._probe(spec, state, run)) if any(f"{k}Probe" in spec for k in ("startup", "liveness", "readiness")) else None  # fmt: skip
        try:
            info = await run.wait()
        finally:
            if probing is not None:
                probing.cancel()
        code = int(info["exitCode"])
        message = info.get("message") or termination_message(
            run.dir, spec.get("terminationMessagePolicy") or "File", code
        )
        terminated: Obj = {"exitCode": code, "reason": info.get("reason") or ("Completed" if code == 0 else "Error"),
                           "startedAt": run.started_at, "finishedAt": info.get("finishedAt") or runner.now(),
                           "containerID": f"kubepool://{state.name}-{state.restart_count}"}  # fmt: skip
        if message:
            terminated["message"] = message
        state.state = {"terminated": terminated}
        state.ready = False
        self._mark()
        return code

    async def _probe(self, spec: Obj, state: ContainerState, run: Run) -> None:
        """Startup probe first; then readiness alongside liveness, which restarts the container on failure."""
        assert self.ip is not None
        env = json.loads((run.dir / runner.SPEC).read_text())["env"]

        def prober(kind: str) -> Prober | None:
            probe = spec.get(f"{kind}Probe")
            return Prober(probe, spec, self.ip or "", run.pid, env) if probe is not None else None

        async def kill(probe: Obj) -> None:
            grace = probe.get(
                "terminationGracePeriodSeconds", self.pod["spec"].get("terminationGracePeriodSeconds", 30)
            )
            await run.stop(float(grace))

        startup = prober("startup")
        if startup is not None and not await startup.startup():
            log.info("pod %s/%s: container %s failed its startup probe", self.ns, self.name, state.name)
            await kill(spec["startupProbe"])
            return

        def set_ready(ready: bool) -> None:
            state.ready = ready and state.running
            self._mark()

        readiness = prober("readiness")
        reporting = self._spawn(readiness.readiness(set_ready)) if readiness is not None else None
        liveness = prober("liveness")
        try:
            if liveness is not None:
                await liveness.until_failed()
                log.info("pod %s/%s: container %s failed its liveness probe", self.ns, self.name, state.name)
                await kill(spec["livenessProbe"])
            elif reporting is not None:
                await reporting
        finally:
            if reporting is not None:
                reporting.cancel()

    async def _until_ok(self, step: Callable[[], Any], waiting: list[ContainerState]) -> Any:
        """Retry `step` while the pod's configuration is incomplete, showing why on the waiting containers."""
        while True:
            try:
                return await step()
            except ConfigError as e:
                reason, message = "CreateContainerConfigError", str(e)
            except VolumeError as e:
                reason, message = "ContainerCreating", f"MountVolume.SetUp failed: {e}"
            except ApiError as e:
                reason, message = "ContainerCreating", f"apiserver: {e.status.message}"
            except Exception as e:  # noqa: BLE001 - the apiserver may be unreachable for a while: retry
                reason, message = "ContainerCreating", f"apiserver: {e!r}"
            for s in waiting:
                s.state = {"waiting": {"reason": reason, "message": message}}
            self._mark()
            await asyncio.sleep(RETRY_S)

    async def _sandbox_spec(self, spec: Obj, run_dir: Path) -> Obj:
        cms, secrets = env_references([spec])
        sources = EnvSources(
            configmaps={n: d for n in cms if (d := await self._data(ConfigMap, n)) is not None},
            secrets={n: d for n in secrets if (d := await self._data(Secret, n)) is not None},
        )
        assert self.ip is not None
        self.pod.setdefault("status", {}).update({"podIP": self.ip, "hostIP": self.ctx.node.ip})
        hostname = self.pod["spec"].get("hostname") or self.name
        defaults = Defaults(default_path(), str(self.dir / "home"), hostname,
                            self.ctx.cluster.apiserver_host, self.ctx.cluster.apiserver_port)  # fmt: skip
        env = resolve_env(self.pod, spec, sources, defaults, self.ctx.allocatable)
        argv = command_line(spec, env)
        user = run_as(self.pod, spec)
        if os.geteuid() != 0:
            user = run_as({}, {})  # an unprivileged agent cannot switch users
        mounts = [Mount(str(self.dir / "tmp"), "/tmp"), Mount(str(self.dir / "etc-hosts"), "/etc/hosts")]
        mounts += plan_mounts(spec, self.volume_sources)
        msg_path = spec.get("terminationMessagePath") or "/dev/termination-log"
        mounts.append(
            Mount(str(run_dir / runner.TERMINATION_LOG), msg_path, optional=True)
        )  # made by runner.start
        return {
            "argv": argv, "env": env, "cwd": spec.get("workingDir"), "hostname": hostname,
            "mounts": [{"source": m.source, "target": m.target, "readOnly": m.read_only, "optional": m.optional} for m in mounts],
            "keepPaths": [*image_paths(), str(self.dir / "home")],
            "uid": user.uid, "gid": user.gid, "groups": list(user.groups) if user.uid is not None else None,
        }  # fmt: skip

    async def _data(self, kind: type[ConfigMap] | type[Secret], name: str) -> dict[str, str] | None:
        try:
            obj = (await self.ctx.client.get(kind, name, namespace=self.ns)).to_dict()
        except ApiError as e:
            if e.status.code == 404:
                return None
            raise
        return decode_secret(obj.get("data")) if kind is Secret else dict(obj.get("data") or {})

    async def _refresh_volumes(self) -> None:
        while True:
            await asyncio.sleep(VOLUME_REFRESH_S)
            try:
                await self.volumes.materialize()
            except Exception as e:  # noqa: BLE001 - the next refresh may work; the old files stay meanwhile
                log.warning("pod %s/%s: refreshing volumes: %r", self.ns, self.name, e)

    async def _deadline(self, seconds: float) -> None:
        started = datetime.datetime.strptime(self.start_time or runner.now(), "%Y-%m-%dT%H:%M:%SZ")
        elapsed = (datetime.datetime.now(datetime.UTC) - started.replace(tzinfo=datetime.UTC)).total_seconds()
        await asyncio.sleep(max(seconds - elapsed, 0))
        self.failure = ("DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
        if self.lifecycle is not None:
            self.lifecycle.cancel()
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        await asyncio.gather(*(r.stop(grace) for r in self.runs.values()))
        self._mark_stopped()

    def _mark_stopped(self) -> None:
        for state in [*self.init_states, *self.states]:
            if "terminated" not in state.state:
                run = self.runs.get(state.name)
                info: Obj = run.exit_info() if run else {"exitCode": 137, "finishedAt": runner.now()}
                state.state = {"terminated": {"exitCode": int(info["exitCode"]), "reason": "Error",
                                              "finishedAt": info["finishedAt"], "startedAt": run.started_at if run else None}}  # fmt: skip
                state.ready = False
        self._mark()

    async def _terminate(self, grace: float, delete: bool) -> None:
        self.stopping = True
        if self.lifecycle is not None:
            self.lifecycle.cancel()
        await asyncio.gather(*(r.stop(grace) for r in [*self.runs.values(), *self._left_behind()]))
        if delete:
            if (self.pod.get("status") or {}).get("phase") not in TERMINAL and self.lifecycle is not None:
                self._mark_stopped()
                await self._flush_status()
            await self._delete_object()
        for task in self.tasks:
            task.cancel()
        self.volumes.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.on_done(self.uid)

    def _left_behind(self) -> list[Run]:
        """Runs a previous agent process left that this worker has not adopted (yet): a pod found terminating
        when the agent starts is stopped before its lifecycle ever adopts them, and its processes must go too."""
        adopted = {r.dir for r in self.runs.values()}
        found = (runner.find(d) for d in self.dir.glob("containers/*/*") if d.name.isdigit() and d not in adopted)
        return [r for r in found if r is not None]

    async def _delete_object(self) -> None:
        """Remove the pod object (grace 0, as the kubelet does once its containers are gone), retrying
        while the apiserver is unreachable."""
        while True:
            try:
                await self.ctx.client.delete(Pod, self.name, namespace=self.ns, grace_period=0)
                return
            except ApiError as e:
                if e.status.code == 404:
                    return
                log.warning("pod %s/%s: delete: %s", self.ns, self.name, e.status.message)
            except Exception as e:  # noqa: BLE001 - transport errors: retry
                log.warning("pod %s/%s: delete: %r", self.ns, self.name, e)
            await asyncio.sleep(RETRY_S)

    # --- status --------------------------------------------------------------------------------------------
    def _mark(self) -> None:
        self.dirty.set()

    def status(self) -> Obj:
        phase = pod_phase("Never" if self.stopping else self.policy, self.init_failed, self.states)
        if not self.initialized and not self.init_failed:
            phase = "Pending"
        if self.failure is not None:
            phase = "Failed"
        previous = (self.pod.get("status") or {}).get("conditions") or []
        status: Obj = {
            "phase": phase,
            "conditions": conditions(self.initialized, self.states, runner.now(), previous),
            "hostIP": self.ctx.node.ip,
            "hostIPs": [{"ip": self.ctx.node.ip}],
            "startTime": self.start_time,
            "containerStatuses": [s.to_status() for s in self.states],
        }
        if phase in TERMINAL:
            for c in status["conditions"]:
                if c["type"] in ("Ready", "ContainersReady"):
                    c.update(
                        {"status": "False", "reason": "PodCompleted" if phase == "Succeeded" else "PodFailed"}
                    )
        if self.ip:
            status.update({"podIP": self.ip, "podIPs": [{"ip": self.ip}]})
        if self.init_states:
            status["initContainerStatuses"] = [s.to_status() for s in self.init_states]
        if self.failure is not None:
            status["reason"], status["message"] = self.failure
        return status

    async def _status_loop(self) -> None:
        while True:
            await self.dirty.wait()
            await asyncio.sleep(0.05)  # coalesce bursts of changes into one patch
            await self._flush_status()

    async def _flush_status(self) -> None:
        self.dirty.clear()
        status = self.status()
        if status == self.status_sent:
            return
        try:
            await self.ctx.client.patch(
                Pod.Status, self.name, {"status": status}, namespace=self.ns, patch_type=PatchType.MERGE
            )
            self.status_sent = status
            self.pod.setdefault("status", {}).update(status)
        except Exception as e:  # noqa: BLE001 - transport errors too: keep the status for the next try
            if isinstance(e, ApiError) and e.status.code == 404:
                return
            log.warning("pod %s/%s: status patch: %r", self.ns, self.name, e)
            self.dirty.set()
            await asyncio.sleep(RETRY_S)
