"""Running one of hack/'s build scripts (Kubernetes binaries, CoreDNS): a no-op when cached, its progress relayed,
its last line the path it built or found."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path


def run_build_script(script: Path, say: Callable[[str], None], error: type[Exception] = RuntimeError) -> Path:
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        say(f"  {lines[-1]}")
    if proc.wait() != 0 or not lines:
        raise error(f"{script} failed with exit code {proc.returncode}")
    return Path(lines[-1])
