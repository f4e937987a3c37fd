"""`make demo`: a newcomer's first run. Starts (or reuses) the local cluster, installs kubepool with
`helm install` (the operator runs in a pod on a local node under the chart's ServiceAccount), applies the
example compute pools and the Snowflake-style 3-instance XGBoost job, shows live progress, then prints every
instance's log and the trained model's score. Exit code 0 when the job ends DONE.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from kubepool.local import cli as local_cli
from kubepool.local.controlplane import Layout, default_state_dir

REPO = Path(__file__).resolve().parents[2]
RELEASE, SYSTEM_NS, DEMO_NS, JOB = "kubepool", "kubepool-system", "kubepool-demo", "xgboost-train"
JOB_TIMEOUT_S = 900


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(*cmd: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: `{' '.join(cmd[:4])} ...` failed:\n{proc.stdout}{proc.stderr}")
    if not quiet and proc.stdout.strip():
        print(proc.stdout.rstrip(), flush=True)
    return proc


def _interpreter_reachable_by_others() -> bool:
    """Local pods run as the pod's (non-root) user, who must reach this venv's interpreter."""
    return all(os.stat(d).st_mode & 0o001 for d in Path(os.path.realpath(sys.executable)).parents)


def install_chart(lay: Layout) -> None:
    helm = lay.bin("helm")
    kubeconfig = str(lay.kubeconfig)
    values = {
        "image": {"tag": "dev", "pullPolicy": "Never"},
        "operator": {"settings": {"rayPortStride": 3000, "workerGraceSeconds": 5, "podTerminationGraceSeconds": 3,
                                  **({} if _interpreter_reachable_by_others() else {"runAsUser": ""})}},
    }
    values_file = lay.state_dir / "demo-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    say("installing the chart: helm upgrade --install kubepool charts/kubepool")
    existed = run(helm, "--kubeconfig", kubeconfig, "status", RELEASE, "--namespace", SYSTEM_NS, check=False, quiet=True).returncode == 0
    run(helm, "--kubeconfig", kubeconfig, "upgrade", "--install", RELEASE, str(REPO / "charts" / "kubepool"),
        "--namespace", SYSTEM_NS, "--create-namespace", "--values", str(values_file), "--wait", "--timeout", "5m",
        quiet=True)
    kubectl = (lay.bin("kubectl"), "--kubeconfig", kubeconfig, "-n", SYSTEM_NS)
    if existed:  # local pods run this checkout's code: a rerun restarts the operator so it runs the current code
        run(*kubectl, "rollout", "restart", "deployment", "-l", f"app.kubernetes.io/instance={RELEASE}", quiet=True)
        run(*kubectl, "rollout", "status", "deployment", "-l", f"app.kubernetes.io/instance={RELEASE}", "--timeout=300s", quiet=True)
    run(*kubectl, "get", "pods", "-o", "wide")


def submit(lay: Layout) -> None:
    kubectl = (lay.bin("kubectl"), "--kubeconfig", str(lay.kubeconfig))
    run(*kubectl, "apply", "-f", str(REPO / "examples" / "computepools.yaml"))
    run(*kubectl, "create", "namespace", DEMO_NS, check=False, quiet=True)
    # A rerun starts the job afresh: delete the previous one and wait until its pods are gone.
    run(*kubectl, "-n", DEMO_NS, "delete", "mljob", JOB, "--ignore-not-found", "--wait=true", quiet=True)
    run(*kubectl, "-n", DEMO_NS, "wait", "--for=delete", "pod", "-l", f"kubepool.dev/job={JOB}", "--timeout=120s",
        check=False, quiet=True)
    run(*kubectl, "-n", DEMO_NS, "apply", "-f", str(REPO / "examples" / "xgboost-job.yaml"))


def follow() -> int:
    from kubepool.jobs import get_job

    job = get_job(f"{DEMO_NS}/{JOB}")
    last = ""

    def progress(obj: object) -> None:
        nonlocal last
        st = getattr(obj, "status", None)
        line = f"{getattr(st, 'phase', None) or 'PENDING'}  ready {getattr(st, 'ready', None) or '-'}  {getattr(st, 'message', '') or ''}"
        if line != last:
            say(line)
            last = line

    status = job.wait(timeout=JOB_TIMEOUT_S, on_update=progress)
    say(f"job {job.id} ended {status}")
    for inst in job.instances:
        print(f"\n===== instance {inst.instance_id} ({inst.group}, {inst.host}, pod {inst.pod} on {inst.node}) =====")
        print(job.get_logs(instance_id=inst.instance_id).rstrip())
    head_log = job.get_logs(instance_id=0)
    score = [line for line in head_log.splitlines() if line.startswith("score:")]
    print("\nresult:", score[-1] if score else "(no score line in the head's log)")
    return 0 if status == "DONE" else 1


def main() -> int:
    start = time.monotonic()
    say("starting the local cluster (real kube-apiserver, etcd, scheduler, controller-manager; process-backed nodes)")
    if local_cli.main(["up"]) != 0:
        return 1
    lay = Layout.load(default_state_dir())
    if lay is None:
        raise SystemExit("demo: the local cluster did not write its state")
    os.environ["KUBECONFIG"] = str(lay.kubeconfig)
    run(lay.bin("kubectl"), "--kubeconfig", str(lay.kubeconfig), "apply", "--server-side", "--force-conflicts",
        "-f", str(REPO / "crds"), quiet=True)
    install_chart(lay)
    submit(lay)
    code = follow()
    say(f"done in {time.monotonic() - start:.0f}s. Cluster still up: export KUBECONFIG={lay.kubeconfig}; "
        f"kubectl get mljobs -A; `make cluster-down` stops it.")
    return code


if __name__ == "__main__":
    sys.exit(main())
