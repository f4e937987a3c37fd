"""The chart's operator ServiceAccount, with the chart's RBAC, on the tests' cluster, and a kubeconfig that
authenticates as it: a suite that starts its operator with this kubeconfig runs it with exactly the rights the
chart grants (tests/chart/test_operator_rights compares those with what the code uses), not cluster-admin."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from kubepool.local import controlplane
from kubetest import cluster_turn
from support.operator_cluster import ROOT

CHART = ROOT / "charts" / "kubepool"
RELEASE, NAMESPACE = "kp-tests", "kubepool-tests"
TOKEN_DURATION = "12h"


def chart_account_kubeconfig(cluster: Any, kubectl: Any, dest: Path, *helm_args: str) -> Path:
    """Apply the chart's ServiceAccount and RBAC (release RELEASE in NAMESPACE, `helm_args` as values) and write
    a kubeconfig for that account to `dest`. Idempotent: every session applies the same objects."""
    helm = controlplane.ensure_binaries(say=lambda _: None) / "helm"
    proc = subprocess.run([str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", "1.36.0",
                           "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml", *helm_args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    account = f"{RELEASE}-kubepool"
    # A session fixture is set up before any test's turn: without one of its own it could meet an exclusive test
    # with the API server down (a restart test on the other worker), and its error would stay for the session.
    with cluster_turn(cluster.state_dir, exclusive=False):
        if kubectl("get", "namespace", NAMESPACE).returncode != 0:
            kubectl("create", "namespace", NAMESPACE, check=True)
        for obj in (o for o in yaml.safe_load_all(proc.stdout) if o):
            kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(obj), check=True)
        token = kubectl("create", "token", account, "-n", NAMESPACE, f"--duration={TOKEN_DURATION}",
                        check=True).stdout.strip()
    layout = cluster.layout
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": account,
        "clusters": [{"name": "local", "cluster": {"server": layout.apiserver_url,
                                                   "certificate-authority": str(layout.pki.ca_cert)}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "local", "user": account, "namespace": NAMESPACE}}],
    }
    dest.write_text(yaml.safe_dump(config))
    dest.chmod(0o600)
    return dest
