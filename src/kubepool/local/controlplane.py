"""The local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler on loopback.

Owns the state dir (`.kubepool/` at the repo root by default) and every process started from it:

    kubeconfig              admin kubeconfig (certs embedded)
    kubeconfigs/<c>.conf    the controller-manager's and scheduler's own identities
    pki/                    see `kubepool.local.pki`
    logs/<component>.log    one per process, appended across restarts
    pids/<component>.pid    "<pid> <start time in ticks>"; each process leads its own process group
    cluster.json            apiServer, kubernetesVersion, ports, serviceCIDR, clusterDomain, stateDir, binDir,
                            kubeconfig, caCert, caKey
    nodes.yaml              the local node config the node agents read
    etcd/, kwok.yaml, kube-scheduler.yaml

Flag builders are pure functions of a `Layout` so they can be unit-tested; `up`/`down`/`status` drive processes.
Node agents (`kubepool.local.agent`, one process per node) and kwok (`kubepool.local.kwok`) are started here too
so that one `down` stops everything `up` started.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import yaml

from kubepool.local import kwok
from kubepool.local.buildscript import run_build_script
from kubepool.local.pki import Pki, ensure_pki
from kubepool.local.realnode import nodes as realnodes
from kubepool.local.realnode.dns import DnsError
from kubepool.local.realnode.host import HostError
from kubepool.local.realnode.images import DEFAULT_IMAGES, ImageError
from kubepool.local.realnode.network import NetworkError, real_nodes_config

REPO_ROOT = Path(__file__).resolve().parents[3]  # a checkout's root (src/kubepool/local/); see IN_CHECKOUT
IN_CHECKOUT = (REPO_ROOT / "charts" / "kubepool").is_dir()
# A checkout keeps its cluster beside the code (`make` finds it there); an installed package in the user's state
# directory, as other tools' local clusters do.
DEFAULT_STATE_DIR = (REPO_ROOT / ".kubepool" if IN_CHECKOUT else
                     Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "kubepool")
# The binaries' build recipe ships in the package, so `kubepool local up` works after a `pip install` too.
K8S_BIN_DIR = Path(__file__).with_name("k8sbin")
BUILD_SCRIPT = K8S_BIN_DIR / "build.sh"
DEFAULT_NODES_CONFIG = Path(__file__).with_name("nodes.yaml")
VERSIONS_ENV = K8S_BIN_DIR / "versions.env"
SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DOMAIN = "cluster.local"
AGENT_MODULE = "kubepool.local.agent"
# Start order; `down` stops in reverse. Agents and kwok come last: they need a serving apiserver.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

Log = Callable[[str], None]
REAL_NODE_ERRORS = (realnodes.RealNodeError, HostError, ImageError, DnsError, NetworkError)


# Slot N's ports are the default ones + 10·N: they stay in the gaps between the Ray port windows of local jobs'
# instances (instance k takes ~6480-7083 and ~8180-8780 shifted by 3000·k), as the default ports do.
SLOT_PORT_STRIDE = 10
MAX_SLOT = 6  # slot 6 ends at 127.232.0.0/16; the bench keeps 127.0.9.x and 127.24x for itself


def slot_nodes_config(slot: int, base: Path = DEFAULT_NODES_CONFIG) -> str:
    """`base`'s nodes on addresses of their own for the `slot`-th cluster beside the default one (slot 0):
    node IPs move by 10·slot in the third octet, pod ranges by 20·slot in the second, so two clusters'
    kubelet endpoints, pods and Ray ports never meet on the host's shared loopback."""
    if not 0 <= slot <= MAX_SLOT:
        raise ClusterError(f"slot {slot} is out of range 0..{MAX_SLOT}")
    doc = yaml.safe_load(base.read_text()) or {}
    for node in doc.get("nodes") or []:
        a, b, c, d = str(node["ip"]).split(".")
        node["ip"] = f"{a}.{b}.{int(c) + 10 * slot}.{d}"
        net, prefix = str(node["podCIDR"]).split("/")
        a, b, c, d = net.split(".")
        node["podCIDR"] = f"{a}.{int(b) + 20 * slot}.{c}.{d}/{prefix}"
    return yaml.safe_dump(doc, sort_keys=False)


def default_state_dir() -> Path:
    """`$KUBEPOOL_STATE_DIR`, else `.kubepool/` at the repo root (the env lets a session run its own cluster)."""
    return Path(os.environ.get("KUBEPOOL_STATE_DIR") or DEFAULT_STATE_DIR).resolve()


def kube_version() -> str:
    """The pinned Kubernetes version (hack/k8s-bin/versions.env, the build's single source of truth)."""
    for line in VERSIONS_ENV.read_text().splitlines():
        if line.startswith("KUBE_VERSION="):
            return line.split("=", 1)[1].strip()
    raise ValueError(f"no KUBE_VERSION in {VERSIONS_ENV}")


class ClusterError(RuntimeError):
    """The cluster could not be brought to the requested state; the message says why (with a log tail)."""


@dataclass(frozen=True)
class Ports:
    """Loopback ports, chosen away from the common defaults (2379, 6443, 10257, 10259) to avoid clashes."""

    etcd: int = 12379
    etcd_peer: int = 12380
    apiserver: int = 16443
    controller_manager: int = 16257
    scheduler: int = 16259
    kwok: int = 16280
    coredns_ready: int = 16281  # real nodes' CoreDNS `ready` endpoint (kubepool.local.realnode.dns)

    def shifted(self, offset: int) -> Ports:
        return Ports(**{k: v + offset for k, v in asdict(self).items()})

    def free(self) -> bool:
        """Every one of these ports can be bound on loopback now: no other cluster holds it."""
        for port in asdict(self).values():
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    return False
        return True


@dataclass(frozen=True)
class Layout:
    """Where everything of one local cluster lives, and its fixed network facts."""

    state_dir: Path
    bin_dir: Path
    ports: Ports = field(default_factory=Ports)
    service_cidr: str = SERVICE_CIDR
    cluster_domain: str = CLUSTER_DOMAIN
    slot: int = 0  # which cluster beside the default one: real nodes take the slot's address ranges

    @property
    def pki(self) -> Pki:
        return Pki(self.state_dir / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    def component_kubeconfig(self, name: str) -> Path:
        return self.state_dir / "kubeconfigs" / f"{name}.conf"

    @property
    def cluster_json(self) -> Path:
        return self.state_dir / "cluster.json"

    @property
    def nodes_yaml(self) -> Path:
        return self.state_dir / "nodes.yaml"

    @property
    def scheduler_config(self) -> Path:
        return self.state_dir / "kube-scheduler.yaml"

    @property
    def etcd_data(self) -> Path:
        return self.state_dir / "etcd"

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def log(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    def pid(self, name: str) -> Path:
        return self.state_dir / "pids" / f"{name}.pid"

    def bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120.0) -> str:
        """Run the cached kubectl as admin; return stdout, raise ClusterError with stderr on failure."""
        proc = subprocess.run(
            [self.bin("kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, timeout=timeout,
        )
        if proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def to_json(self) -> dict[str, Any]:
        return {
            "apiServer": self.apiserver_url,
            "kubernetesVersion": kube_version(),
            "ports": asdict(self.ports),
            "serviceCIDR": self.service_cidr,
            "clusterDomain": self.cluster_domain,
            "stateDir": str(self.state_dir),
            "binDir": str(self.bin_dir),
            "kubeconfig": str(self.kubeconfig),
            "caCert": str(self.pki.ca_cert),
            "caKey": str(self.pki.ca_key),
            "slot": self.slot,
        }

    @classmethod
    def load(cls, state_dir: Path) -> Layout | None:
        path = state_dir / "cluster.json"
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return cls(
            state_dir=state_dir,
            bin_dir=Path(raw["binDir"]),
            ports=Ports(**raw["ports"]),
            service_cidr=raw["serviceCIDR"],
            cluster_domain=raw["clusterDomain"],
            slot=int(raw.get("slot", 0)),
        )


# ---------------------------------------------------------------------------------------------------------
# Flag builders (pure).


def etcd_url(lay: Layout) -> str:
    return f"https://127.0.0.1:{lay.ports.etcd}"


def etcd_args(lay: Layout) -> list[str]:
    p = lay.pki
    peer = f"https://127.0.0.1:{lay.ports.etcd_peer}"
    client = etcd_url(lay)
    # TLS with client-cert auth on both ports: loopback is shared with every process of the host, and etcd
    # holds every Secret in the clear.
    tls = [f"--cert-file={p.cert('etcd')}", f"--key-file={p.key('etcd')}", f"--trusted-ca-file={p.ca_cert}",
           "--client-cert-auth=true"]
    peer_tls = [f"--peer-cert-file={p.cert('etcd')}", f"--peer-key-file={p.key('etcd')}",
                f"--peer-trusted-ca-file={p.ca_cert}", "--peer-client-cert-auth=true"]
    return [
        lay.bin("etcd"),
        "--name=local",
        f"--data-dir={lay.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=local={peer}",
        *tls,
        *peer_tls,
        # A throwaway test store: durability is not worth the fsync latency on a shared disk.
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
        "--quota-backend-bytes=8589934592",
        "--max-request-bytes=10485760",  # large CRDs (KubeRay's are ~1 MiB)
        "--log-level=warn",
    ]


def apiserver_args(lay: Layout) -> list[str]:
    p = lay.pki
    return [
        lay.bin("kube-apiserver"),
        f"--etcd-servers={etcd_url(lay)}",
        f"--etcd-cafile={p.ca_cert}",
        f"--etcd-certfile={p.cert('apiserver-etcd-client')}",
        f"--etcd-keyfile={p.key('apiserver-etcd-client')}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports.apiserver}",
        # Loopback advertise address: the endpoint reconciler rejects loopback endpoints, so turn it off.
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={p.cert('apiserver')}",
        f"--tls-private-key-file={p.key('apiserver')}",
        f"--client-ca-file={p.ca_cert}",
        f"--service-account-issuer=https://kubernetes.default.svc.{lay.cluster_domain}",
        f"--service-account-key-file={p.sa_pub}",
        f"--service-account-signing-key-file={p.sa_key}",
        f"--service-cluster-ip-range={lay.service_cidr}",
        "--authorization-mode=Node,RBAC",
        "--allow-privileged=true",
        f"--kubelet-client-certificate={p.cert('kubelet-client')}",
        f"--kubelet-client-key={p.key('kubelet-client')}",
        "--kubelet-preferred-address-types=InternalIP",
        # Node agents serve certs from the same CA with their InternalIP as SAN: verify them for real.
        f"--kubelet-certificate-authority={p.ca_cert}",
        f"--cert-dir={lay.state_dir / 'pki' / 'generated'}",
        # Room for scale tests (1000 pods from 100 fake nodes) on top of the defaults (400/200).
        "--max-requests-inflight=1000",
        "--max-mutating-requests-inflight=500",
    ]


def controller_manager_args(lay: Layout) -> list[str]:
    p = lay.pki
    return [
        lay.bin("kube-controller-manager"),
        f"--kubeconfig={lay.component_kubeconfig('controller-manager')}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports.controller_manager}",
        "--leader-elect=false",  # a single instance: skip the lease wait on every restart
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={p.sa_key}",
        f"--root-ca-file={p.ca_cert}",
        f"--cluster-signing-cert-file={p.ca_cert}",
        f"--cluster-signing-key-file={p.ca_key}",
        f"--service-cluster-ip-range={lay.service_cidr}",
        "--cluster-name=kubepool-local",
        # Default client QPS (20) makes a 1000-replica Deployment take ~50 s just to create its pods.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--concurrent-replicaset-syncs=10",
    ]


def scheduler_config(lay: Layout) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(lay.component_kubeconfig("scheduler")),
            "qps": 200,
            "burst": 400,
        },
        "leaderElection": {"leaderElect": False},
    }


def scheduler_args(lay: Layout) -> list[str]:
    return [
        lay.bin("kube-scheduler"),
        f"--config={lay.scheduler_config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports.scheduler}",
    ]


def agent_args(lay: Layout, node: str) -> list[str]:
    return [sys.executable, "-m", AGENT_MODULE, "--state-dir", str(lay.state_dir), "--node", node]


def kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubepool-local", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": "kubepool-local", "context": {"cluster": "kubepool-local", "user": user}}],
        "current-context": "kubepool-local",
    }


# ---------------------------------------------------------------------------------------------------------
# Components: how to start one and how to tell it is healthy.


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]
    health_url: str | None  # None: alive is healthy (its readiness shows elsewhere, e.g. Node Ready)
    startup_timeout: float = 60.0
    # A running process whose command line differs (new flags or binaries) is restarted by `up`. Not for
    # agents: restarting one restarts its pods, which only the agent's owner should decide.
    restart_on_change: bool = True


def control_plane(lay: Layout) -> list[Component]:
    return [
        Component("etcd", etcd_args(lay), f"{etcd_url(lay)}/health"),
        Component("kube-apiserver", apiserver_args(lay), f"{lay.apiserver_url}/readyz"),
        Component(
            "kube-controller-manager",
            controller_manager_args(lay),
            f"https://127.0.0.1:{lay.ports.controller_manager}/healthz",
        ),
        Component("kube-scheduler", scheduler_args(lay), f"https://127.0.0.1:{lay.ports.scheduler}/healthz"),
    ]


def kwok_component(lay: Layout) -> Component:
    return Component(kwok.NAME, kwok.args(lay), kwok.health_url(lay))


def _ssl_context(lay: Layout, url: str) -> ssl.SSLContext | bool:
    if not url.startswith("https://"):
        return True
    for server, client in ((lay.apiserver_url, "admin"), (etcd_url(lay), "apiserver-etcd-client")):
        if url.startswith(server):
            ctx = ssl.create_default_context(cafile=str(lay.pki.ca_cert))
            ctx.load_cert_chain(str(lay.pki.cert(client)), str(lay.pki.key(client)))
            return ctx
    return False  # kcm/scheduler serve a self-signed cert on loopback; /healthz is all we ask of them


def healthy(lay: Layout, comp: Component) -> bool:
    if not alive(lay, comp.name):
        return False
    if comp.health_url is None:
        return True
    try:
        r = httpx.get(comp.health_url, verify=_ssl_context(lay, comp.health_url), timeout=2.0)
    except (httpx.HTTPError, ssl.SSLError, OSError):
        return False
    return r.status_code == 200


def _read_pid_file(lay: Layout, name: str) -> tuple[int, int] | None:
    """(pid, start time in clock ticks) from `pids/<name>.pid`."""
    try:
        pid, ticks = lay.pid(name).read_text().split()
        return int(pid), int(ticks)
    except (FileNotFoundError, ValueError):
        return None


def read_pid(lay: Layout, name: str) -> int | None:
    entry = _read_pid_file(lay, name)
    return entry[0] if entry else None


def _start_ticks(pid: int) -> int | None:
    """The process's start time (/proc/<pid>/stat field 22), None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive(lay: Layout, name: str) -> bool:
    """The process `up` started for `name` still runs: pid and start time match, so a recycled pid never
    counts (and is never signalled)."""
    entry = _read_pid_file(lay, name)
    return entry is not None and _start_ticks(entry[0]) == entry[1]


def running_argv(lay: Layout, name: str) -> list[str] | None:
    pid = read_pid(lay, name)
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes() if pid is not None else b""
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] or None


def log_tail(lay: Layout, name: str, lines: int = 20) -> str:
    try:
        text = lay.log(name).read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def start(lay: Layout, comp: Component) -> subprocess.Popen[bytes]:
    lay.log(comp.name).parent.mkdir(parents=True, exist_ok=True)
    lay.pid(comp.name).parent.mkdir(parents=True, exist_ok=True)
    with lay.log(comp.name).open("ab") as log:
        log.write(f"\n==== {time.strftime('%H:%M:%S')} start: {' '.join(comp.argv)}\n".encode())
        log.flush()
        # A new session makes the process its own group leader: `down` signals the whole group, and the
        # process survives the `up` command that started it.
        proc = subprocess.Popen(
            comp.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=lay.state_dir, start_new_session=True,
        )
    ticks = _start_ticks(proc.pid)
    tmp = lay.pid(comp.name).with_suffix(".tmp")
    tmp.write_text(f"{proc.pid} {ticks if ticks is not None else -1}\n")
    tmp.replace(lay.pid(comp.name))  # atomic: a reader never sees an empty pid file
    return proc


def stop(lay: Layout, name: str, timeout: float = 10.0) -> bool:
    """Stop the process group of `name` if its process is still the one `up` started; True when it was."""
    ours = alive(lay, name)
    pid = read_pid(lay, name)
    lay.pid(name).unlink(missing_ok=True)
    if pid is None or not ours:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _start_ticks(pid) is not None:
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)  # stragglers in the group, or a process that ignored SIGTERM
    except ProcessLookupError:
        pass
    return True


def wait_healthy(lay: Layout, comps: Iterable[Component]) -> list[Component]:
    """Wait until each component is healthy or has died or timed out; return the ones that failed."""
    pending = list(comps)
    start_t = time.monotonic()
    while pending:
        pending = [c for c in pending if not healthy(lay, c)]
        if not pending:
            break
        failed = [c for c in pending if not alive(lay, c.name) or time.monotonic() - start_t > c.startup_timeout]
        if failed:
            return failed
        time.sleep(0.2)
    return []


def _exit_reason(proc: subprocess.Popen[bytes] | None) -> str:
    code = None if proc is None else proc.poll()
    if code is None:
        return "still running"
    return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


def ensure(lay: Layout, comps: list[Component], say: Log) -> None:
    """Bring the components up together: reuse healthy ones, wait for starting ones, restart broken ones."""
    procs: dict[str, subprocess.Popen[bytes]] = {}  # what this call started, to tell how it died
    for c in comps:
        # A changed command line restarts the process healthy or not: an apiserver still pointed at the old
        # etcd flags is never healthy again, and waiting for it would only time out.
        if c.restart_on_change and alive(lay, c.name) and running_argv(lay, c.name) not in (None, c.argv):
            say(f"  {c.name}: command line changed, restarting")
            stop(lay, c.name)
            procs[c.name] = start(lay, c)
        elif healthy(lay, c):
            say(f"  {c.name}: running (reused)")
        elif alive(lay, c.name):
            say(f"  {c.name}: running, waiting for it to become healthy")
        else:
            procs[c.name] = start(lay, c)
            say(f"  {c.name}: started")
    for attempt in (1, 2):
        failed = wait_healthy(lay, comps)
        if not failed:
            return
        if attempt == 2:
            f = failed[0]
            raise ClusterError(
                f"{f.name} did not become healthy ({_exit_reason(procs.get(f.name))}); "
                f"last lines of {lay.log(f.name)}:\n{log_tail(lay, f.name)}"
            )
        for c in failed:
            say(f"  {c.name}: not healthy ({_exit_reason(procs.get(c.name))}), restarting")
            stop(lay, c.name)
            procs[c.name] = start(lay, c)


# ---------------------------------------------------------------------------------------------------------
# up / down / status


def ensure_binaries(say: Log) -> Path:
    """Build (or find cached) the pinned binaries, relaying the build's progress; return their bin dir."""
    say(f"binaries: {BUILD_SCRIPT} (a no-op when cached; a cold build takes 10+ minutes)")
    return run_build_script(BUILD_SCRIPT, say, ClusterError)


def agent_available() -> bool:
    spec = importlib.util.find_spec(AGENT_MODULE)
    if spec is None:
        return False
    if spec.submodule_search_locations is None:
        return True
    return importlib.util.find_spec(f"{AGENT_MODULE}.__main__") is not None


def load_node_names(path: Path) -> list[str]:
    doc = yaml.safe_load(path.read_text()) or {}
    return [str(n["name"]) for n in doc.get("nodes") or []]


def node_process(path: Path) -> dict[str, str]:
    """node -> the process that runs it: `agent-<node>` (process node) or `kubelet-<node>` (`kind: kubelet`)."""
    doc = yaml.safe_load(path.read_text()) or {}
    return {
        str(n["name"]): f"{'kubelet' if n.get('kind') == realnodes.KIND else 'agent'}-{n['name']}"
        for n in doc.get("nodes") or []
    }


def _write_if_changed(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != data:
        path.write_text(data)


def prepare(lay: Layout, nodes_yaml: str) -> None:
    """Write PKI, kubeconfigs, scheduler config, cluster.json and nodes.yaml (existing PKI is kept)."""
    for sub in ("logs", "pids", "kubeconfigs"):
        (lay.state_dir / sub).mkdir(parents=True, exist_ok=True)
    pki = ensure_pki(lay.pki.dir)
    ca = pki.ca_cert.read_bytes()
    for name, path in (
        ("admin", lay.kubeconfig),
        ("controller-manager", lay.component_kubeconfig("controller-manager")),
        ("scheduler", lay.component_kubeconfig("scheduler")),
    ):
        cfg = kubeconfig(lay.apiserver_url, ca, pki.cert(name).read_bytes(), pki.key(name).read_bytes(), name)
        _write_if_changed(path, yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)
    _write_if_changed(lay.scheduler_config, yaml.safe_dump(scheduler_config(lay), sort_keys=False))
    _write_if_changed(lay.cluster_json, json.dumps(lay.to_json(), indent=2) + "\n")
    _write_if_changed(lay.nodes_yaml, nodes_yaml)
    _write_if_changed(kwok.config_path(lay), kwok.stages_config(lay))


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """Serialise `up`/`down` on one state dir: two concurrent `up`s would start every component twice."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / ".lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _agent_pid_names(lay: Layout) -> list[str]:
    return sorted(p.stem for p in (lay.state_dir / "pids").glob("agent-*.pid"))


def up(
    state_dir: Path = DEFAULT_STATE_DIR,
    *,
    nodes_config: Path | None = None,
    fake_nodes: int = 0,
    real_nodes: int = 0,
    real_node_images: tuple[str, ...] = DEFAULT_IMAGES,
    port_offset: int = 0,
    slot: int = 0,
    say: Log = print,
) -> Layout:
    """Start (or reuse, or repair) the cluster in `state_dir`; return its layout once the API is ready and
    its local nodes are Ready.

    Without `nodes_config` an existing cluster keeps its node config and a new one gets `DEFAULT_NODES_CONFIG`
    on the addresses of `slot` (see `slot_nodes_config`); the ports move by `port_offset`, by default
    `SLOT_PORT_STRIDE`·slot. `real_nodes` N replaces the node config by N real nodes (`kind: kubelet`,
    kubepool.local.realnode), into whose containerd `real_node_images` of `make images` are imported.
    """
    t0 = time.monotonic()
    state_dir = state_dir.resolve()
    if real_nodes and nodes_config is not None:
        raise ClusterError("--real-nodes and --nodes-config exclusive: put `kind: kubelet` entries in the file")
    bin_dir = ensure_binaries(say)
    with _locked(state_dir):
        lay = _up_locked(state_dir, bin_dir, nodes_config, real_nodes, fake_nodes,
                         port_offset or SLOT_PORT_STRIDE * slot, slot, real_node_images, say)
    wait_nodes_ready(lay, say)
    say(f"ready in {time.monotonic() - t0:.1f}s")
    say(f"export KUBECONFIG={lay.kubeconfig}")
    return lay


def _up_locked(
    state_dir: Path, bin_dir: Path, nodes_config: Path | None, real_nodes: int, fake_nodes: int,
    port_offset: int, slot: int, real_node_images: tuple[str, ...], say: Log,
) -> Layout:
    existing = Layout.load(state_dir)
    # An existing cluster keeps its ports and slot: its running processes and kubeconfig already use them.
    lay = (replace(existing, bin_dir=bin_dir) if existing
           else Layout(state_dir, bin_dir, Ports().shifted(port_offset), slot=slot))
    say(f"state: {state_dir} (apiserver {lay.apiserver_url})")
    if real_nodes:
        nodes_text = real_nodes_config(real_nodes, lay.slot)  # an existing cluster's slot: its addresses
    elif nodes_config is not None:
        nodes_text = nodes_config.resolve().read_text()
    elif lay.nodes_yaml.exists():
        nodes_text = lay.nodes_yaml.read_text()
    else:
        nodes_text = slot_nodes_config(slot)
    prepare(lay, nodes_text)

    comps = control_plane(lay)
    ensure(lay, comps[:1], say)  # etcd
    ensure(lay, comps[1:2], say)  # apiserver, /readyz
    ensure(lay, comps[2:], say)  # controller-manager + scheduler start in parallel
    ensure(lay, [kwok_component(lay)], say)

    procs = node_process(lay.nodes_yaml)
    nodes = [n for n, p in procs.items() if p.startswith("agent-")]
    wanted = {f"agent-{n}" for n in nodes}
    for stale in set(_agent_pid_names(lay)) - wanted:  # nodes removed from the config
        stop(lay, stale)
        say(f"  {stale}: stopped (node no longer configured)")
    if not procs:
        say("nodes: none configured")
    elif not nodes:
        pass  # real nodes only
    elif agent_available():
        ensure(lay, [Component(f"agent-{n}", agent_args(lay, n), None, restart_on_change=False) for n in nodes], say)
    else:
        say(f"node agents: {AGENT_MODULE} is not importable yet, skipping {len(nodes)} local node(s)")
    try:
        realnodes.up(lay, lay.slot, real_node_images, say)
    except REAL_NODE_ERRORS as e:
        raise ClusterError(f"real nodes: {e}") from e

    if fake_nodes:
        created = kwok.ensure_fake_nodes(lay, fake_nodes)
        say(f"fake nodes: {fake_nodes} (kwok-node-0..{fake_nodes - 1}, {created} created)")
    return lay


def node_readiness(lay: Layout) -> dict[str, bool]:
    """Every registered Node and whether its Ready condition is True."""
    items = json.loads(lay.kubectl("get", "nodes", "-o", "json"))["items"]
    return {
        n["metadata"]["name"]: any(
            c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", [])
        )
        for n in items
    }


NODE_READY_TIMEOUT_S = 180.0


def wait_nodes_ready(lay: Layout, say: Log, timeout_s: float = NODE_READY_TIMEOUT_S) -> None:
    """Wait for every local node of the config to be Ready; a failure names each node that is not, with its
    agent's state and the last lines of its log."""
    procs = node_process(lay.nodes_yaml)
    if not agent_available():
        procs = {n: p for n, p in procs.items() if not p.startswith("agent-")}
    names = list(procs)
    if not names:
        return
    t0 = time.monotonic()
    waiting: set[str] = set(names)
    while True:
        ready = node_readiness(lay)
        waiting = {n for n in names if not ready.get(n)}
        dead = {n for n in waiting if not alive(lay, procs[n])}
        if not waiting:
            say(f"nodes: {len(names)} Ready in {time.monotonic() - t0:.1f}s")
            return
        if dead or time.monotonic() - t0 > timeout_s:
            break
        time.sleep(0.5)
    why = []
    for n in sorted(waiting):
        state = "not registered" if n not in ready else "NotReady"
        proc = procs[n]
        agent = "running" if alive(lay, proc) else "NOT RUNNING"
        tail = "\n".join(f"    {line}" for line in log_tail(lay, proc).splitlines())
        why.append(f"  node {n}: {state}, {proc.split('-')[0]} {agent}; last lines of {lay.log(proc)}:\n{tail}")
    raise ClusterError(
        f"local nodes not Ready after {time.monotonic() - t0:.0f}s: {', '.join(sorted(waiting))}\n" + "\n".join(why)
    )


def _say_nodes(lay: Layout, say: Log) -> None:
    ready = node_readiness(lay)
    for name in load_node_names(lay.nodes_yaml):
        state = "not registered" if name not in ready else "Ready" if ready[name] else "NotReady"
        say(f"  node {name:<21} {state}")
    fake = [r for n, r in ready.items() if n.startswith("kwok-node-")]
    if fake:
        say(f"  fake nodes                 {sum(fake)}/{len(fake)} Ready")


def _realnode_pid_names(lay: Layout) -> list[str]:
    pids = lay.state_dir / "pids"
    return sorted(p.stem for pat in ("coredns.pid", "netpol.pid", "containerd-*.pid", "kubelet-*.pid") for p in pids.glob(pat))


def _all_component_names(lay: Layout) -> list[str]:
    return [*CONTROL_PLANE, kwok.NAME, *_agent_pid_names(lay), *_realnode_pid_names(lay)]


def down(state_dir: Path = DEFAULT_STATE_DIR, *, say: Log = print) -> None:
    """Stop every process `up` started from `state_dir` (agents first) and remove the state dir."""
    state_dir = state_dir.resolve()
    if not state_dir.exists():
        say(f"no local cluster at {state_dir}: nothing to stop")
        return
    # Without cluster.json (a crashed first `up`) the bin dir is irrelevant: stopping only needs pid files.
    lay = Layout.load(state_dir) or Layout(state_dir, Path("/nonexistent"))
    with _locked(state_dir):
        try:
            realnodes.down(lay, say)  # while the apiserver still answers: its kubelets stop their pods
        except REAL_NODE_ERRORS as e:
            raise ClusterError(f"real nodes: {e} (state kept in {state_dir}; fix it and run down again)") from e
        for name in reversed(_all_component_names(lay)):
            # Agents get longer: they stop their pods' processes before exiting.
            if stop(lay, name, timeout=20.0 if name.startswith("agent-") else 10.0):
                say(f"  {name}: stopped")
        shutil.rmtree(state_dir, ignore_errors=True)
    say(f"removed {state_dir}")


def status(state_dir: Path = DEFAULT_STATE_DIR, *, say: Log = print) -> int:
    """Print each component's state; 0 when all are healthy, 1 otherwise (crashed ones with their log tail)."""
    state_dir = state_dir.resolve()
    lay = Layout.load(state_dir)
    if lay is None:
        say(f"no local cluster at {state_dir} (start one with `kubepool local up`)")
        return 1
    say(f"cluster {lay.apiserver_url} (state {state_dir})")
    comps = [*control_plane(lay), kwok_component(lay)]
    comps += [Component(n, [], None) for n in (*_agent_pid_names(lay), *_realnode_pid_names(lay))]
    bad = 0
    for c in comps:
        pid = read_pid(lay, c.name)
        if pid is None:
            state = "not started"
            bad += 1
        elif not alive(lay, c.name):
            bad += 1
            tail = "\n".join(f"      {line}" for line in log_tail(lay, c.name).splitlines())
            state = f"CRASHED (pid {pid}); last lines of {lay.log(c.name)}:\n{tail}"
        elif healthy(lay, c):
            state = f"healthy (pid {pid})"
        else:
            bad += 1
            state = f"running but not healthy (pid {pid}), see {lay.log(c.name)}"
        say(f"  {c.name:<26} {state}")
    if healthy(lay, comps[1]):  # the apiserver answers: show what the nodes look like
        _say_nodes(lay, say)
    return 1 if bad else 0
