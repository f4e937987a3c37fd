"""`make demo`: a newcomer's first run. Starts (or reuses) the local cluster, installs kubepool with
`helm install` (the operator runs in a pod on a local node under the chart's ServiceAccount), applies the
example compute pools and the Snowflake-style 3-instance XGBoost job, shows live progress, then prints every
instance's log and the trained model's score. Exit code 0 when the job ends DONE.

Every wait that fails says why: the pods' states and events, their last log lines, and the node agent's log.
The state dir, port slot and node addresses come from the environment as for `kubepool local up`
($KUBEPOOL_STATE_DIR, $KUBEPOOL_SLOT), so a second demo can run beside the first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import yaml

from kubepool.local import cli as local_cli
from kubepool.local.diagnose import pods_report
from kubepool.local.layout import Layout, default_state_dir

REPO = Path(__file__).resolve().parents[2]
RELEASE, SYSTEM_NS, DEMO_NS, JOB = "kubepool", "kubepool-system", "kubepool-demo", "xgboost-train"
OPERATOR_SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
OPERATOR_TIMEOUT_S = 300
JOB_TIMEOUT_S = 900
STEPS = ("cluster", "chart", "job")
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')} +{time.monotonic() - T0:.0f}s] {msg}", flush=True)


def step(n: int, what: str) -> None:
    left = f"then: {', '.join(STEPS[n:])}" if n < len(STEPS) else "the last step"
    say(f"step {n}/{len(STEPS)} {STEPS[n - 1]}: {what} ({left})")


def run(*cmd: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: `{' '.join(cmd[:4])} ...` failed:\n{proc.stdout}{proc.stderr}")
    if not quiet and proc.stdout.strip():
        print(proc.stdout.rstrip(), flush=True)
    return proc


def operator_ready(lay: Layout) -> tuple[bool, str]:
    """(ready, one line of what the rollout is at) for the chart's Deployment."""
    raw = lay.kubectl("get", "deployment", "-n", SYSTEM_NS, "-l", OPERATOR_SELECTOR, "-o", "json")
    items = json.loads(raw)["items"]
    if not items:
        return False, "no Deployment yet"
    d = items[0]
    st, want = d.get("status") or {}, (d.get("spec") or {}).get("replicas", 1)
    ready = (st.get("observedGeneration", 0) >= d["metadata"]["generation"] and st.get("updatedReplicas", 0) == want
             and st.get("availableReplicas", 0) >= want and st.get("replicas", 0) == want)  # fmt: skip
    return ready, f"{st.get('updatedReplicas', 0)}/{want} updated, {st.get('availableReplicas', 0)} available"


def wait_operator(lay: Layout) -> None:
    deadline, last = time.monotonic() + OPERATOR_TIMEOUT_S, ""
    while time.monotonic() < deadline:
        ok, line = operator_ready(lay)
        if ok:
            say(f"operator ready ({line})")
            return
        if line != last:
            say(f"operator: {line}")
            last = line
        time.sleep(1)
    raise SystemExit(f"demo: the operator did not become ready within {OPERATOR_TIMEOUT_S}s ({last}):\n"
                     + pods_report(lay, SYSTEM_NS, OPERATOR_SELECTOR))


def install_chart(lay: Layout) -> None:
    helm = lay.bin("helm")
    kubeconfig = str(lay.kubeconfig)
    values = {
        "image": {"tag": "dev", "pullPolicy": "Never"},
        # Local pods share the host's network: the operator listens on its pod IP, beside any other cluster's.
        "operator": {"listenOnPodIP": True,
                     "settings": {"rayPortStride": 3000, "workerGraceSeconds": 5, "podTerminationGraceSeconds": 3}},
    }
    values_file = lay.state_dir / "demo-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    step(2, "helm upgrade --install kubepool charts/kubepool")
    existed = run(helm, "--kubeconfig", kubeconfig, "status", RELEASE, "--namespace", SYSTEM_NS, check=False, quiet=True).returncode == 0
    run(helm, "--kubeconfig", kubeconfig, "upgrade", "--install", RELEASE, str(REPO / "charts" / "kubepool"),
        "--namespace", SYSTEM_NS, "--create-namespace", "--values", str(values_file), quiet=True)
    if existed:  # local pods run this checkout's code: a rerun restarts the operator so it runs the current code
        run(lay.bin("kubectl"), "--kubeconfig", kubeconfig, "-n", SYSTEM_NS, "rollout", "restart", "deployment",
            "-l", OPERATOR_SELECTOR, quiet=True)
    wait_operator(lay)


def submit(lay: Layout) -> None:
    kubectl = (lay.bin("kubectl"), "--kubeconfig", str(lay.kubeconfig))
    step(3, "the example pools and a 3-instance XGBoost MLJob (examples/xgboost-job.yaml)")
    run(*kubectl, "apply", "-f", str(REPO / "examples" / "computepools.yaml"))
    run(*kubectl, "create", "namespace", DEMO_NS, check=False, quiet=True)
    # A rerun starts the job afresh: delete the previous one and wait until its pods are gone.
    run(*kubectl, "-n", DEMO_NS, "delete", "mljob", JOB, "--ignore-not-found", "--wait=true", quiet=True)
    run(*kubectl, "-n", DEMO_NS, "wait", "--for=delete", "pod", "-l", f"kubepool.dev/job={JOB}", "--timeout=120s",
        check=False, quiet=True)
    run(*kubectl, "-n", DEMO_NS, "apply", "-f", str(REPO / "examples" / "xgboost-job.yaml"))


def follow(lay: Layout) -> int:
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

    try:
        status = job.wait(timeout=JOB_TIMEOUT_S, on_update=progress)
    except TimeoutError:
        say(f"job {job.id} did not end within {JOB_TIMEOUT_S}s; its pods:")
        print(pods_report(lay, DEMO_NS, f"kubepool.dev/job={JOB}"), flush=True)
        return 1
    say(f"job {job.id} ended {status}" + (f": {job.message}" if status != "DONE" and job.message else ""))
    done = status == "DONE"
    for inst in job.instances:
        print(f"\n===== instance {inst.instance_id} ({inst.group}, {inst.host}, pod {inst.pod} on {inst.node}) =====")
        # A failure shows the whole log; success the payload's output and kubepool's own lines.
        print(cast(str, job.get_logs(instance_id=inst.instance_id, verbose=not done)).rstrip())
    if done:
        score = [line for line in job.get_logs(instance_id=0, as_list=True) if line.startswith("score:")]
        print("\nresult:", score[-1] if score else "(no score line in the head's log)")
        print(f"(the full logs, Ray's start-up included: kubepool logs {DEMO_NS}/{JOB} --instance N --verbose)")
    else:
        print("\n" + pods_report(lay, DEMO_NS, f"kubepool.dev/job={JOB}"), flush=True)
    return 0 if done else 1


def main() -> int:
    step(1, "the local cluster: kube-apiserver, etcd, scheduler, controller-manager and process-backed nodes")
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
    code = follow(lay)
    say(f"done. The cluster stays up (state in {lay.state_dir}): export KUBECONFIG={lay.kubeconfig}; "
        f"kubectl get mljobs -A. `make cluster-down` stops it and removes its state.")
    return code


if __name__ == "__main__":
    sys.exit(main())
