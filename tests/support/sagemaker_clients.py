"""SageMaker's own clients, unchanged, for the SageMaker-API tests: the SageMaker Python SDK and the `aws` CLI from
PyPI, pinned, in a venv of their own (cached under ~/.cache/kubepool/venvs, built once, about a minute).

Not in the dev extra: sagemaker 2.257.7 needs attrs<26, packaging<25 and protobuf<7, below constraints.txt's attrs
(kopf's closure, the operator image's) and the venv's packaging and protobuf; installed beside kubepool they would
downgrade what the operator is tested with. A venv of their own also proves the point of #42: the clients know
nothing of kubepool."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kubepool.cli.sagemaker import API_VARIABLES, S3_VARIABLE
from support.wheels import WHEELS

PINS = ("sagemaker==2.257.7", "boto3==1.44.8", "awscli==1.46.3")
# The SDK v3's ModelTrainer is in sagemaker-train (`sagemaker` 3.x is a meta package over it, serve and mlops); a
# venv of its own: v3 and v2 are the same import name.
V3_PINS = ("sagemaker-train==1.27.0", "sagemaker-core==2.27.0", "boto3==1.44.8")
VENVS = Path.home() / ".cache" / "kubepool" / "venvs"
BUILD_TIMEOUT_S = 900


def clients_venv(pins: tuple[str, ...] = PINS) -> Path:
    """The venv's directory (bin/python; bin/aws with PINS), built on first use; concurrent sessions wait for one
    build."""
    VENVS.mkdir(parents=True, exist_ok=True)
    venv = VENVS / f"sagemaker-clients-{hashlib.sha256(' '.join(pins).encode()).hexdigest()[:12]}"
    marker = venv / ".complete"
    with (VENVS / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        print(f"installing {' '.join(pins)} into {venv} (once)", file=sys.stderr)
        proc = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                               "--find-links", str(WHEELS), *pins], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
        assert proc.returncode == 0, f"cannot install {pins} from the package index:\n{proc.stderr[-3000:]}"
        marker.write_text(" ".join(pins))
        return venv


def clients_env(home: Path, endpoint: str, s3_endpoint: str | None, key_id: str, secret: str,
                region: str) -> dict[str, str]:
    """What a SageMaker user sets: the AWS SDKs' endpoint variables and credentials, nothing of kubepool's; HOME is
    the test's own (no ~/.aws or ~/.sagemaker of this machine's)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "AWS_ACCESS_KEY_ID": key_id,
           "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": region, "PYTHONUNBUFFERED": "1",
           **{var: endpoint for var in API_VARIABLES}}  # the variables `kubepool sagemaker env` prints
    if s3_endpoint:
        env[S3_VARIABLE] = s3_endpoint
    return env
