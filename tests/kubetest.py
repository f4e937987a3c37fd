"""Test-side handles on the local cluster: `Kubectl` (the cached kubectl bound to one kubeconfig),
`Cluster` and `cluster_turn`. A plain module rather than conftest, so test files can import them by name."""

from __future__ import annotations

import fcntl
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubepool.local.layout import Layout


@dataclass(frozen=True)
class Kubectl:
    """Runs the cached kubectl against one cluster; returns the CompletedProcess (text)."""

    binary: str
    kubeconfig: Path

    def __call__(
        self, *args: str, input: str | None = None, check: bool = False, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=input, capture_output=True, text=True, timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def wait_established(self, *crds: str, timeout: float = 60.0) -> None:
        """Waits until each CRD is Established. Polls: `kubectl wait` fails outright while a just-created CRD
        has no status conditions yet."""
        deadline = time.monotonic() + timeout
        for crd in crds:
            path = '{.status.conditions[?(@.type=="Established")].status}'
            while self("get", f"crd/{crd}", "-o", f"jsonpath={path}").stdout.strip() != "True":
                if time.monotonic() > deadline:
                    raise AssertionError(f"CRD {crd} not Established after {timeout:.0f}s")
                time.sleep(0.5)

    @contextmanager
    def fresh_namespace(self, name: str) -> Iterator[str]:
        """Creates `name`, waits for its `default` ServiceAccount (pods are rejected until the
        controller-manager made it), yields it and deletes it afterwards."""
        self("create", "namespace", name, check=True)
        deadline = time.monotonic() + 30
        while self("get", "serviceaccount", "default", "-n", name).returncode != 0:
            assert time.monotonic() < deadline, f"no default ServiceAccount in {name} after 30s"
            time.sleep(0.2)
        try:
            yield name
        finally:
            self("delete", "namespace", name, "--wait=false")

    def json(self, *args: str) -> dict[str, Any]:
        """`kubectl <args> -o json`, parsed; fails the test when kubectl fails."""
        out: dict[str, Any] = json.loads(self(*args, "-o", "json", check=True).stdout)
        return out


@dataclass(frozen=True)
class Cluster:
    """The running local cluster: its layout (paths, ports, PKI), a kubectl for it, and who started it."""

    layout: Layout
    kubectl: Kubectl
    started_here: bool

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def state_dir(self) -> Path:
        return self.layout.state_dir


@contextmanager
def cluster_turn(state_dir: Path, exclusive: bool) -> Iterator[None]:
    """A cluster test's turn on the shared cluster, across processes (pytest -n, several sessions): shared with
    the other cluster tests, or `exclusive` (alone, once the running ones end). An exclusive turn holds the
    turnstile while it waits, so new shared turns queue behind it and it is never starved; the locks go with the
    files when the turn ends (also when the process dies)."""
    with (state_dir / ".turnstile").open("a") as turnstile, (state_dir / ".cluster-tests").open("a") as tests:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield
