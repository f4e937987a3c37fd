"""Security: the operator's RBAC has no wildcards and never lists or watches Secrets; instance pods pass the
`restricted` Pod Security level; Ray token auth refuses a client without the token, and so does the head's
shutdown endpoint (#18 item 5); every job has its NetworkPolicy; nothing exposes a job's dashboard outside the
job; a Secret's value in a payload's failure never reaches the job's status or Events (#39)."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import job, pod_running, record, sleep_cmd, wait_terminal

from kubepool import contract, naming
from kubepool.controller.builders import build_instance_pods
from kubepool.controller.builders.pods import CREDENTIAL_KEYS, secret_hints
from kubepool.controller.config import OperatorConfig
from kubepool.local import controlplane
from kubepool.runtime import redact, result
from support.factories import job as job_model
from support.factories import pool as pool_model
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
    secret = get_json(kubectl, namespace, "secret", naming.job_secret_name("ray-auth"))  # the contract and the token
    doc = contract.parse_contract(base64.b64decode(secret["data"][contract.CONTRACT_FILENAME]).decode())
    base = f"http://{head['status']['podIP']}:{doc.ray.dashboard_port}"
    url = f"{base}/api/version"
    token = base64.b64decode(secret["data"][naming.RAY_TOKEN_KEY]).decode()

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


SECRET = "hunter2-Secret-Value-9f3a"
API_SECRET = "envfrom-Api-Key-51c7"


def test_the_operator_says_where_the_pods_secrets_are() -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
           {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}, {"name": "LR", "value": "0.1"}]
    volumes = [{"name": "tls", "secret": {"secretName": "tls"}}, {"name": "cfg", "configMap": {"name": "cfg"}},
               {"name": "both", "projected": {"sources": [{"configMap": {"name": "cfg"}}, {"secret": {"name": "db"}}]}}]
    mounts = [{"name": "tls", "mountPath": "/etc/tls"}, {"name": "cfg", "mountPath": "/etc/cfg"},
              {"name": "both", "mountPath": "/etc/both"}]
    hints = {e["name"]: e["value"] for e in secret_hints(env, ["aws"], volumes, mounts)}
    assert hints == {contract.ENV_SECRET_ENV: ",".join(["TOKEN", *CREDENTIAL_KEYS]), contract.ENV_SECRET_DIRS: "/etc/tls:/etc/both"}
    assert secret_hints([env[2]], [], [], []) == []


def test_the_runtime_keeps_secret_values_out_of_its_messages(tmp_path: Path) -> None:
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "key.pem").write_text("-----BEGIN KEY-----\nAAAAsecretline\n-----END KEY-----\n")
    (tmp_path / "tls" / "..data").mkdir()  # the kubelet's atomic-writer directory: its files are the same keys
    env = {contract.ENV_SECRET_ENV: "TOKEN,UNSET", contract.ENV_SECRET_DIRS: str(tmp_path / "tls"), "TOKEN": 'p"w-' + SECRET,
           "LR": "0.1"}
    values = redact.secret_values(env)
    text = json.dumps({"error": f"RuntimeError: login with {env['TOKEN']} failed; key line AAAAsecretline; lr 0.1"})
    out = redact.redact(text, values)
    assert SECRET not in out and "AAAAsecretline" not in out and out.count(redact.REDACTED) == 2, out
    assert "lr 0.1" in out and json.loads(out)["error"].startswith("RuntimeError: login with [redacted] failed")


def test_an_envfrom_secrets_values_are_redacted_from_its_mount(tmp_path: Path) -> None:
    """An envFrom Secret's variables are its keys, which nobody names to the runtime: its values come from the
    Secret's mount (builders/envfrom.py), laid out as the kubelet writes a secret volume (key -> ..data/key)."""
    [pod] = build_instance_pods(job_model(envFrom=[{"secretRef": {"name": "api"}}]), {"cpu": pool_model()}, granted=1,
                                attempt=0, cfg=OperatorConfig(default_image="img:1"))
    container = pod["spec"]["containers"][0]
    [mount] = [m for m in container["volumeMounts"] if m["name"].startswith(contract.ENV_FROM_VOLUME_PREFIX)]
    hint = next(e["value"] for e in container["env"] if e["name"] == contract.ENV_SECRET_DIRS)
    assert mount["mountPath"] in hint.split(":"), hint
    root = tmp_path / mount["mountPath"].lstrip("/")
    (root / "..2026_12_05_08_00_00.1").mkdir(parents=True)
    (root / "..2026_12_05_08_00_00.1" / "API_KEY").write_text(SECRET)
    (root / "..data").symlink_to("..2026_12_05_08_00_00.1")
    (root / "API_KEY").symlink_to("..data/API_KEY")
    env = {contract.ENV_SECRET_DIRS: ":".join(str(tmp_path / d.lstrip("/")) for d in hint.split(":")), "API_KEY": SECRET}
    out = redact.redact(f"RuntimeError: the API refused key {SECRET}", redact.secret_values(env))
    assert out == "RuntimeError: the API refused key [redacted]", out


def test_the_termination_log_leaves_the_secret_values_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The termination message is what the operator quotes in the job's status and Events: written redacted."""
    monkeypatch.setenv(contract.ENV_SECRET_ENV, "TOKEN")
    monkeypatch.setenv("TOKEN", SECRET)
    log = tmp_path / "termination-log"
    result.write_termination_log(log, result.ExecutionResult(False, 1, error=f"RuntimeError: login with {SECRET} failed"), 0)
    text = log.read_text()
    assert SECRET not in text and "login with [redacted] failed" in text, text


def test_a_secret_in_a_failing_payload_never_reaches_status_or_events(kubectl: Any, namespace: str, operator: Operator,
                                                                     small_pool: Any) -> None:
    """A payload fails with its Secret's value in the exception (a log-in error quoting the token): the job FAILS
    saying why, and neither its status (message, conditions, instances) nor its Events carry the value."""
    kubectl("create", "secret", "generic", "db", f"--from-literal=password={SECRET}", "-n", namespace, check=True)
    # An envFrom Secret too: its variable is a key of the Secret, named to nobody (#39).
    kubectl("create", "secret", "generic", "api", f"--from-literal=API_KEY={API_SECRET}", "-n", namespace, check=True)
    kubectl("create", "configmap", "payload", "-n", namespace, "--from-literal=fail.py=import os\nraise RuntimeError("
            "'cannot log in with ' + os.environ['TOKEN'] + ' nor ' + os.environ['API_KEY'])\n", check=True)
    body = job("leaky", small_pool(max_nodes=1), ["unused"], code={"configMap": "payload"},
               env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
               envFrom=[{"secretRef": {"name": "api"}}])
    body["spec"]["entrypoint"] = {"file": "fail.py"}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body), check=True)
    status = wait_terminal(kubectl, namespace, ["leaky"], 180)["leaky"]
    assert status["phase"] == "FAILED", status
    assert "cannot log in with [redacted] nor [redacted]" in status.get("message", ""), status
    pod = status["instances"][0]["pod"]
    term = get_json(kubectl, namespace, "pod", pod)["status"]["containerStatuses"][0]["state"]["terminated"]
    events = get_json(kubectl, namespace, "events")["items"]
    assert [e for e in events if e["involvedObject"].get("name") == "leaky" and e["type"] == "Warning"], events
    for where, text in (("status", json.dumps(status)), ("Events", json.dumps(events)), ("termination message", term.get("message", ""))):
        assert SECRET not in text and API_SECRET not in text, f"a Secret's value reached the job's {where}: {text[:2000]}"
