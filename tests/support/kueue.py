"""Kueue's own controller manager on the local cluster: built from Go modules (hack/kueue/build.sh), its CRDs
applied, running as a host process under its own identity (a client certificate bound to Kueue's manager
ClusterRole), configured with MLJob as an external framework. Its webhooks are not registered with the API
server (they would need a Service the API server can reach); its controllers and scheduler are Kueue's own.

Kueue reads its metrics certificate from a fixed /etc/kueue/metrics/certs when it manages no certificates of
its own: it runs in a mount namespace of its own where /etc is an overlay, so the host's /etc is never written."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubepool import naming
from kubepool.local.flags import kubeconfig
from kubepool.local.pki import issue_cert

ROOT = Path(__file__).resolve().parents[2]
USER = "kubepool-test-kueue"
NAMESPACE = "kueue-system"
STARTUP_TIMEOUT_S = 120.0


def build() -> Path:
    """Kueue's cache directory (bin/kueue, crds/, rbac/), built on first use with its progress on stderr."""
    proc = subprocess.run(["bash", str(ROOT / "hack" / "kueue" / "build.sh")], stdout=subprocess.PIPE, stderr=sys.stderr,
                          text=True, timeout=3600)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"hack/kueue/build.sh failed (exit {proc.returncode}); its output is above")
    return Path(proc.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_pair(directory: Path, cert: bytes, key: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert)
    (directory / "tls.key").write_bytes(key)
    (directory / "tls.key").chmod(0o600)


def rbac(role: dict[str, Any], secrets_role: dict[str, Any]) -> list[dict[str, Any]]:
    """Kueue's manager ClusterRole and its Role on the Secrets of its namespace (renamed for the test), bound to
    the test's Kueue user."""
    name = f"{USER}-manager"
    subjects = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]
    secrets_meta = {"name": name, "namespace": NAMESPACE}
    return [{**role, "metadata": {"name": name}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}, "subjects": subjects},
            {**secrets_role, "metadata": secrets_meta},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": secrets_meta,
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}, "subjects": subjects}]


def wait_for_pods_ready(timeout_s: int, backoff_limit: int, backoff_base_s: int = 1) -> dict[str, Any]:
    """Kueue's waitForPodsReady: an admitted Workload not PodsReady within `timeout_s` is evicted and requeued
    after a backoff (`backoff_base_s`, doubling), deactivated after `backoff_limit` requeues."""
    return {"timeout": f"{timeout_s}s", "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": backoff_limit,
                                  "backoffBaseSeconds": backoff_base_s, "backoffMaxSeconds": 4 * backoff_base_s}}


def config(health_port: int, webhook_port: int, cert_dir: Path, pods_ready: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**({"waitForPodsReady": pods_ready} if pods_ready else {}),
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job"], "externalFrameworks": [naming.KUEUE_EXTERNAL_FRAMEWORK]}}


@dataclass
class Kueue:
    proc: subprocess.Popen[bytes]
    log_path: Path
    health_url: str

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(cluster: Any, kubectl: Any, work: Path, pods_ready: dict[str, Any] | None = None) -> Kueue:
    """Build (cached), install and start Kueue (with `pods_ready` as its waitForPodsReady, if given); returns once
    its health endpoint answers."""
    work.mkdir(parents=True, exist_ok=True)
    cache = build()
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(cache / "crds"), check=True)
    for crd in ("workloads", "clusterqueues", "localqueues", "resourceflavors"):
        kubectl.wait_established(f"{crd}.kueue.x-k8s.io")
    kubectl("create", "namespace", NAMESPACE, check=False)
    role, secrets = (yaml.safe_load((cache / "rbac" / f).read_text()) for f in ("role.yaml", "manager_secrets_role.yaml"))
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(rbac(role, secrets)), check=True)
    pki = cluster.layout.pki
    cert, key = issue_cert(pki.ca_cert, pki.ca_key, cn=USER, client=True)
    kc = work / "kueue.kubeconfig"
    kc.write_text(json.dumps(kubeconfig(cluster.layout.apiserver_url, Path(pki.ca_cert).read_bytes(), cert, key, USER)))
    kc.chmod(0o600)
    server = issue_cert(pki.ca_cert, pki.ca_key, cn="kueue-webhook", dns=["localhost"], ips=["127.0.0.1"], server=True)
    _write_pair(work / "webhook-certs", *server)
    _write_pair(work / "metrics-certs", *server)
    health, webhook = _free_port(), _free_port()
    cfg = work / "kueue-config.yaml"
    cfg.write_text(yaml.safe_dump(config(health, webhook, work / "webhook-certs", pods_ready)))
    upper = Path(tempfile.mkdtemp(prefix="kueue-etc-", dir=work))
    (upper / "upper").mkdir()
    (upper / "work").mkdir()
    script = " && ".join([
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper}/upper,workdir={upper}/work /etc",
        "mkdir -p /etc/kueue/metrics",
        f"cp -r {shlex.quote(str(work / 'metrics-certs'))} /etc/kueue/metrics/certs",
        f"exec {shlex.quote(str(cache / 'bin' / 'kueue'))} --config={shlex.quote(str(cfg))} "
        f"--kubeconfig={shlex.quote(str(kc))} --zap-log-level=2 --feature-gates=VisibilityOnDemand=false",
    ])  # fmt: skip
    log_path = work / "kueue.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(work)})  # fmt: skip
    k = Kueue(proc, log_path, f"http://127.0.0.1:{health}/healthz")
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"Kueue exited ({proc.returncode}):\n{k.logs()[-4000:]}")
        try:
            with urllib.request.urlopen(k.health_url, timeout=2) as r:
                if r.status == 200:
                    return k
        except OSError:
            pass
        if time.monotonic() > deadline:
            k.stop()
            raise RuntimeError(f"Kueue not healthy after {STARTUP_TIMEOUT_S:.0f} s:\n{k.logs()[-4000:]}")
        time.sleep(0.5)


def running(cluster: Any, kubectl: Any, work: Path) -> Iterator[Kueue]:
    k = start(cluster, kubectl, work)
    try:
        yield k
    finally:
        k.stop()


def reconfigured(cluster: Any, kubectl: Any, current: Kueue, work: Path, pods_ready: dict[str, Any]) -> Iterator[Kueue]:
    """Kueue restarted with waitForPodsReady for one test (its configuration is read at start), then `current`'s
    process replaced by a plain one again (Kueue's state is the API server's: nothing is lost)."""
    current.stop()
    k = start(cluster, kubectl, work / "pods-ready", pods_ready)
    try:
        yield k
    finally:
        k.stop()
        plain = start(cluster, kubectl, work / "plain")
        current.proc, current.log_path, current.health_url = plain.proc, plain.log_path, plain.health_url
