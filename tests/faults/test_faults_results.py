"""Results cannot be forged (#39): job.result() unpickles only what the job's own head wrote. The chart's
results policy (templates/results-policy.yaml) on the real API server, without an operator: a namespace editor
(the chart's MLJob editor role, impersonated) and another job's pod (a token bound to it) try to plant a pickle
that would create a file when unpickled; both are refused, result() says no result was kept, and the file is
never created. The job's own head writes its result; it may not write another instance's."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import cloudpickle
import httpx
import pytest
import yaml

from kubepool import naming
from kubepool.contract import StoredResult
from kubepool.controller.builders.children import build_namespace_runtime_rbac
from kubepool.jobs.manager import get_job
from kubepool.jobs.results import READER_LABEL
from kubepool.local import controlplane
from support.operator_cluster import ROOT

pytestmark = [pytest.mark.cluster]
POLICY_READY_S = 60
REFUSED = "only the job's own instance pod may write its result"
EDITOR = "mallory"


def _render(template: str) -> list[dict[str, Any]]:
    helm = str(controlplane.ensure_binaries(say=lambda _: None) / "helm")
    out = subprocess.run([helm, "template", "kp", str(ROOT / "charts" / "kubepool"), "--namespace", "kubepool-system",
                          "--kube-version", "1.36.0", "--show-only", template],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


class Planted:
    """Unpickling it creates `path`: proof that a forged result ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def _forged(pod: str, marker: Path) -> str:
    doc = {"success": True, "value": Planted(str(marker)), "error": "", "traceback": ""}
    data = base64.b64encode(cloudpickle.dumps(doc)).decode()
    return StoredResult(pod=pod, instance=0, success=True, data=data).model_dump_json(exclude_none=True)


OTHER_ACCOUNT = "other-runtime"


def _other_account() -> list[dict[str, Any]]:
    """Another job's account (as runtimeAccount per-job gives each job), which RBAC lets patch any MLJob here:
    outside the chart's runtime-own-job policy, which guards only the shared account, so only the results policy
    stands between its pods and job a's result."""
    rbac = "rbac.authorization.k8s.io"
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": OTHER_ACCOUNT}},
            {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": {"name": OTHER_ACCOUNT},
             "rules": [{"apiGroups": [naming.GROUP], "resources": ["mljobs"], "verbs": ["get", "patch"]}]},
            {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": {"name": OTHER_ACCOUNT},
             "roleRef": {"apiGroup": rbac, "kind": "Role", "name": OTHER_ACCOUNT},
             "subjects": [{"kind": "ServiceAccount", "name": OTHER_ACCOUNT}]}]


def _pod(name: str, account: str = naming.RUNTIME_ACCOUNT) -> dict[str, Any]:
    """A pod that never runs (no node matches) but exists, so a token can be bound to it."""
    sc = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
          "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"serviceAccountName": account, "nodeSelector": {"kubepool.dev/no-such-node": "x"},
                     "containers": [{"name": "c", "image": "none", "securityContext": sc}]}}


def _job(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND,
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"computePool": "no-such-pool", "entrypoint": {"file": "f.py", "function": "main"}}}


def _annotate(key: str, value: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {key: value}}}


def _results_policy(ns: str) -> tuple[str, list[dict[str, Any]]]:
    """The chart's results policy as rendered, its binding limited to `ns` (policies are cluster-wide)."""
    [policy], [binding] = [[o for o in _render("templates/results-policy.yaml") if o["kind"] == kind]
                           for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]
    name = f"{ns}-job-results"
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
    return name, [policy, binding]


@pytest.fixture
def results_policy(kubectl: Any, crds: None, namespace: str) -> Any:
    name, objs = _results_policy(namespace)
    for obj in objs:
        kubectl("apply", "-f", "-", input=json.dumps(obj), check=True)
    yield name
    kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found")


def test_a_forged_result_is_refused_and_never_unpickled(kubectl: Any, cluster: Any, crds: None, namespace: str,
                                                        tmp_path: Path) -> None:
    ns = namespace
    name, [policy, binding] = _results_policy(ns)
    # The namespace editor: the chart's MLJob editor rules (aggregated into `edit`), as a Role of this namespace.
    [editor] = [r for r in _render("templates/user-roles.yaml") if r["metadata"]["name"].endswith("-mljob-editor")]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "mljob-editor"},
            "rules": editor["rules"]}
    rb = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "mljob-editor"},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "mljob-editor"},
          "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": EDITOR}]}
    marker = tmp_path / "forged-result-ran"
    try:
        for obj in (policy, binding, role, rb, *build_namespace_runtime_rbac(ns), *_other_account()):
            kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj), check=True)
        uids = {}
        accounts = {"a-g-0": naming.RUNTIME_ACCOUNT, "b-g-0": OTHER_ACCOUNT}
        for job, pod in (("a", "a-g-0"), ("b", "b-g-0")):
            kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(_job(job)), check=True)
            kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(_pod(pod, accounts[pod])), check=True)
            uids[pod] = kubectl.json("get", "pod", pod, "-n", ns)["metadata"]["uid"]
            # What the operator writes: the instance's pod and uid, and (here) that the job is DONE.
            status = {"status": {"phase": "DONE", "instances": [{"instanceId": 0, "group": "g", "rankInGroup": 0,
                                                                 "host": "algo-1", "pod": pod, "podUid": uids[pod]}]}}
            kubectl("patch", "mljob", job, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status),
                    check=True)
        forged = _forged("a-g-0", marker)  # names job a's real head pod: the SDK's own check would pass it

        def as_editor(*args: str, **kw: Any) -> Any:
            return kubectl(*args, "-n", ns, f"--as={EDITOR}", **kw)

        # The policy is in force once it refuses the editor's write.
        deadline = time.monotonic() + POLICY_READY_S
        while (r := as_editor("patch", "mljob", "a", "--type=merge", "-p",
                              json.dumps(_annotate(naming.result_annotation(0), forged)))).returncode == 0:
            assert time.monotonic() < deadline, "the results policy never refused a namespace editor's result"
            kubectl("annotate", "mljob", "a", "-n", ns, f"{naming.result_annotation(0)}-", check=True)
            time.sleep(0.5)
        assert REFUSED in r.stderr, r.stderr
        # ... nor on a new job (pod names are predictable), nor through any other instance's key.
        made = as_editor("create", "-f", "-", input=json.dumps(_job("c", {naming.result_annotation(0): forged})))
        assert made.returncode != 0 and REFUSED in made.stderr, made.stdout + made.stderr
        other = as_editor("patch", "mljob", "a", "--type=merge", "-p", json.dumps(_annotate(naming.result_annotation(1), forged)))
        assert other.returncode != 0 and REFUSED in other.stderr, other.stderr
        # The editor's rights are otherwise intact: the refusal is the result key's, not RBAC's.
        assert as_editor("annotate", "mljob", "a", "note=ok").returncode == 0

        def client(pod: str) -> httpx.Client:
            token = kubectl("create", "token", accounts[pod], "-n", ns, "--duration=10m", "--bound-object-kind=Pod",
                            f"--bound-object-name={pod}", f"--bound-object-uid={uids[pod]}", check=True).stdout.strip()
            tls = ssl.create_default_context(cafile=str(cluster.layout.pki.ca_cert))
            return httpx.Client(base_url=cluster.layout.apiserver_url, verify=tls,
                                headers={"Authorization": f"Bearer {token}"}, timeout=10)

        def patch(c: httpx.Client, job: str, key: str, value: str) -> httpx.Response:
            return c.patch(f"/apis/{naming.API_VERSION}/namespaces/{ns}/mljobs/{job}", json=_annotate(key, value),
                           headers={"Content-Type": "application/merge-patch+json"})

        # Another job's pod: RBAC lets its account patch job a; the results policy does not.
        foreign = patch(client("b-g-0"), "a", naming.result_annotation(0), forged)
        assert foreign.status_code == 422 and REFUSED in foreign.text, foreign.text
        # Job a's own head may write its own result (and only its own instance's key).
        head = client("a-g-0")
        assert patch(head, "a", naming.result_annotation(1), "{}").status_code == 422
        genuine = base64.b64encode(cloudpickle.dumps({"success": True, "value": 42, "error": "", "traceback": ""})).decode()
        doc = StoredResult(pod="a-g-0", instance=0, success=True, data=genuine).model_dump_json(exclude_none=True)
        own = patch(head, "b", naming.result_annotation(0), doc)
        assert own.status_code == 422, own.text
        own = patch(head, "a", naming.result_annotation(0), doc)
        assert own.status_code == 200, own.text

        assert get_job(f"{ns}/a").result() == 42
        with pytest.raises(RuntimeError, match="kept no result"):
            get_job(f"{ns}/b").result()
        assert not marker.exists(), "a forged result was unpickled"
    finally:
        kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found")


# A return value of a few MB (a model's weights): over the MLJob's annotation, kept in the job's spec.output.
BIG = """\
import hashlib, os
def main():
    weights = os.urandom(3 << 20)
    return {"weights": weights, "sha": hashlib.sha256(weights).hexdigest()}
"""
JOB_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def endpoint() -> Any:
    from support.s3 import client, s3_server

    with s3_server("127.0.5.23") as url:  # the local nodes' pods share the host's network
        client(url).create_bucket(Bucket="results")
        yield url


def _big_job(kubectl: Any, namespace: str, pool: str, output: dict[str, Any] | None) -> str:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"big.py": BIG}}
    job = {"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND, "metadata": {"name": "big"},
           "spec": {"computePool": pool, "entrypoint": {"file": "big.py", "function": "main"},
                    "code": {"configMap": "big"}, **({"output": output} if output else {})}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all([cm, job]), check=True)
    return "big"


def _policy_was_in_force(kubectl: Any, namespace: str, name: str) -> None:
    """The results policy refuses even the cluster admin: the head's write above passed it, not around it."""
    r = kubectl("annotate", "mljob", name, "-n", namespace, f"{naming.result_annotation(0)}=forged", "--overwrite")
    assert r.returncode != 0 and REFUSED in r.stderr, r.stdout + r.stderr


def _check_big(value: Any) -> None:
    import hashlib

    assert isinstance(value, dict) and len(value["weights"]) == 3 << 20, type(value)
    assert hashlib.sha256(value["weights"]).hexdigest() == value["sha"]


def test_a_multi_mb_result_comes_back_through_s3_and_a_changed_object_is_refused(
        kubectl: Any, namespace: str, operator: Any, small_pool: Any, endpoint: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, results_policy: str) -> None:
    from support.operator_cluster import wait_phase
    from support.s3 import CREDENTIALS, client

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys",
              "labels": {naming.LABEL_CREDENTIALS: "true"}}, "stringData": CREDENTIALS}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(secret), check=True)
    prefix = f"s3://results/{namespace}"
    name = _big_job(kubectl, namespace, small_pool(max_nodes=1),
                    {"s3": {"uri": prefix, "endpointUrl": endpoint, "credentialsSecret": "s3-keys"}})
    st = wait_phase(kubectl, namespace, name, {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    for key, value in CREDENTIALS.items():  # the client's own credentials for the bucket
        monkeypatch.setenv(key, value)
    kept = StoredResult.model_validate_json(kubectl.json("get", "mljob", name, "-n", namespace)["metadata"]["annotations"][
        naming.result_annotation(0)])
    assert kept.data is None and kept.location == f"{prefix}/{name}/output/results/{st['instances'][0]['pod']}.pkl"
    _check_big(get_job(f"{namespace}/{name}").result())
    # Whoever can write the bucket cannot make result() unpickle their object: its digest is not the head's.
    marker = tmp_path / "forged-object-ran"
    bucket, _, key = (kept.location or "")[len("s3://"):].partition("/")
    forged = cloudpickle.dumps({"success": True, "value": Planted(str(marker)), "error": "", "traceback": ""})
    client(endpoint).put_object(Bucket=bucket, Key=key, Body=forged)
    with pytest.raises(RuntimeError, match="not the result the job's head kept"):
        get_job(f"{namespace}/{name}").result()
    assert not marker.exists(), "a changed result object was unpickled"
    _policy_was_in_force(kubectl, namespace, name)


def test_without_an_output_a_multi_mb_result_comes_back_through_the_operators_results_store(
        kubectl: Any, namespace: str, operator_kubeconfig: Path, small_pool: Any, endpoint: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, results_policy: str) -> None:
    """An operator with a results store (operator.settings.resultsStore): a job with no spec.output returns 3 MiB
    through it, written with the store's Secret of the job's namespace (not labelled as a job's credentials: the
    platform names it, no job does)."""
    from support.operator_cluster import Operator, wait_phase
    from support.s3 import CREDENTIALS

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "results-keys"}, "stringData": CREDENTIALS}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(secret), check=True)
    op = Operator(operator_kubeconfig, namespace, tmp_path / "operator.log",
                  env={"KUBEPOOL_OPERATOR_RESULTS_STORE": "s3://results/store",
                       "KUBEPOOL_OPERATOR_RESULTS_STORE_ENDPOINT_URL": endpoint,
                       "KUBEPOOL_OPERATOR_RESULTS_STORE_CREDENTIALS_SECRET": "results-keys"})
    op.start()
    try:
        name = _big_job(kubectl, namespace, small_pool(max_nodes=1), None)
        st = wait_phase(kubectl, namespace, name, {"DONE", "FAILED"}, JOB_TIMEOUT_S, op)
    finally:
        op.stop()
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    kept = StoredResult.model_validate_json(kubectl.json("get", "mljob", name, "-n", namespace)["metadata"]["annotations"][
        naming.result_annotation(0)])
    pod = st["instances"][0]["pod"]
    assert kept.location == f"s3://results/store/{namespace}/{name}/output/results/{pod}.pkl", kept
    for key, value in CREDENTIALS.items():  # the client's own credentials for the bucket
        monkeypatch.setenv(key, value)
    _check_big(get_job(f"{namespace}/{name}").result())
    _policy_was_in_force(kubectl, namespace, name)


def test_a_multi_mb_result_comes_back_through_a_pvc(kubectl: Any, namespace: str, operator: Any, small_pool: Any,
                                                    tmp_path: Path, results_policy: str) -> None:
    from support.operator_cluster import wait_phase

    (tmp_path / "pv" / "runs").mkdir(parents=True)  # the claim's subPath, writable by the pods' non-root user
    for d in (tmp_path / "pv", tmp_path / "pv" / "runs"):
        d.chmod(0o777)
    pv_name = f"pv-{namespace}"[:60]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                   "hostPath": {"path": str(tmp_path / "pv"), "type": "DirectoryOrCreate"}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "out"},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv_name,
                    "resources": {"requests": {"storage": "1Gi"}}}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(pv), check=True)
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(pvc), check=True)
        name = _big_job(kubectl, namespace, small_pool(max_nodes=1),
                        {"persistentVolumeClaim": {"claimName": "out", "subPath": "runs"}})
        st = wait_phase(kubectl, namespace, name, {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
        assert st["phase"] == "DONE", json.dumps(st, indent=1)
        pod = st["instances"][0]["pod"]
        assert (tmp_path / "pv" / "runs" / name / "output" / "results" / f"{pod}.pkl").stat().st_size > 3 << 20
        _check_big(get_job(f"{namespace}/{name}").result())
        readers = kubectl.json("get", "pods", "-n", namespace, "-l", f"{READER_LABEL}={name}")["items"]
        assert all(p["metadata"].get("deletionTimestamp") for p in readers), "the claim's reader pod was left behind"
        _policy_was_in_force(kubectl, namespace, name)
    finally:
        kubectl("delete", "pv", pv_name, "--wait=false")
