"""Helpers of the fault suite: a recorder that watches MLJobs and pods for the whole test (phase sequences,
pod UIDs), invariant checks (no status goes backwards, no duplicated or orphaned pods), fault injectors
(operator kill, pod process kill, node-agent kill, apiserver kill) and small manifests.

Phases only move forward: PENDING → RUNNING → DONE/FAILED/CANCELLED; the one allowed step back is a retry
(reason Retrying, backoffLimit) or a suspension (reason Suspended)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubepool import naming
from support.operator_cluster import ROOT, get_json, wait_for

RANK = {"": 0, "PENDING": 1, "RUNNING": 2, "DONE": 3, "FAILED": 3, "CANCELLED": 3}
TERMINAL = {"DONE", "FAILED", "CANCELLED"}


def sleep_cmd(seconds: float, exit_code: int = 0) -> list[str]:
    return ["python", "-c", f"import sys, time; time.sleep({seconds}); sys.exit({exit_code})"]


def job(name: str, pool: str, cmd: list[str], *, mode: str = "parallel", **spec: Any) -> dict[str, Any]:
    """An MLJob running `cmd` on every instance (parallel mode: no Ray, cheap on 2 cores)."""
    body = {"computePool": pool, "entrypoint": {"command": cmd}, "mode": mode, "instancesTimeoutSeconds": 120, **spec}
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": name}, "spec": body}


@dataclass
class LiveInstances:
    """Pods that hold an instance now (Pending or Running; one being deleted while its node still runs it, too:
    its SIGTERM grace may still sync a checkpoint), by (job uid, instance id), fed from a pod watch's events;
    `violations` lists every moment two of them held one instance at once (a retry's new pods may only start
    once the earlier attempt's pods ended: plan._retry_after_earlier_attempts_ended)."""

    live: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod name → (job uid, instance)
    violations: list[str] = field(default_factory=list)

    def on_event(self, kind: str, name: str, job_uid: str, instance: str, deleting: bool, phase: str,
                 node: str = "") -> None:
        if kind == "DELETED" or (deleting and not node) or phase not in ("Pending", "Running") or not job_uid:
            self.live.pop(name, None)
            return
        key = (job_uid, instance)
        others = sorted(n for n, k in self.live.items() if k == key and n != name)
        self.live[name] = key
        if others:
            self.violations.append(f"{time.strftime('%H:%M:%S')} job uid {job_uid} instance {instance}: "
                                   f"{name} live with {', '.join(others)}")

    def reset(self) -> None:
        """A new watch lists every pod again: what the old stream knew may be stale."""
        self.live.clear()


@dataclass
class Recorder:
    """Watches the namespace's MLJobs and pods (kubectl watches, restarted when the API server drops them)."""

    kubectl: Any
    namespace: str
    phases: dict[str, list[tuple[float, str, str]]] = field(default_factory=dict)  # job → [(t, phase, reason)]
    pod_uids: dict[str, set[str]] = field(default_factory=dict)  # pod name → UIDs seen
    instances: LiveInstances = field(default_factory=LiveInstances)
    _stop: threading.Event = field(default_factory=threading.Event)
    _procs: list[subprocess.Popen[str]] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Recorder:
        jobs = "{range .items[*]}{.metadata.name}|{.status.phase}|{.status.reason}{\"\\n\"}{end}"
        one_job = "{.metadata.name}|{.status.phase}|{.status.reason}{\"\\n\"}"
        # A pod is named after its job and instance: keyed by its job's uid too, a job deleted and created again
        # under the same name is a new job (its pods new ones), not a pod recreated.
        pods = ("{.metadata.name}|{.metadata.uid}|{.metadata.labels." + naming.LABEL_JOB_UID.replace(".", "\\.")
                + "}{\"\\n\"}")
        self._spawn(["get", "mljobs", "-w", "-o", f"jsonpath={one_job}"], self._on_job)
        self._spawn(["get", "pods", "-w", "-l", f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}", "-o",
                     f"jsonpath={pods}"], self._on_pod)
        label = lambda key: "{.object.metadata.labels." + key.replace(".", "\\.") + "}"  # noqa: E731
        events = ("{.type}|{.object.metadata.name}|" + label(naming.LABEL_JOB_UID) + "|" + label(naming.LABEL_INSTANCE)
                  + "|{.object.metadata.deletionTimestamp}|{.object.status.phase}|{.object.spec.nodeName}{\"\\n\"}")
        self._spawn(["get", "pods", "-w", "--output-watch-events", "-l", f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}",
                     "-o", f"jsonpath={events}"], self._on_pod_event, on_restart=self._on_pod_relist)
        del jobs
        return self

    def _spawn(self, args: list[str], on_line: Any, on_restart: Any = None) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                if on_restart is not None:
                    on_restart()
                proc = subprocess.Popen([self.kubectl.binary, f"--kubeconfig={self.kubectl.kubeconfig}", "-n",
                                         self.namespace, *args, "--request-timeout=0"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                with self._lock:
                    self._procs.append(proc)
                assert proc.stdout is not None
                for line in proc.stdout:
                    if line.strip():
                        on_line(line.strip())
                proc.wait()
                self._stop.wait(0.5)  # the API server dropped the watch (or is down): watch again

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        self._threads.append(t)

    def _on_job(self, line: str) -> None:
        name, phase, reason = (line.split("|") + ["", ""])[:3]
        with self._lock:
            seq = self.phases.setdefault(name, [])
            if not seq or seq[-1][1:] != (phase, reason):
                seq.append((time.monotonic(), phase, reason))

    def _on_pod(self, line: str) -> None:
        name, uid, job_uid = (line.split("|") + ["", ""])[:3]
        with self._lock:
            self.pod_uids.setdefault(f"{name} of job {job_uid}", set()).add(uid)

    def _on_pod_event(self, line: str) -> None:
        kind, name, job_uid, instance, deleting, phase, node = (line.split("|") + [""] * 7)[:7]
        with self._lock:
            self.instances.on_event(kind, name, job_uid, instance, bool(deleting), phase, node)

    def _on_pod_relist(self) -> None:
        with self._lock:
            self.instances.reset()

    def duplicates_seen(self) -> list[str]:
        """Every moment of the whole test at which two live pods held one instance."""
        with self._lock:
            return list(self.instances.violations)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            for p in self._procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def first_time(self, job_name: str, phases: set[str]) -> float | None:
        with self._lock:
            return next((t for t, ph, _ in self.phases.get(job_name, []) if ph in phases), None)

    def first_reason(self, job_name: str, reason: str) -> float | None:
        with self._lock:
            return next((t for t, _, why in self.phases.get(job_name, []) if why == reason), None)

    def backwards(self) -> list[str]:
        """Jobs whose phase moved backwards (other than a retry), with their sequences."""
        bad = []
        with self._lock:
            for name, seq in self.phases.items():
                for (_, a, _), (_, b, why) in zip(seq, seq[1:], strict=False):
                    if not b:  # a status not written yet is never seen after one was
                        bad.append(f"{name}: {[(p, r) for _, p, r in seq]}")
                        break
                    if RANK[b] < RANK[a] and not (a == "RUNNING" and b == "PENDING" and why in ("Retrying", "Suspended")):
                        bad.append(f"{name}: {[(p, r) for _, p, r in seq]}")
                        break
                    if a in TERMINAL and b != a:
                        bad.append(f"{name}: {[(p, r) for _, p, r in seq]}")
                        break
        return bad

    def recreated_pods(self) -> dict[str, set[str]]:
        with self._lock:
            return {n: set(u) for n, u in self.pod_uids.items() if len(u) > 1}

    def doubled(self) -> list[str]:
        """What the fault tests assert empty (a pod name keyed by the fields compared could never see it): every
        moment two live pods held one instance (continuous, `LiveInstances`), and every pod name that had two
        UIDs (a pod deleted and created again, seen by the watch)."""
        return self.duplicates_seen() + [f"{n} recreated: uids {sorted(u)}" for n, u in self.recreated_pods().items()]


def phases_of(kubectl: Any, namespace: str) -> dict[str, dict[str, Any]]:
    items = get_json(kubectl, namespace, "mljobs")["items"]
    return {j["metadata"]["name"]: j.get("status") or {} for j in items}


def orphans(kubectl: Any, namespace: str) -> list[str]:
    """Managed pods that have no owner, or whose owner is no MLJob that exists."""
    jobs = {j["metadata"]["uid"] for j in get_json(kubectl, namespace, "mljobs")["items"]}
    pods = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}")["items"]
    out = []
    for p in pods:
        owners = [o["uid"] for o in p["metadata"].get("ownerReferences") or [] if o.get("kind") == "MLJob"]
        if not owners or not set(owners) <= jobs:
            out.append(p["metadata"]["name"])
    return out


def pods_of(kubectl: Any, namespace: str, job_name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={job_name}")["items"]
    return items


def pod_running(kubectl: Any, namespace: str, job_name: str, role: str | None = None, n: int = 1) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = [p for p in pods_of(kubectl, namespace, job_name) if p["status"].get("phase") == "Running"
                and (role is None or p["metadata"]["labels"].get(naming.LABEL_ROLE) == role)]
        return pods if len(pods) >= n else None

    out: list[dict[str, Any]] = wait_for(ready, 120, f"{n} running {role or ''} pods of {job_name}")
    return out


# --- process-level faults ------------------------------------------------------------------------------------
def state_dir(cluster: Any) -> Path:
    return Path(cluster.state_dir)


def pod_process_group(cluster: Any, pod: dict[str, Any]) -> int:
    """The pod's container run (sandbox supervisor; it leads its own process group) from the agent's state."""
    node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    runs = sorted((state_dir(cluster) / "nodes" / node / "pods" / uid / "containers").glob("*/*/pid"))
    assert runs, f"no container run of pod {pod['metadata']['name']} on {node}"
    return int(runs[-1].read_text().split()[0])


def kill_group(pgid: int) -> None:
    os.killpg(pgid, signal.SIGKILL)


def component_pid(cluster: Any, name: str) -> int:
    return int((state_dir(cluster) / "pids" / f"{name}.pid").read_text().split()[0])


def kill_component(cluster: Any, name: str) -> None:
    pid = component_pid(cluster, name)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and not _zombie(pid):
        time.sleep(0.1)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def local_up() -> None:
    """`kubepool local up`: restarts whatever is missing (idempotent)."""
    proc = subprocess.run([sys.executable, "-m", "kubepool.local.cli", "up"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def node_ready(kubectl: Any, node: str) -> bool:
    out = json.loads(kubectl("get", "node", node, "-o", "json", check=True).stdout)
    cond = next((c for c in out["status"].get("conditions", []) if c["type"] == "Ready"), {})
    return cond.get("status") == "True"


def wait_terminal(kubectl: Any, namespace: str, names: Iterable[str], timeout: float) -> dict[str, dict[str, Any]]:
    names = set(names)

    def done() -> dict[str, dict[str, Any]] | None:
        st = phases_of(kubectl, namespace)
        return st if all(st.get(n, {}).get("phase") in TERMINAL for n in names) else None

    try:
        out: dict[str, dict[str, Any]] = wait_for(done, timeout, f"jobs terminal: {sorted(names)}", interval=1.0)
        return out
    except AssertionError:
        st = phases_of(kubectl, namespace)
        raise AssertionError("jobs not terminal:\n" + "\n".join(
            f"  {n}: {st.get(n, {}).get('phase')} {st.get(n, {}).get('reason')} {st.get(n, {}).get('message')}"
            for n in sorted(names))) from None


def record(cluster: Any, test: str, *, faults: int, jobs: int, lost: int, orphaned: int, converge_s: float,
           **detail: Any) -> None:
    """Appends one test's figures to <state dir>/fault-figures.jsonl (docs/reliability.md sums them)."""
    line = {"test": test, "faults": faults, "jobs": jobs, "lost": lost, "orphaned": orphaned,
            "converge_s": round(converge_s, 1), "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **detail}
    with (state_dir(cluster) / "fault-figures.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")
