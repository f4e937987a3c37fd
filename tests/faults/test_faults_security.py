"""Security: the operator's RBAC has no wildcards and never lists or watches Secrets; instance pods pass the
`restricted` Pod Security level; Ray token auth refuses a client without the token, and so does the head's
shutdown endpoint (#18 item 5); every job has its NetworkPolicy; nothing exposes a job's dashboard outside the
job."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import yaml
from faultkit import job, pod_running, record, sleep_cmd, wait_terminal

from kubepool import contract, naming
from kubepool.local import controlplane
from support.operator_cluster import ROOT, Operator, get_json, wait_phase


def test_operator_rbac_has_no_wildcards_and_no_secret_reads() -> None:
    helm = str(controlplane.ensure_binaries(say=lambda _: None) / "helm")
    out = subprocess.run([helm, "template", "kp", str(ROOT / "charts" / "kubepool"), "--namespace", "kubepool-system",
                          "--kube-version", "1.36.0"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    roles = [d for d in docs if d["kind"] in ("ClusterRole", "Role")]
    assert roles, "the chart renders no Role/ClusterRole"
    for role in roles:
        for rule in role.get("rules") or []:
            where = f"{role['kind']} {role['metadata']['name']}: {rule}"
            assert "*" not in rule.get("verbs", []) and "*" not in rule.get("resources", []), where
            assert "*" not in rule.get("apiGroups", []), where
            if "secrets" in rule.get("resources", []) and "" in rule.get("apiGroups", [""]):
                assert not {"list", "watch"} & set(rule["verbs"]), f"Secrets listable/watchable: {where}"


def _ray_job(name: str, pool: str, seconds: int) -> dict[str, Any]:
    return job(name, pool, ["python", "-c", f"import time; time.sleep({seconds})"], mode="head",
               instancesTimeoutSeconds=180)


def test_restricted_namespace_ray_token_netpol_no_exposure(cluster: Any, kubectl: Any, namespace: str,
                                                           operator: Operator, small_pool: Any, recorder: Any) -> None:
    kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest", check=True)
    pool = small_pool(max_nodes=3)
    t0 = time.monotonic()
    kubectl("apply", "-n", namespace, "-f", "-", check=True, input=yaml.safe_dump_all(
        [_ray_job("ray-auth", pool, 120), job("plain", pool, sleep_cmd(1), targetInstances=2)]))
    # Pod Security `restricted`: the pods were admitted (a violation is a FailedCreate, no pod at all).
    assert wait_terminal(kubectl, namespace, ["plain"], 120)["plain"]["phase"] == "DONE"
    wait_phase(kubectl, namespace, "ray-auth", {"RUNNING"}, 180, operator)
    head = pod_running(kubectl, namespace, "ray-auth", role="head")[0]
    doc = contract.parse_contract(get_json(kubectl, namespace, "configmap", "ray-auth-contract")["data"][contract.CONTRACT_FILENAME])
    base = f"http://{head['status']['podIP']}:{doc.ray.dashboard_port}"
    url = f"{base}/api/version"
    secret = get_json(kubectl, namespace, "secret", naming.ray_token_secret_name("ray-auth"))
    token = base64.b64decode(next(iter(secret["data"].values()))).decode()

    def get(headers: dict[str, str]) -> int:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0  # not listening yet

    deadline = time.monotonic() + 60
    while (code := get({"Authorization": f"Bearer {token}"})) != 200 and time.monotonic() < deadline:
        time.sleep(1)  # the dashboard comes up a little after the GCS
    assert code == 200, f"the dashboard refused the job's own token ({code})"
    assert get({}) in (401, 403), "a client without the token was let in"
    assert get({"Authorization": "Bearer not-the-token"}) in (401, 403), "a wrong token was let in"
    url = f"{base}/api/jobs/"  # the Jobs API: what ShadowRay (CVE-2023-48022) abused
    assert get({}) in (401, 403) and get({"Authorization": f"Bearer {token}"}) == 200
    # The head's shutdown endpoint: a stranger's poll is refused (it would count as a worker, or acknowledge
    # "leave" for one); the job's token is answered "stay" and the head runs on.
    url = f"http://{head['status']['podIP']}:{naming.SHUTDOWN_PORT}/poll?instance=1"
    assert get({}) == 401 and get({"Authorization": "Bearer not-the-token"}) == 403
    assert get({"Authorization": f"Bearer {token}"}) == 200
    after = pod_running(kubectl, namespace, "ray-auth", role="head")[0]
    assert after["metadata"]["uid"] == head["metadata"]["uid"], "the head pod was replaced"
    assert not any(c.get("restartCount") for c in after["status"]["containerStatuses"]), after["status"]
    assert get_json(kubectl, namespace, "mljob", "ray-auth")["status"]["phase"] == "RUNNING"
    # Per-job NetworkPolicy: only the job's own pods may reach its pods.
    for name in ("ray-auth", "plain"):
        uid = get_json(kubectl, namespace, "mljob", name)["metadata"]["uid"]
        np = get_json(kubectl, namespace, "networkpolicy", f"{name}-ray")["spec"]
        own = np["podSelector"]["matchLabels"]
        assert own in ({naming.LABEL_JOB_UID: uid}, {naming.LABEL_JOB: name}) or uid in own.values() or name in own.values(), np
        assert np["policyTypes"] == ["Ingress"] and np["ingress"] == [{"from": [{"podSelector": np["podSelector"]}]}], np
    # Nothing exposes the dashboard: every Service is headless and internal.
    for svc in get_json(kubectl, namespace, "services")["items"]:
        spec = svc["spec"]
        assert spec.get("type", "ClusterIP") == "ClusterIP" and spec.get("clusterIP") == "None", svc["metadata"]["name"]
        assert not spec.get("externalIPs") and not any(p.get("nodePort") for p in spec.get("ports", [])), spec
    for p in get_json(kubectl, namespace, "pods")["items"]:
        for c in p["spec"]["containers"]:
            assert not any(port.get("hostPort") for port in c.get("ports") or []), json.dumps(c.get("ports"))
    kubectl("delete", "mljob", "ray-auth", "-n", namespace, "--wait=false")
    record(cluster, "security", faults=0, jobs=2, lost=0, orphaned=0, converge_s=time.monotonic() - t0)
