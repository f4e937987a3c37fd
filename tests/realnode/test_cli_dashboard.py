"""`kubepool dashboard JOB` on real nodes: the local port answers as the running job's Ray dashboard, through
the API server's pod proxy. Here, not on process nodes: their pods' addresses are loopback ones, which the API
server's proxy refuses to reach (and `kubectl port-forward` would not do: Ray's dashboard listens on the pod's
address, port-forward dials localhost in the pod)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from test_real_nodes import CHART, _chart_values, run_helm

from kubepool import cli, jobs
from kubetest import Cluster, Kubectl

pytestmark = pytest.mark.realnode


def test_dashboard_answers_as_the_running_jobs_ray_dashboard(real_cluster: Cluster, rkubectl: Kubectl,
                                                             tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    rel, system_ns, jobs_ns, pool = f"kpd-{suffix}", f"kpd-system-{suffix}", f"kpd-jobs-{suffix}", f"rn-dash-{suffix}"
    kubeconfig = str(real_cluster.kubeconfig)
    helm = (real_cluster.layout.bin("helm"), "--kubeconfig", kubeconfig)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(_chart_values(jobs_ns, pool)))
    rkubectl("create", "namespace", jobs_ns, check=True)
    proc = run_helm(*helm, "install", rel, str(CHART), "--namespace", system_ns, "--create-namespace",
                    "--values", str(values), "--wait", "--timeout", "180s", timeout=240)
    forward: subprocess.Popen[str] | None = None
    try:
        assert proc.returncode == 0, proc.stderr
        script = tmp_path / "idle.py"
        script.write_text("import time\ntime.sleep(600)\n")
        assert cli.main(["--kubeconfig", kubeconfig, "submit", str(script), "--pool", pool, "--name", "dash",
                         "-n", jobs_ns]) == 0
        job = jobs.get_job(f"{jobs_ns}/dash", session=jobs.connect(kubeconfig=kubeconfig))
        deadline = time.monotonic() + 300
        while not (job.status == "RUNNING" and any(i.instance_id == 0 and i.phase == "Running" for i in job.instances)):
            assert time.monotonic() < deadline, f"the job's head never ran: {job.status} {job.message}"
            time.sleep(1)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        forward = subprocess.Popen([sys.executable, "-m", "kubepool.cli", "dashboard", "dash", "-n", jobs_ns,
                                    "--port", str(port), "--kubeconfig", kubeconfig], stderr=subprocess.PIPE, text=True)
        deadline, last = time.monotonic() + 120, ""
        while True:
            assert forward.poll() is None, forward.stderr.read() if forward.stderr else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=10) as resp:
                    version = json.loads(resp.read())
                    break
            except urllib.error.HTTPError as err:  # Ray's dashboard not up yet: the proxy says so
                last = f"{err}: {err.read()[:300]!r}"
            except (urllib.error.URLError, ConnectionError) as err:  # the forwarder not listening yet
                last = str(err)
            assert time.monotonic() < deadline, f"the forwarded port never answered as Ray's dashboard: {last}"
            time.sleep(1)
        assert version["ray_version"], version
        job.cancel()
    finally:
        if forward is not None:
            forward.terminate()
            forward.wait(10)
        run_helm(*helm, "uninstall", rel, "--namespace", system_ns, "--wait", timeout=180)
        rkubectl("delete", "namespace", jobs_ns, system_ns, "--wait=false")
