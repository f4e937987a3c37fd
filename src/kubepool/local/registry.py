"""A local OCI registry for the release tests: the CNCF distribution registry (built from its Go module by
hack/registry/build.sh, cached in ~/.cache/kubepool/registry), on 127.0.0.1 with TLS from a CA of its own, the
filesystem as its storage. `make release` pushes to it; the real nodes pull from it (realnode.registry.trust)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubepool.local.buildscript import run_build_script
from kubepool.local.layout import REPO_ROOT
from kubepool.local.pki import create_ca, issue_cert

BUILD_SCRIPT = REPO_ROOT / "hack" / "registry" / "build.sh"
START_TIMEOUT_S = 30.0


class RegistryError(RuntimeError):
    """The registry could not be built or did not start; the message says why."""


@dataclass
class LocalRegistry:
    host: str  # 127.0.0.1:<port>
    ca_file: Path
    log_file: Path
    proc: subprocess.Popen[bytes]

    def url(self, path: str) -> str:
        return f"https://{self.host}{path}"

    def get(self, path: str, accept: str = "") -> tuple[int, bytes, dict[str, str]]:
        """GET over https, verified with the registry's CA (an `Accept` for manifests)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        req = urllib.request.Request(self.url(path), headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, resp.read(), dict(resp.headers)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(port: int, storage: Path, cert: Path, key: Path) -> dict[str, object]:
    """The registry's configuration (distribution's config.yml): loopback only, TLS, filesystem storage."""
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "tls": {"certificate": str(cert), "key": str(key)}},
    }


def start(workdir: Path, say: Callable[[str], None] = print) -> LocalRegistry:
    """Build (or find) the registry, make its CA and serving certificate in `workdir`, start it, and wait until
    /v2/ answers over verified TLS."""
    binary = run_build_script(BUILD_SCRIPT, say, RegistryError) / "registry"
    workdir.mkdir(parents=True, exist_ok=True)
    ca_pem, ca_key = create_ca("kubepool-test-registry-ca")
    ca_file, ca_key_file = workdir / "ca.crt", workdir / "ca.key"
    ca_file.write_bytes(ca_pem)
    ca_key_file.write_bytes(ca_key)
    ca_key_file.chmod(0o600)
    cert, key = issue_cert(ca_file, ca_key_file, cn="kubepool-test-registry", dns=("localhost",),
                           ips=("127.0.0.1",), server=True)
    (workdir / "tls.crt").write_bytes(cert)
    (workdir / "tls.key").write_bytes(key)
    (workdir / "tls.key").chmod(0o600)
    port = _free_port()
    cfg = workdir / "config.yml"
    cfg.write_text(yaml.safe_dump(config(port, workdir / "data", workdir / "tls.crt", workdir / "tls.key")))
    log_file = workdir / "registry.log"
    with log_file.open("wb") as log:
        proc = subprocess.Popen([str(binary), "serve", str(cfg)], stdout=log, stderr=subprocess.STDOUT)
    reg = LocalRegistry(f"127.0.0.1:{port}", ca_file, log_file, proc)
    t0, last = time.monotonic(), ""
    while time.monotonic() - t0 < START_TIMEOUT_S:
        if proc.poll() is not None:
            break
        try:
            if reg.get("/v2/")[0] == 200:
                say(f"registry: https://{reg.host} (CA {ca_file})")
                return reg
        except OSError as e:
            last = str(e)
        time.sleep(0.2)
    reg.stop()
    raise RegistryError(f"the registry did not answer https://{reg.host}/v2/ in {START_TIMEOUT_S:.0f}s "
                        f"(exit {proc.returncode}; last error {last!r}); its log:\n{log_file.read_text()[-3000:]}")
