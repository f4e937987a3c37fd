"""Real nodes: upstream kubelets on containerd run the built images in containers. What process nodes cannot
show: the image's user really applies, `kubectl exec` works, pods have their own network and reach each other,
the apiserver (through the `kubernetes` Service) and cluster DNS, NetworkPolicy blocks, and the chart's
operator, from its image, runs a multi-instance job to DONE behind its per-job policy."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubepool.local.layout import REPO_ROOT, kube_version
from kubepool.local.realnode.network import RealNet
from kubetest import Cluster, Kubectl

pytestmark = pytest.mark.realnode
RUNTIME = "kubepool/runtime:dev-lean"
CHART, EXAMPLES = REPO_ROOT / "charts" / "kubepool", REPO_ROOT / "examples"
# Connects to argv[1]:argv[2]; prints "open" or "blocked: <why>".
PROBE = """import socket, sys
s = socket.socket()
s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("open")
except OSError as e:
    print("blocked:", e)
"""
JOB_TIMEOUT_S = 600


@pytest.fixture
def ns(rkubectl: Kubectl) -> Iterator[str]:
    with rkubectl.fresh_namespace(f"rn-{uuid.uuid4().hex[:6]}") as name:
        yield name


def _pod(name: str, command: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubepool.dev/node-pool": "cpu"},
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "main", "image": RUNTIME, "imagePullPolicy": "Never", "command": command,
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
            **extra,
        },
    }


def _apply(kubectl: Kubectl, ns: str, *objs: dict[str, Any]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objs), check=True)


def _wait_ready(kubectl: Kubectl, ns: str, *pods: str, timeout: float = 120) -> None:
    for pod in pods:
        proc = kubectl("wait", "-n", ns, f"pod/{pod}", "--for=condition=Ready", f"--timeout={timeout:.0f}s",
                       timeout=timeout + 10)
        if proc.returncode != 0:
            desc = kubectl("describe", "pod", "-n", ns, pod).stdout
            raise AssertionError(f"pod {pod} not Ready after {timeout:.0f}s:\n{desc[-3000:]}")


def test_nodes_are_upstream_kubelets_on_containerd(real_cluster: Cluster, rkubectl: Kubectl) -> None:
    nodes = rkubectl.json("get", "nodes")["items"]
    net = RealNet(real_cluster.layout.slot)
    real = [n for n in nodes if n["metadata"]["name"].startswith("real-node-")]
    assert len(real) == 2
    for n in real:
        info = n["status"]["nodeInfo"]
        assert info["kubeletVersion"] == kube_version()
        assert info["containerRuntimeVersion"].startswith("containerd://")
        assert n["metadata"]["labels"]["kubepool.dev/node-pool"] == "cpu"
        ips = [a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"]
        assert ips and ips[0].startswith(f"198.19.{net.slot}.")
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])


def test_pod_runs_as_the_images_non_root_user_with_logs_and_exec(rkubectl: Kubectl, ns: str) -> None:
    _apply(rkubectl, ns, _pod("who", ["python", "-c",
                                      "import os, time; print('uid', os.getuid(), flush=True); time.sleep(600)"]))
    _wait_ready(rkubectl, ns, "who")
    deadline = time.monotonic() + 30
    while "uid 1000" not in (logs := rkubectl("logs", "-n", ns, "who").stdout):
        assert time.monotonic() < deadline, f"no uid line in the logs: {logs!r}"
        time.sleep(0.5)
    assert rkubectl("exec", "-n", ns, "who", "--", "id", "-u", check=True).stdout.strip() == "1000"
    # stdin through the CRI streaming server
    echoed = rkubectl("exec", "-i", "-n", ns, "who", "--", "cat", input="through stdin\n", check=True).stdout
    assert echoed == "through stdin\n"
    # root filesystem of the image, not the host's: the venv of the Dockerfile is there
    assert rkubectl("exec", "-n", ns, "who", "--", "sh", "-c", "command -v python", check=True).stdout.strip() == \
        "/opt/venv/bin/python"


def test_pods_reach_each_other_the_apiserver_and_cluster_dns(real_cluster: Cluster, rkubectl: Kubectl, ns: str) -> None:
    server = _pod("server", ["python", "-m", "http.server", "8000"], hostname="srv", subdomain="peers")
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "peers"},
           "spec": {"clusterIP": "None", "selector": {"app": "server"}, "ports": [{"port": 8000}]}}
    probe = r"""
import json, socket, ssl, urllib.request
out = {"svc": socket.gethostbyname("kubernetes.default.svc.cluster.local"),
       "peer": socket.gethostbyname("srv.peers"),  # the pod's search path: <ns>.svc.cluster.local
       "http": urllib.request.urlopen("http://srv.peers:8000/", timeout=10).status}
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
req = urllib.request.Request("https://kubernetes.default.svc/version",
                             headers={"Authorization": "Bearer " + open(sa + "/token").read()})
out["version"] = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"]
print(json.dumps(out), flush=True)
"""
    _apply(rkubectl, ns, svc, server)
    _wait_ready(rkubectl, ns, "server")
    server_ip = rkubectl.json("get", "pod", "server", "-n", ns)["status"]["podIP"]
    assert server_ip.startswith("198.18.")
    _apply(rkubectl, ns, _pod("client", ["python", "-c", probe]))
    deadline = time.monotonic() + 120
    while (phase := rkubectl.json("get", "pod", "client", "-n", ns)["status"].get("phase")) not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"client pod still {phase}"
        time.sleep(1)
    logs = rkubectl("logs", "-n", ns, "client").stdout
    assert phase == "Succeeded", logs
    out = json.loads(logs.strip().splitlines()[-1])
    assert out == {"svc": "10.96.0.1", "peer": server_ip, "http": 200, "version": kube_version()}


def test_network_policy_admits_only_the_peers_it_names(rkubectl: Kubectl, ns: str) -> None:
    """The operator's per-job policy, by hand: the job's pods reach each other; a pod of the namespace without
    the label, a pod of another job of the namespace (issue #44: why the policy stays per job, as no policy of a
    namespace can admit only a pod's own job) and a pod of another namespace with the job's label do not;
    without the policy all do."""
    job = {"kubepool.dev/job-uid": "u1"}
    server = _pod("server", ["python", "-m", "http.server", "8000"])
    server["metadata"]["labels"] = job
    friend = _pod("friend", ["sleep", "3600"], nodeName="real-node-2")
    friend["metadata"]["labels"] = job
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "job-only"},
              "spec": {"podSelector": {"matchLabels": job}, "policyTypes": ["Ingress"],
                       "ingress": [{"from": [{"podSelector": {"matchLabels": job}}]}]}}
    rival = _pod("rival", ["sleep", "3600"])
    rival["metadata"]["labels"] = {"kubepool.dev/job-uid": "u2"}
    _apply(rkubectl, ns, server, friend, rival, _pod("stranger", ["sleep", "3600"]))
    with rkubectl.fresh_namespace(f"{ns}-other") as other:
        intruder = _pod("intruder", ["sleep", "3600"])
        intruder["metadata"]["labels"] = job
        _apply(rkubectl, other, intruder)
        _wait_ready(rkubectl, ns, "server", "friend", "rival", "stranger")
        _wait_ready(rkubectl, other, "intruder")
        ip = rkubectl.json("get", "pod", "server", "-n", ns)["status"]["podIP"]

        def probe(pod_ns: str, pod: str) -> str:
            return rkubectl("exec", "-n", pod_ns, pod, "--", "python", "-c", PROBE, ip, "8000").stdout.strip()

        def settle(want: dict[tuple[str, str], str]) -> None:  # the enforcer polls the API every second
            deadline = time.monotonic() + 20
            while (got := {k: probe(*k).split(":")[0] for k in want}) != want:
                assert time.monotonic() < deadline, f"reachability {got}, expected {want}"
                time.sleep(1)

        settle({(ns, "friend"): "open", (ns, "rival"): "open", (ns, "stranger"): "open", (other, "intruder"): "open"})
        _apply(rkubectl, ns, policy)
        settle({(ns, "friend"): "open", (ns, "rival"): "blocked", (ns, "stranger"): "blocked",
                (other, "intruder"): "blocked"})
        rkubectl("delete", "networkpolicy", "job-only", "-n", ns, check=True)
        settle({(ns, "rival"): "open", (ns, "stranger"): "open", (other, "intruder"): "open"})


def run_helm(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


def _chart_values(jobs_ns: str, pool: str) -> dict[str, Any]:
    return {
        "image": {"repository": "kubepool/operator", "tag": "dev", "pullPolicy": "Never"},  # make images' local name
        "operator": {"runtimeImage": RUNTIME, "watchNamespaces": [jobs_ns], "warmCapacity": False,
                     "settings": {"imagePullPolicy": "Never"}},
        # A real node has the host's 2 CPUs: instances of one CPU (the family's 3 would never fit).
        "pools": [{"name": pool, "spec": {"resources": {"cpu": "1", "memory": "3Gi"}, "minNodes": 0, "maxNodes": 2,
                                          "nodeSelector": {"kubepool.dev/node-pool": "cpu"}}}],
    }


def test_chart_operator_runs_a_two_instance_xgboost_job_behind_its_network_policy_through_an_operator_restart(real_cluster: Cluster, rkubectl: Kubectl) -> None:
    suffix = uuid.uuid4().hex[:6]
    rel, system_ns, jobs_ns, pool = f"kp-{suffix}", f"kp-system-{suffix}", f"kp-jobs-{suffix}", f"rn-cpu-{suffix}"
    helm = (real_cluster.layout.bin("helm"), "--kubeconfig", str(real_cluster.kubeconfig))
    values = real_cluster.state_dir / f"{rel}-values.yaml"
    values.write_text(yaml.safe_dump(_chart_values(jobs_ns, pool)))
    other_ns = f"kp-other-{suffix}"
    rkubectl("create", "namespace", jobs_ns, check=True)
    rkubectl("create", "namespace", other_ns, check=True)
    proc = run_helm(*helm, "install", rel, str(CHART), "--namespace", system_ns, "--create-namespace",
                    "--values", str(values), "--wait", "--timeout", "180s", timeout=240)
    try:
        assert proc.returncode == 0, proc.stderr + rkubectl("describe", "pods", "-n", system_ns).stdout[-3000:]
        docs = [d for d in yaml.safe_load_all((EXAMPLES / "xgboost-job.yaml").read_text()) if d]
        for d in docs:
            if d["kind"] == "MLJob":
                d["spec"].update(computePool=pool, targetInstances=2)
        # A pod of another namespace, carrying the job's labels even, must not reach the job's Ray ports.
        while rkubectl("get", "serviceaccount", "default", "-n", other_ns).returncode != 0:
            time.sleep(0.3)
        _apply(rkubectl, other_ns, _pod("intruder", ["sleep", "3600"]))
        _wait_ready(rkubectl, other_ns, "intruder")
        rkubectl("apply", "-n", jobs_ns, "-f", "-", input=yaml.safe_dump_all(docs), check=True)
        t0 = time.monotonic()
        phase = None
        operator_deleted = False
        intruder: str | None = None
        while phase not in ("DONE", "FAILED", "CANCELLED"):
            if time.monotonic() - t0 > JOB_TIMEOUT_S:
                break
            time.sleep(1)
            phase = rkubectl.json("get", "mljob", "xgboost-train", "-n", jobs_ns).get("status", {}).get("phase")
            if phase == "RUNNING" and intruder is None:
                head = rkubectl.json("get", "pods", "-n", jobs_ns, "-l", "kubepool.dev/role=head")["items"]
                head_ip = head[0]["status"].get("podIP") if head else None
                if head_ip:
                    intruder = rkubectl("exec", "-n", other_ns, "intruder", "--", "python", "-c", PROBE, head_ip,
                                        "6379").stdout.strip()
            if phase == "RUNNING" and not operator_deleted:
                # The operator's pod dies mid-job: its Deployment starts another, which carries the job on.
                rkubectl("delete", "pods", "-n", system_ns, "-l", f"app.kubernetes.io/instance={rel},app.kubernetes.io/component=operator", "--wait=false",
                         check=True)
                operator_deleted = True
        pods = rkubectl.json("get", "pods", "-n", jobs_ns)["items"]
        diag = json.dumps([(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase")) for p in pods])
        logs = rkubectl("logs", "-n", jobs_ns, "-l", "kubepool.dev/job=xgboost-train,kubepool.dev/role=head",
                        "--tail=-1").stdout
        assert phase == "DONE", f"job {phase} after {time.monotonic() - t0:.0f}s; pods {diag}\n{logs[-3000:]}"
        assert "score: r2=" in logs, logs
        assert {p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("xgboost-train-")} == \
            {"real-node-1", "real-node-2"}
        assert operator_deleted, "the job never showed RUNNING"
        assert intruder and intruder.startswith("blocked"), f"a pod of another namespace reached Ray's GCS: {intruder}"
        (op,) = [p for p in rkubectl.json("get", "pods", "-n", system_ns, "-l", "app.kubernetes.io/component=operator")["items"]
                 if not p["metadata"].get("deletionTimestamp")]
        assert op["spec"]["containers"][0]["image"].endswith("kubepool/operator:dev")
        assert op["status"]["containerStatuses"][0]["imageID"], "the operator ran from the imported image"
        # Deleting the job leaves no pod behind (the kubelets really stopped the containers).
        rkubectl("delete", "mljob", "xgboost-train", "-n", jobs_ns, "--wait=true", "--timeout=120s", check=True,
                 timeout=130)
        deadline = time.monotonic() + 60
        while left := rkubectl.json("get", "pods", "-n", jobs_ns)["items"]:
            assert time.monotonic() < deadline, f"pods left: {[p['metadata']['name'] for p in left]}"
            time.sleep(1)
    finally:
        run_helm(*helm, "uninstall", rel, "--namespace", system_ns, "--wait", timeout=180)
        rkubectl("delete", "namespace", jobs_ns, system_ns, other_ns, "--wait=false")
        values.unlink(missing_ok=True)
