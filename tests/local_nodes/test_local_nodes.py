"""Local nodes against the real control plane: pods run as processes on this machine. No API is mocked.

Every pod selects the CPU pool (`kubepool.dev/node-pool: cpu`): fake kwok nodes of other tests must not
receive them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool.local import processes
from kubepool.local.agent.config import load_nodes
from support import private_nodes

Kubectl = Any  # tests/conftest.py's Kubectl
Pod = dict[str, Any]
CPU_POOL = {"kubepool.dev/node-pool": "cpu"}


def apply(kubectl: Kubectl, ns: str, *docs: dict[str, Any]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs), check=True)


def pod_manifest(name: str, script: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "kubepool/runtime:dev", "command": ["python", "-c", textwrap.dedent(script)]}  # fmt: skip
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "nodeSelector": CPU_POOL, "containers": [container], **spec},
    }


def wait_pod(kubectl: Kubectl, ns: str, name: str, ok: Callable[[Pod], bool], timeout: float = 60) -> Pod:
    deadline = time.monotonic() + timeout
    pod: Pod = {}
    while time.monotonic() < deadline:
        proc = kubectl("get", "pod", name, "-n", ns, "-o", "json")
        if proc.returncode == 0:
            pod = json.loads(proc.stdout)
            if ok(pod):
                return pod
        time.sleep(0.5)
    raise AssertionError(
        f"pod {ns}/{name} did not get there in {timeout}s: {json.dumps(pod.get('status'), indent=1)}"
    )


def phase_in(*phases: str) -> Callable[[Pod], bool]:
    return lambda pod: pod.get("status", {}).get("phase") in phases


def logs(kubectl: Kubectl, ns: str, name: str, *args: str) -> str:
    return str(kubectl("logs", name, "-n", ns, *args, check=True).stdout)


def logged(kubectl: Kubectl, ns: str, name: str, text: str) -> Callable[[Pod], bool]:
    """Pod predicate: its log (once the container started) contains `text`."""
    return lambda _: text in str(kubectl("logs", name, "-n", ns).stdout)


def test_local_nodes_are_ready_with_labels_and_capacity(cluster: Any, kubectl: Kubectl) -> None:
    expected = load_nodes(cluster.state_dir / "nodes.yaml")
    nodes = {n["metadata"]["name"]: n for n in kubectl.json("get", "nodes")["items"]}
    for cfg in expected:
        node = nodes[cfg.name]
        assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == cfg.name
        assert cfg.labels.items() <= node["metadata"]["labels"].items()
        assert node["status"]["capacity"].items() >= cfg.capacity.items()
        assert {"type": "InternalIP", "address": cfg.ip} in node["status"]["addresses"]


def test_hello_succeeds_and_kubectl_logs_prints_it(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, pod_manifest("hello", "print('hello')"))
    pod = wait_pod(kubectl, namespace, "hello", phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    status = pod["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 0
    node = kubectl.json("get", "node", pod["spec"]["nodeName"])
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    assert pod["status"]["podIP"].startswith("127.") and pod["status"]["hostIP"] == node_ip
    assert logs(kubectl, namespace, "hello").strip() == "hello"


def test_missing_command_fails_with_a_reason(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, pod_manifest("nocmd", "", container={"command": ["kubepool-no-such-binary"]}))
    pod = wait_pod(kubectl, namespace, "nocmd", phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Failed"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "StartError" and "not found" in terminated["message"]


def test_missing_configmap_waits_then_runs(kubectl: Kubectl, namespace: str) -> None:
    env = [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "greeting"}}}]
    apply(
        kubectl,
        namespace,
        pod_manifest("cfg", "import os; print(os.environ['GREETING'])", container={"env": env}),
    )

    def config_error(pod: Pod) -> bool:
        waiting = (
            (pod.get("status", {}).get("containerStatuses") or [{}])[0].get("state", {}).get("waiting", {})
        )
        return bool(waiting.get("reason") == "CreateContainerConfigError")

    wait_pod(kubectl, namespace, "cfg", config_error)
    kubectl("create", "configmap", "later", "-n", namespace, "--from-literal=greeting=hi", check=True)
    assert wait_pod(kubectl, namespace, "cfg", phase_in("Succeeded"))["status"]["phase"] == "Succeeded"
    assert logs(kubectl, namespace, "cfg").strip() == "hi"


LIST_CONFIGMAPS = """
import json, os, ssl, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
print("contract", json.load(open("/etc/kubepool/contract.json")))
url = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
url += f"/api/v1/namespaces/{open(sa + '/namespace').read()}/configmaps"
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + open(sa + "/token").read()})
try:
    with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=sa + "/ca.crt")) as r:
        print("status", r.status, sorted(i["metadata"]["name"] for i in json.load(r)["items"]))
except urllib.error.HTTPError as e:
    print("status", e.code)
"""


def test_configmap_volume_and_service_account_token_follow_rbac(kubectl: Kubectl, namespace: str) -> None:
    kubectl(
        "create",
        "configmap",
        "contract",
        "-n",
        namespace,
        '--from-literal=contract.json={"job": "j"}',
        check=True,
    )
    kubectl("create", "serviceaccount", "reader", "-n", namespace, check=True)
    kubectl(
        "create", "role", "cm-reader", "-n", namespace, "--verb=list", "--resource=configmaps", check=True
    )
    kubectl("create", "rolebinding", "cm-reader", "-n", namespace, "--role=cm-reader", f"--serviceaccount={namespace}:reader", check=True)  # fmt: skip
    volume = {"volumes": [{"name": "contract", "configMap": {"name": "contract"}}]}
    mount = {"volumeMounts": [{"name": "contract", "mountPath": "/etc/kubepool", "readOnly": True}]}
    apply(
        kubectl,
        namespace,
        pod_manifest("allowed", LIST_CONFIGMAPS, serviceAccountName="reader", container=mount, **volume),
        pod_manifest("denied", LIST_CONFIGMAPS, container=mount, **volume),
    )
    for name in ("allowed", "denied"):
        assert (
            wait_pod(kubectl, namespace, name, phase_in("Succeeded", "Failed"))["status"]["phase"]
            == "Succeeded"
        )
    allowed, denied = logs(kubectl, namespace, "allowed"), logs(kubectl, namespace, "denied")
    assert "contract {'job': 'j'}" in allowed and "contract {'job': 'j'}" in denied
    assert "status 200" in allowed and "contract" in allowed.split("status 200")[1]
    assert "status 403" in denied


SERVER = """
import os, socket
s = socket.create_server((os.environ["POD_IP"], 47000))
conn, _ = s.accept()
data = conn.recv(100)
conn.sendall(data.upper() + b" from " + socket.gethostname().encode())
print("served", data.decode())
"""
CLIENT = """
import socket, time
def resolve(name):  # a peer's name exists once its pod has an address: retry, as a client of cluster DNS does
    for _ in range(150):
        try:
            return socket.gethostbyname(name)
        except OSError:
            time.sleep(0.2)
    return socket.gethostbyname(name)
for name in ("algo-1", "algo-1.job-svc", "algo-1.job-svc.{ns}.svc.cluster.local"):
    print(name, resolve(name))
for attempt in range(100):
    try:
        c = socket.create_connection(("algo-1", 47000), timeout=5)
        break
    except OSError:
        time.sleep(0.2)
c.sendall(b"ping")
print("reply", c.recv(100).decode())
"""


def test_pods_reach_each_other_by_hostname(kubectl: Kubectl, namespace: str) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "job-svc"},
               "spec": {"clusterIP": "None", "selector": {"job": "j"}, "ports": [{"port": 47000}]}}  # fmt: skip

    def member(i: int, script: str) -> dict[str, Any]:
        pod = pod_manifest(f"algo-{i}", script, hostname=f"algo-{i}", subdomain="job-svc",
                           dnsConfig={"searches": [f"job-svc.{namespace}.svc.cluster.local"]},
                           container={"env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]})  # fmt: skip
        pod["metadata"]["labels"] = {"job": "j"}
        return pod

    apply(kubectl, namespace, service, member(1, SERVER), member(2, CLIENT.replace("{ns}", namespace)))
    server = wait_pod(kubectl, namespace, "algo-1", phase_in("Succeeded", "Failed"))
    client = wait_pod(kubectl, namespace, "algo-2", phase_in("Succeeded", "Failed"))
    out = logs(kubectl, namespace, "algo-2")
    assert client["status"]["phase"] == "Succeeded", out
    assert server["status"]["phase"] == "Succeeded"
    assert f"algo-1 {server['status']['podIP']}" in out
    assert "reply PING from algo-1" in out


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_deletion_kills_the_whole_process_group(kubectl: Kubectl, namespace: str) -> None:
    marker = f"kubepool-marker-{uuid.uuid4().hex[:8]}"
    script = f"""
import subprocess, time
subprocess.Popen(["python", "-c", "import time; time.sleep(600)", "{marker}"])
subprocess.Popen(["python", "-c", "import time; time.sleep(600)", "{marker}"], start_new_session=True)
print("started", flush=True)
time.sleep(600)
"""
    apply(kubectl, namespace, pod_manifest("sleeper", script, terminationGracePeriodSeconds=3))
    wait_pod(kubectl, namespace, "sleeper", logged(kubectl, namespace, "sleeper", "started"))
    assert len(_processes_with(marker)) == 3  # the script itself and its two children
    started = time.monotonic()
    kubectl("delete", "pod", "sleeper", "-n", namespace, "--wait=true", "--timeout=30s", check=True)
    assert time.monotonic() - started < 15
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []


def test_logs_follow_streams_until_the_container_ends(kubectl: Kubectl, namespace: str) -> None:
    script = "import time\nfor i in range(8):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n"
    apply(kubectl, namespace, pod_manifest("ticker", script))
    wait_pod(kubectl, namespace, "ticker", phase_in("Running", "Succeeded"))
    proc = subprocess.run(
        [kubectl.binary, f"--kubeconfig={kubectl.kubeconfig}", "logs", "-f", "ticker", "-n", namespace],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[1] for line in proc.stdout.splitlines()] == [str(i) for i in range(8)]
    assert logs(kubectl, namespace, "ticker", "--tail=2").split() == ["tick", "6", "tick", "7"]
    stamped = logs(kubectl, namespace, "ticker", "--timestamps", "--tail=1").split()
    assert stamped[0].startswith("20") and stamped[0].endswith("Z") and stamped[1:] == ["tick", "7"]
    assert len(logs(kubectl, namespace, "ticker", "--since=1h").splitlines()) == 8
    time.sleep(2)
    assert logs(kubectl, namespace, "ticker", "--since=1s") == ""


def test_on_failure_restarts_and_keeps_the_previous_log(kubectl: Kubectl, namespace: str) -> None:
    script = """
import os, sys
first = not os.path.exists("/scratch/ran")
open("/scratch/ran", "w").close()
print("first" if first else "second")
sys.exit(1 if first else 0)
"""
    manifest = pod_manifest("flaky", script, restartPolicy="OnFailure", volumes=[{"name": "scratch", "emptyDir": {}}],
                            container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]})  # fmt: skip
    apply(kubectl, namespace, manifest)
    pod = wait_pod(kubectl, namespace, "flaky", phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1 and status["lastState"]["terminated"]["exitCode"] == 1
    assert logs(kubectl, namespace, "flaky").strip() == "second"
    assert logs(kubectl, namespace, "flaky", "--previous").strip() == "first"


@pytest.mark.parametrize("policy", ["File", "FallbackToLogsOnError"])
def test_termination_message(kubectl: Kubectl, namespace: str, policy: str) -> None:
    script = "import sys\nprint('last words')\nif sys.argv[-1] == 'File':\n    open('/dev/termination-log', 'w').write('written')\nsys.exit(2)"  # fmt: skip
    manifest = pod_manifest("msg", script, container={"args": [policy], "terminationMessagePolicy": policy})
    apply(kubectl, namespace, manifest)
    pod = wait_pod(kubectl, namespace, "msg", phase_in("Failed", "Succeeded"))
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 2
    assert terminated["message"].strip() == ("written" if policy == "File" else "last words")


FEATURES = """
import os, pathlib
print("ids", os.getuid(), os.getgid(), sorted(os.getgroups()))
pathlib.Path(os.environ["HOME"], "note").write_text("home is writable")
print("init wrote", open("/kubepool-test-work/from-init").read())
print("labels", open("/etc/podinfo/labels").read().replace(chr(10), ","))
print("memory", os.environ["MEM_MI"], "node", os.environ["NODE"])
open("/cache/x", "w").write("in memory")
print("token readable", len(open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()) > 0)
"""


def test_init_containers_users_and_volumes(kubectl: Kubectl, namespace: str) -> None:
    mounts = [{"name": "work", "mountPath": "/kubepool-test-work"}, {"name": "podinfo", "mountPath": "/etc/podinfo"},
              {"name": "cache", "mountPath": "/cache"}]  # fmt: skip
    env = [{"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
           {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]  # fmt: skip
    init = {"name": "init", "image": "busybox", "command": ["sh", "-c", "echo hi > /kubepool-test-work/from-init"],
            "volumeMounts": mounts[:1]}  # fmt: skip
    manifest = pod_manifest(
        "features", FEATURES,
        securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000},
        initContainers=[init],
        volumes=[{"name": "work", "emptyDir": {}}, {"name": "cache", "emptyDir": {"medium": "Memory"}},
                 {"name": "podinfo", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}],
        container={"volumeMounts": mounts, "env": env, "resources": {"limits": {"memory": "256Mi"}}},
    )  # fmt: skip
    manifest["metadata"]["labels"] = {"app": "features"}
    apply(kubectl, namespace, manifest)
    pod = wait_pod(kubectl, namespace, "features", phase_in("Succeeded", "Failed"))
    out = logs(kubectl, namespace, "features")
    assert pod["status"]["phase"] == "Succeeded", out
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert "ids 1000 3000 [2000, 3000]" in out  # runAsGroup is a supplementary group too
    assert "init wrote hi" in out and 'labels app="features"' in out
    assert f"memory 256 node {pod['spec']['nodeName']}" in out and "token readable True" in out


def test_host_path_and_pvc_volumes(kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "train.csv").write_text("a,b\n")
    pv_name = f"pv-{namespace}"[:60]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                   "hostPath": {"path": str(tmp_path / "pv"), "type": "DirectoryOrCreate"}}}  # fmt: skip
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "out"},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv_name,
                    "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    kubectl("apply", "-f", "-", input=yaml.safe_dump(pv), check=True)
    try:
        script = "import os\nprint(os.listdir('/opt/ml/input'))\nopen('/opt/ml/output/model.txt', 'w').write('trained')"
        manifest = pod_manifest("volumes", script,
                                volumes=[{"name": "in", "hostPath": {"path": str(tmp_path / "input")}},
                                         {"name": "out", "persistentVolumeClaim": {"claimName": "out"}}],
                                container={"volumeMounts": [{"name": "in", "mountPath": "/opt/ml/input", "readOnly": True},
                                                            {"name": "out", "mountPath": "/opt/ml/output"}]})  # fmt: skip
        apply(kubectl, namespace, pvc, manifest)
        pod = wait_pod(kubectl, namespace, "volumes", phase_in("Succeeded", "Failed"), timeout=90)
        assert pod["status"]["phase"] == "Succeeded", logs(kubectl, namespace, "volumes")
        assert "['train.csv']" in logs(kubectl, namespace, "volumes")
        assert (tmp_path / "pv" / "model.txt").read_text() == "trained"
    finally:
        kubectl("delete", "pv", pv_name, "--wait=false")


def test_active_deadline_fails_the_pod(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, pod_manifest("late", "import time; time.sleep(120)", activeDeadlineSeconds=2))
    pod = wait_pod(kubectl, namespace, "late", phase_in("Failed", "Succeeded"), timeout=30)
    assert pod["status"]["phase"] == "Failed" and pod["status"]["reason"] == "DeadlineExceeded"


# This file's own node (support.private_nodes): its agent is stopped and its Node deleted with no other test's
# pods on it, so those tests take no exclusive turn of the cluster.
PRIVATE = "local-nodes"
RESTART_NODE = private_nodes.GROUPS[PRIVATE][0]


def on_private_node(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["spec"].update(nodeSelector={"kubernetes.io/hostname": RESTART_NODE},
                            tolerations=[private_nodes.toleration(PRIVATE)])
    return manifest


def _stop_agent(cluster: Any, sig: signal.Signals) -> None:
    pid = processes.read_pid(cluster.layout, f"agent-{RESTART_NODE}")
    assert pid is not None
    os.kill(pid, sig)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()


def test_restarted_agent_adopts_running_pods(cluster: Any, kubectl: Kubectl, namespace: str) -> None:
    script = "import time\nprint('start', flush=True)\ntime.sleep(8)\nprint('end')"
    apply(
        kubectl,
        namespace,
        on_private_node(pod_manifest("survivor", script)),
    )
    wait_pod(kubectl, namespace, "survivor", logged(kubectl, namespace, "survivor", "start"))
    try:
        _stop_agent(cluster, signal.SIGKILL)  # a crash: the pod's processes outlive the agent
    finally:
        private_nodes.start_agent(cluster.layout, RESTART_NODE)
    pod = wait_pod(kubectl, namespace, "survivor", phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert logs(kubectl, namespace, "survivor").split() == ["start", "end"]


def test_stopped_agent_stops_its_pods_and_the_next_one_restarts_them(
    cluster: Any, kubectl: Kubectl, namespace: str
) -> None:
    marker = f"kubepool-marker-{uuid.uuid4().hex[:8]}"
    script = f"import time\nprint('{marker}', flush=True)\ntime.sleep(600)"
    apply(
        kubectl,
        namespace,
        on_private_node(pod_manifest("stopped", script)),
    )
    wait_pod(kubectl, namespace, "stopped", logged(kubectl, namespace, "stopped", marker))
    assert _processes_with(marker)
    try:
        _stop_agent(cluster, signal.SIGTERM)
        assert _processes_with(marker) == []  # no orphans
    finally:
        private_nodes.start_agent(cluster.layout, RESTART_NODE)
    deadline = time.monotonic() + 30
    while not _processes_with(marker):
        assert time.monotonic() < deadline, "the restarted agent did not start the pod again"
        time.sleep(0.2)
    pod = wait_pod(kubectl, namespace, "stopped", phase_in("Running"))
    assert pod["status"]["containerStatuses"][0]["state"].get("running")
    # Same restart count, so the same log: the second start is appended to the first.
    wait_pod(
        kubectl,
        namespace,
        "stopped",
        lambda _: logs(kubectl, namespace, "stopped").split() == [marker, marker],
    )


def test_a_pod_deleted_while_its_agent_was_down_is_stopped_by_the_next_agent(
    cluster: Any, kubectl: Kubectl, namespace: str
) -> None:
    """The kubelet's duty at its start: a pod found terminating has its containers killed, also those a previous
    agent process left running (before, the new agent dropped the pod without stopping them: orphans)."""
    marker = f"kubepool-marker-{uuid.uuid4().hex[:8]}"
    script = f"import time\nprint('{marker}', flush=True)\ntime.sleep(600)"
    apply(kubectl, namespace, on_private_node(pod_manifest("orphaned", script, terminationGracePeriodSeconds=1)))
    wait_pod(kubectl, namespace, "orphaned", logged(kubectl, namespace, "orphaned", marker))
    try:
        _stop_agent(cluster, signal.SIGKILL)  # its pod's processes run on
        kubectl("delete", "pod", "orphaned", "-n", namespace, "--wait=false", check=True)  # terminating: no agent
        assert _processes_with(marker)
    finally:
        private_nodes.start_agent(cluster.layout, RESTART_NODE)
    deadline = time.monotonic() + 30
    try:
        while _processes_with(marker) or kubectl("get", "pod", "orphaned", "-n", namespace).returncode == 0:
            assert time.monotonic() < deadline, (
                f"the new agent left the deleted pod's processes {_processes_with(marker)} running"
            )
            time.sleep(0.2)
    finally:
        for pid in _processes_with(marker):  # no agent stops them any more: the failed test does
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


READY_LATER = """
import http.server, os, threading, time
time.sleep(8)  # not ready for a while
server = http.server.HTTPServer((os.environ["POD_IP"], 38080), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
time.sleep(600)
"""


def test_readiness_probe_gates_ready(kubectl: Kubectl, namespace: str) -> None:
    container = {
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": 38080}],
        "readinessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 1},
    }
    apply(
        kubectl,
        namespace,
        pod_manifest("web", READY_LATER, container=container, terminationGracePeriodSeconds=1),
    )
    running = wait_pod(kubectl, namespace, "web", phase_in("Running"))
    assert running["status"]["containerStatuses"][0]["ready"] is False
    ready = wait_pod(
        kubectl, namespace, "web", lambda p: p["status"]["containerStatuses"][0]["ready"], timeout=30
    )
    assert {c["type"]: c["status"] for c in ready["status"]["conditions"]}["Ready"] == "True"


def test_deleted_node_registers_again(kubectl: Kubectl) -> None:
    node = RESTART_NODE  # a deleted Node takes its pods along: only this file's ever run there
    kubectl("delete", "node", node, check=True)
    deadline = time.monotonic() + 40
    while kubectl("get", "node", node).returncode != 0:
        assert time.monotonic() < deadline, f"{node} was not registered again"
        time.sleep(0.5)
    lease = kubectl.json("get", "lease", node, "-n", "kube-node-lease")
    assert lease["spec"]["holderIdentity"] == node


def test_host_network_pod_gets_the_node_ip(kubectl: Kubectl, namespace: str) -> None:
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    apply(kubectl, namespace, pod_manifest("hostnet", "import os; print(os.environ['POD_IP'])", hostNetwork=True, container={"env": env}))  # fmt: skip
    pod = wait_pod(kubectl, namespace, "hostnet", phase_in("Succeeded", "Failed"))
    assert pod["status"]["podIP"] == pod["status"]["hostIP"]
    assert logs(kubectl, namespace, "hostnet").strip() == pod["status"]["hostIP"]


LIVE_BRIEFLY = """
import http.server, os, pathlib, threading, time
time.sleep(1)
pathlib.Path("/tmp/started").touch()
server = http.server.HTTPServer((os.environ["POD_IP"], 38081), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
time.sleep(4)
server.shutdown()
server.server_close()
time.sleep(600)
"""


def test_startup_and_liveness_probes_restart_an_unhealthy_container(kubectl: Kubectl, namespace: str) -> None:
    container = {
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        # exec probes run inside the container's mount namespace: /tmp is the pod's own
        "startupProbe": {
            "exec": {"command": ["test", "-f", "/tmp/started"]},
            "periodSeconds": 1,
            "failureThreshold": 30,
        },
        "livenessProbe": {"tcpSocket": {"port": 38081}, "periodSeconds": 1, "failureThreshold": 2},
    }
    manifest = pod_manifest("unhealthy", LIVE_BRIEFLY, restartPolicy="Always", terminationGracePeriodSeconds=1, container=container)  # fmt: skip
    apply(kubectl, namespace, manifest)
    pod = wait_pod(kubectl, namespace, "unhealthy", lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1)  # fmt: skip
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] in (137, 143)
