"""Where one local cluster lives and its fixed facts: the state dir's files, the loopback ports, the pinned
Kubernetes version. The bottom of `kubepool.local`: everything else takes a `Layout`.

    kubeconfig              admin kubeconfig (certs embedded)
    kubeconfigs/<c>.conf    the controller-manager's and scheduler's own identities
    pki/                    see `kubepool.local.pki`
    logs/<component>.log    one per process, appended across restarts
    pids/<component>.pid    "<pid> <start time in ticks>"; each process leads its own process group
    cluster.json            apiServer, kubernetesVersion, ports, serviceCIDR, clusterDomain, stateDir, binDir,
                            kubeconfig, caCert, caKey
    nodes.yaml              the local node config the node agents read
    etcd/, kwok.yaml, kube-scheduler.yaml
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubepool.local.pki import Pki

REPO_ROOT = Path(__file__).resolve().parents[3]  # a checkout's root (src/kubepool/local/); see IN_CHECKOUT
IN_CHECKOUT = (REPO_ROOT / "charts" / "kubepool").is_dir()
# A checkout keeps its cluster beside the code (`make` finds it there); an installed package in the user's state
# directory, as other tools' local clusters do.
DEFAULT_STATE_DIR = (REPO_ROOT / ".kubepool" if IN_CHECKOUT else
                     Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "kubepool")
# The binaries' build recipe ships in the package, so `kubepool local up` works after a `pip install` too.
K8S_BIN_DIR = Path(__file__).with_name("k8sbin")
BUILD_SCRIPT = K8S_BIN_DIR / "build.sh"
VERSIONS_ENV = K8S_BIN_DIR / "versions.env"
SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DOMAIN = "cluster.local"

Log = Callable[[str], None]


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

