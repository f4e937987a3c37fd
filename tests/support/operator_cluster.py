"""Helpers of the operator's cluster tests: the operator as a subprocess against the local cluster (watching
only the test's namespace, so tests never see each other's jobs), manifests, and waiting for a job's phase."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 60.0
# The suite's workers share the three cpu nodes, one instance of a pool per node: a job's instances may wait for
# another test's job to end. A gate that is not the test's subject leaves room for that wait, and so does the
# test's wait for the job's end, which stays inside pytest-timeout's 600 s so that it is the wait that says why.
GATE_S = 420
JOB_WAIT_S = GATE_S + 120.0
# Short on purpose: the suite's wall time is dominated by these waits.
OPERATOR_ENV = {
    "KUBEPOOL_OPERATOR_METRICS_PORT": "0",
    "KUBEPOOL_OPERATOR_LIVENESS_PORT": "0",
    "KUBEPOOL_OPERATOR_WORKER_GRACE_SECONDS": "5",
    "KUBEPOOL_OPERATOR_POD_TERMINATION_GRACE_SECONDS": "3",
    # Local nodes share the host's network: shift each instance's Ray ports (see OperatorConfig).
    "KUBEPOOL_OPERATOR_RAY_PORT_STRIDE": "3000",
}


def operator_env() -> dict[str, str]:
    return dict(OPERATOR_ENV)


@dataclass
class Operator:
    """The operator running as `python -m kubepool.controller --namespace NS` in a subprocess."""

    kubeconfig: Path
    namespace: str
    log_path: Path
    standalone: bool = True  # False: coordinate with other replicas through kopf peering
    metrics_port: int = 0  # serve /metrics on 127.0.0.1 at this port (0: off)
    env: dict[str, str] = field(default_factory=dict)  # more KUBEPOOL_OPERATOR_* settings for this operator
    args: tuple[str, ...] = ()  # more command-line arguments
    verbose: bool = True  # --verbose (debug logs); off, `args` set the level and `start` cannot wait for a line
    proc: subprocess.Popen[bytes] | None = None
    starts: int = field(default=0)

    def start(self, wait: bool = True) -> None:
        """Start the operator; with `wait`, until it is configured (a standby of leader election never is)."""
        assert self.proc is None, "the operator is already running"
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **operator_env(), **self.env}
        if self.metrics_port:
            env.update(KUBEPOOL_OPERATOR_METRICS_PORT=str(self.metrics_port), KUBEPOOL_OPERATOR_BIND_ADDRESS="127.0.0.1")
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubepool.controller", "--namespace", self.namespace,
             *(["--verbose"] if self.verbose else []), *(["--standalone"] if self.standalone else []), *self.args],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
        )
        self.starts += 1
        if not wait:
            return
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        # Objects created before the watches start are handled when they do: "configured" is enough.
        while self.logs().count("kubepool operator configured") < self.starts:
            assert self.proc.poll() is None, f"the operator exited:\n{self.logs()[-4000:]}"
            assert time.monotonic() < deadline, f"the operator did not start:\n{self.logs()[-4000:]}"
            time.sleep(0.3)

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> dict[str, float]:
        """The operator's Prometheus samples, `name{labels}` → value (needs metrics_port)."""
        assert self.metrics_port, "the operator was started without a metrics port"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out


def mljob(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": name}, "spec": spec}


def install_peering_crds(kubectl: Any) -> None:
    """kopf's own peering CRDs (as in kopf's docs; status holds each peer's identity and priority)."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
              "properties": {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    for kind, plural, scope in (("KopfPeering", "kopfpeerings", "Namespaced"),
                                ("ClusterKopfPeering", "clusterkopfpeerings", "Cluster")):
        crd: dict[str, Any] = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                               "metadata": {"name": f"{plural}.kopf.dev"},
                               "spec": {"group": "kopf.dev", "scope": scope,
                                        "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                                        "versions": [{"name": "v1", "served": True, "storage": True,
                                                      "schema": {"openAPIV3Schema": schema}}]}}
        kubectl("apply", "-f", "-", input=json.dumps(crd), check=True)
        kubectl.wait_established(crd["metadata"]["name"])


def get_json(kubectl: Any, namespace: str, *what: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(kubectl("get", *what, "-n", namespace, "-o", "json", check=True).stdout)
    return out


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def wait_phase(kubectl: Any, namespace: str, job: str, phases: set[str], timeout: float,
               op: Operator | None = None) -> dict[str, Any]:
    """Waits until the job's phase is one of `phases`; returns its status."""
    def status() -> dict[str, Any] | None:
        st = get_json(kubectl, namespace, "mljob", job).get("status") or {}
        return st if st.get("phase") in phases else None

    try:
        result: dict[str, Any] = wait_for(status, timeout, f"MLJob {job} in {sorted(phases)}")
        return result
    except AssertionError as e:
        current = get_json(kubectl, namespace, "mljob", job).get("status")
        pods = kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
        tail = op.logs()[-3000:] if op else ""
        raise AssertionError(f"{e}\nstatus: {json.dumps(current, indent=1)}\npods:\n{pods}\noperator:\n{tail}") from None


def free_port() -> int:
    """A free TCP port on the loopback address, for an operator's metrics endpoint."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_passes(op: Operator) -> int | None:
    """The job passes the operator finished, by its own metrics (`kubepool_reconcile_seconds_count`, 0 from its
    start); None where it serves none (no metrics port, not started), so a check of 0 cannot pass on silence."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    m = re.search(r"^kubepool_reconcile_seconds_count\s+([0-9.e+]+)$", text, re.MULTILINE)
    return int(float(m.group(1))) if m else None
