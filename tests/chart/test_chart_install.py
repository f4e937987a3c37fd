"""The chart on the local cluster: `helm install`, the operator pod really runs `python -m kubepool.controller`
under the chart's ServiceAccount (the local nodes run pods as processes), an example job ends DONE with only
the chart's RBAC, and `helm uninstall` leaves the CRDs and users' MLJobs in place.

One release per module (a unique name: ClusterRoles are cluster-wide); it handles only its own namespace, so
other tests' jobs are not its business.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from botocore.exceptions import BotoCoreError, ClientError
from chartlib import CHART, CLUSTER_SCOPED, EVERYWHERE, EXAMPLES, OPERATOR_RIGHTS, rights_of, run_helm

from kubepool import naming
from support.operator_cluster import wait_for
from support.sagemaker_api import SageMakerApi, free_port, make_key

pytestmark = pytest.mark.cluster

OPERATOR_READY_TIMEOUT_S = 180
JOB_TIMEOUT_S = 420


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str  # where the operator runs
    jobs_namespace: str  # the only namespace it watches
    pool: str
    helm: tuple[str, ...]  # helm with --kubeconfig
    sagemaker_api_port: int = 0  # the SageMaker API server's (on the host's network, as every local pod)

    @property
    def service_account(self) -> str:
        return f"{self.name}-kubepool"


def _operator_log(kubectl: Any, rel: Release) -> str:
    return kubectl("logs", "-n", rel.namespace, f"deployment/{rel.service_account}", "--tail=-1").stdout


def _operator_pod(kubectl: Any, rel: Release) -> dict[str, Any] | None:
    pods = kubectl.json("get", "pods", "-n", rel.namespace, "-l",
                        f"app.kubernetes.io/instance={rel.name},app.kubernetes.io/component=operator")["items"]
    return pods[0] if pods else None


def _diagnostics(kubectl: Any, rel: Release) -> str:
    out = []
    for args in (["get", "pods", "-n", rel.namespace, "-o", "wide"], ["get", "mljobs,pods", "-n", rel.jobs_namespace, "-o", "wide"],
                 ["get", "mljobs", "-n", rel.jobs_namespace, "-o", "jsonpath={.items[*].status}"],
                 ["logs", "-n", rel.namespace, f"deployment/{rel.service_account}", "--tail=60"]):
        proc = kubectl(*args)
        out.append(f"$ kubectl {' '.join(args)}\n{proc.stdout}{proc.stderr}")
    return "\n".join(out)


@pytest.fixture(scope="module")
def release(cluster: Any, kubectl: Any, helm: str) -> Iterator[Release]:
    suffix = uuid.uuid4().hex[:6]
    rel = Release(name=f"kp-{suffix}", namespace=f"kp-system-{suffix}", jobs_namespace=f"kp-jobs-{suffix}",
                  pool=f"e2e-cpu-{suffix}", helm=(helm, "--kubeconfig", str(cluster.kubeconfig)),
                  sagemaker_api_port=free_port("127.0.0.1"))
    kubectl("create", "namespace", rel.jobs_namespace, check=True)
    values = {
        "image": {"tag": "dev", "pullPolicy": "Never"},
        # Local pods share the host's network, where 8080 is taken (Ray's metrics port, other operators).
        "metrics": {"enabled": False},
        "sagemakerApi": {"port": rel.sagemaker_api_port},
        # Kubernetes objects from values reach the pod: the scheduler must honour this affinity and toleration
        # (only the tainted GPU nodes match), and the container gets the extra env.
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubepool.dev/node-pool", "operator": "In", "values": ["gpu"]}]}]}}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "extraEnv": [{"name": "KUBEPOOL_CHART_TEST_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "operator": {"watchNamespaces": [rel.jobs_namespace], "listenOnPodIP": True, "logFormat": "json", "settings": {
            # Local nodes share the host's network: each instance shifts its Ray ports (OperatorConfig).
            "rayPortStride": 3000, "workerGraceSeconds": 5, "podTerminationGraceSeconds": 3,
        }},
        # Small instances: the local nodes are shared with every other cluster test.
        "pools": [{"name": rel.pool, "spec": {"resources": {"cpu": "1", "memory": "2Gi"}, "minNodes": 0, "maxNodes": 3,
                                              "nodeSelector": {"kubepool.dev/node-pool": "cpu"}}}],
    }
    values_file = cluster.state_dir / f"{rel.name}-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    proc = run_helm(*rel.helm, "install", rel.name, str(CHART), "--namespace", rel.namespace, "--create-namespace",
                    "--values", str(values_file), timeout=180)
    assert proc.returncode == 0, proc.stderr
    try:
        yield rel
    finally:
        run_helm(*rel.helm, "uninstall", rel.name, "--namespace", rel.namespace, "--wait", timeout=180)
        kubectl("delete", "namespace", rel.jobs_namespace, rel.namespace, "--wait=false")
        values_file.unlink(missing_ok=True)


def test_notes_give_next_steps(release: Release) -> None:
    proc = run_helm(*release.helm, "get", "notes", release.name, "--namespace", release.namespace)
    assert proc.returncode == 0, proc.stderr
    assert "kubectl get mljobs" in proc.stdout and "kubectl apply --server-side" in proc.stdout


def test_operator_pod_runs_the_controller_under_the_charts_account(kubectl: Any, release: Release) -> None:
    deadline = time.monotonic() + OPERATOR_READY_TIMEOUT_S
    while True:
        pod = _operator_pod(kubectl, release)
        status = (pod or {}).get("status", {})
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
        if ready:
            break
        assert time.monotonic() < deadline, f"operator pod not Ready:\n{_diagnostics(kubectl, release)}"
        time.sleep(2)
    assert pod is not None
    assert pod["spec"]["serviceAccountName"] == release.service_account
    assert pod["spec"]["containers"][0]["command"] == ["python", "-m", "kubepool.controller"]
    node = pod["spec"]["nodeName"]
    assert kubectl.json("get", "node", node)["metadata"]["labels"]["kubepool.dev/node-pool"] == "gpu", node
    # logFormat json: every line of the operator's log is one JSON object (what log collectors parse).
    lines = [ln for ln in _operator_log(kubectl, release).splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]
    assert any("kubepool operator configured" in r.get("message", "") for r in records), lines[:5]
    # The operator in the pod reached the API server from inside the pod with the ServiceAccount's token and
    # handled the chart's pool (its status is only ever written by an operator).
    deadline = time.monotonic() + 60
    while not kubectl.json("get", "computepool", release.pool).get("status", {}).get("phase"):
        assert time.monotonic() < deadline, f"the operator never handled {release.pool}:\n{_diagnostics(kubectl, release)}"
        time.sleep(2)


def test_the_charts_sagemaker_api_answers_boto3_with_its_rights(kubectl: Any, release: Release) -> None:
    """The chart's SageMaker API server, in its pod under its own account: it reads the access key in its own
    (the release's) namespace, the one Secret its Role names, and acts as the key's ServiceAccount in the watched namespace it is bound to (a job
    it cannot find is ResourceNotFound, not AccessDenied: the key's account may read MLJobs there); a key Secret
    put in the tenant's namespace is unknown to it."""
    keys_secret = f"{release.service_account}-sagemaker-api-keys"  # the chart's: <fullname>-sagemaker-api-keys
    key = make_key(kubectl, release.jobs_namespace, keys_namespace=release.namespace, keys_secret_=keys_secret)
    outside = make_key(kubectl, release.jobs_namespace, keys_namespace=release.jobs_namespace, keys_secret_=keys_secret)
    api = SageMakerApi(f"http://127.0.0.1:{release.sagemaker_api_port}", Path("/dev/null"))
    sm = api.client("sagemaker", key)

    def answers() -> str | None:
        try:
            sm.describe_training_job(TrainingJobName="nope")
        except ClientError as err:
            return str(err.response["Error"]["Code"])
        except BotoCoreError:  # not listening yet
            return None
        return "found"
    code = wait_for(answers, OPERATOR_READY_TIMEOUT_S, f"the SageMaker API server:\n{_diagnostics(kubectl, release)}")
    assert code == "ResourceNotFound"
    with pytest.raises(ClientError) as e:
        api.client("sagemaker", outside).list_training_jobs()
    assert e.value.response["Error"]["Code"] == "UnrecognizedClientException"


@pytest.mark.exclusive  # warm capacity: every running operator would make the pool's placeholder
def test_the_charts_operator_keeps_warm_nodes(kubectl: Any, release: Release) -> None:
    """ComputePool minNodes under the chart's RBAC: the PriorityClass (create only) and a placeholder pod in the
    first watched namespace (the release's own is not watched here), gone again with minNodes 0."""
    def placeholders() -> list[dict[str, Any]]:
        sel = f"kubepool.dev/pool={release.pool},kubepool.dev/role=placeholder"
        items = kubectl.json("get", "pods", "-n", release.jobs_namespace, "-l", sel)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    # The operator must create the PriorityClass itself (RBAC: create only); any operator that needs it later
    # creates it again.
    kubectl("delete", "priorityclass", "kubepool-placeholder", "--ignore-not-found", check=True)
    kubectl("patch", "computepool", release.pool, "--type=merge", "-p", '{"spec": {"minNodes": 1}}', check=True)
    try:
        deadline = time.monotonic() + 90
        while not (kubectl.json("get", "computepool", release.pool).get("status", {}).get("warmInstances") == 1
                   and [p for p in placeholders() if p["status"].get("phase") == "Running"]):
            assert time.monotonic() < deadline, f"no warm placeholder:\n{_diagnostics(kubectl, release)}"
            time.sleep(2)
        [pod] = placeholders()
        assert pod["spec"]["priorityClassName"] == "kubepool-placeholder" and pod["spec"]["priority"] < 0
        assert kubectl.json("get", "priorityclass", "kubepool-placeholder")["value"] == pod["spec"]["priority"]
    finally:
        kubectl("patch", "computepool", release.pool, "--type=merge", "-p", '{"spec": {"minNodes": 0}}', check=True)
    deadline = time.monotonic() + 60
    while placeholders():
        assert time.monotonic() < deadline, f"placeholder not removed:\n{_diagnostics(kubectl, release)}"
        time.sleep(2)


@pytest.mark.parametrize(("verb", "resource", "allowed"), [
    ("list", "secrets", False), ("watch", "secrets", False), ("create", "secrets", True),
    ("create", "pods", True), ("patch", "mljobs.kubepool.dev", True), ("create", "mljobs.kubepool.dev", False),
    ("delete", "deployments.apps", False),
])
def test_the_operator_account_has_least_privilege(kubectl: Any, release: Release, verb: str, resource: str, allowed: bool) -> None:
    sa = f"system:serviceaccount:{release.namespace}:{release.service_account}"
    proc = kubectl("auth", "can-i", verb, resource, "-n", release.jobs_namespace, "--as", sa)
    assert proc.stdout.strip() == ("yes" if allowed else "no"), proc.stdout + proc.stderr


def test_the_operator_is_no_privilege_escalation_path(kubectl: Any, release: Release) -> None:
    """Submitting an MLJob is as guarded as creating a pod: a ServiceAccount without a Role in the namespace
    can create neither; the chart's editor role (aggregated into `edit`, which already creates pods) can."""
    sa = "no-rights"
    kubectl("create", "serviceaccount", sa, "-n", release.jobs_namespace, check=True)
    who = f"system:serviceaccount:{release.jobs_namespace}:{sa}"
    job = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "sneaky"},
           "spec": {"computePool": release.pool, "entrypoint": {"command": ["python", "-c", "print(1)"]}}}
    proc = kubectl("create", "-n", release.jobs_namespace, "--as", who, "-f", "-", input=json.dumps(job))
    assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stdout + proc.stderr
    for resource in ("mljobs.kubepool.dev", "pods"):
        assert kubectl("auth", "can-i", "create", resource, "-n", release.jobs_namespace, "--as", who).stdout.strip() == "no"
    kubectl("create", "rolebinding", f"{sa}-edit", "--clusterrole=edit", f"--serviceaccount={release.jobs_namespace}:{sa}",
            "-n", release.jobs_namespace, check=True)
    assert kubectl("auth", "can-i", "create", "mljobs.kubepool.dev", "-n", release.jobs_namespace, "--as", who).stdout.strip() == "yes"
    assert kubectl("auth", "can-i", "create", "pods", "-n", release.jobs_namespace, "--as", who).stdout.strip() == "yes"
    assert kubectl("get", "mljob", "sneaky", "-n", release.jobs_namespace).returncode != 0


def test_a_watched_namespace_install_holds_no_namespaced_right_elsewhere(kubectl: Any, release: Release) -> None:
    """The release lists the namespaces it watches, so its pods, Secrets, ... rights are Roles there (under which
    the example job below runs to DONE); a SelfSubjectRulesReview made as its account finds none of them in a
    namespace it does not watch, Events excepted."""
    sa = f"system:serviceaccount:{release.namespace}:{release.service_account}"
    assert rights_of(kubectl, sa, release.jobs_namespace) == OPERATOR_RIGHTS
    assert rights_of(kubectl, sa, "default") == {k: v for k, v in OPERATOR_RIGHTS.items() if k in CLUSTER_SCOPED} | EVERYWHERE


def test_the_installed_policy_keeps_a_job_within_its_authors_rights(kubectl: Any, release: Release) -> None:
    """The chart's defaults ship the admission policy (templates/admission-policy.yaml, every namespace): alice,
    who may only create and read MLJobs (the chart's editor role), may not have the operator mount a Secret she
    cannot read (tests/chart/test_admission_policy.py attacks every reference)."""
    ns, who = release.jobs_namespace, "alice"
    kubectl("create", "rolebinding", "alice-mljobs", f"--clusterrole={release.service_account}-mljob-editor", f"--user={who}",
            "-n", ns, check=True)
    job = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "exfiltrate"},
           "spec": {"computePool": release.pool, "entrypoint": {"command": ["true"]},
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}}
    want = f"spec.env[TOKEN].valueFrom.secretKeyRef names secrets db, which {who} may not get in namespace {ns}"
    deadline = time.monotonic() + 60  # a new policy takes a moment to be in force
    while want not in (proc := kubectl("create", "--dry-run=server", "-n", ns, "--as", who, "-f", "-", input=json.dumps(job))).stderr:
        assert time.monotonic() < deadline, f"alice's job was not refused: {proc.stdout}{proc.stderr}"
        time.sleep(1)
    assert proc.returncode != 0


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*-job.yaml")), ids=lambda p: p.name)
def test_examples_pass_the_api_servers_validation(kubectl: Any, release: Release, example: Any) -> None:
    """Server-side dry run: the CEL rules of the CRDs run too, which the offline tests cannot do."""
    proc = kubectl("apply", "--dry-run=server", "-n", release.jobs_namespace, "-f", str(example))
    assert proc.returncode == 0, proc.stderr


def _runtime_account_patches_only_its_own_job(kubectl: Any, cluster: Any, release: Release) -> None:
    """The namespace's shared runtime account (RBAC: patch any MLJob of the namespace) under the chart's
    ValidatingAdmissionPolicy: a token bound to a pod of job ray-tasks may patch ray-tasks, not another job."""
    ns = release.jobs_namespace
    other = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "other"},
             "spec": {"computePool": "no-such-pool", "entrypoint": {"command": ["true"]}}}
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(other), check=True)
    head = kubectl.json("get", "pods", "-n", ns, "-l", "kubepool.dev/job=ray-tasks,kubepool.dev/role=head")["items"][0]
    token = kubectl("create", "token", naming.RUNTIME_ACCOUNT, "-n", ns, "--duration=10m", "--bound-object-kind=Pod",
                    f"--bound-object-name={head['metadata']['name']}", f"--bound-object-uid={head['metadata']['uid']}",
                    check=True).stdout.strip()
    client = httpx.Client(base_url=cluster.layout.apiserver_url, verify=str(cluster.layout.pki.ca_cert),
                          headers={"Authorization": f"Bearer {token}"}, timeout=10)

    def patch(job: str) -> httpx.Response:
        return client.patch(f"/apis/kubepool.dev/v1alpha1/namespaces/{ns}/mljobs/{job}", params={"dryRun": "All"},
                            json={"metadata": {"labels": {"touched": "yes"}}},
                            headers={"Content-Type": "application/merge-patch+json"})

    own, foreign = patch("ray-tasks"), patch("other")
    assert own.status_code == 200, own.text
    assert foreign.status_code == 422 and "only the MLJob of its own pod" in foreign.text, foreign.text  # Invalid
    kubectl("delete", "mljob", "other", "-n", ns, "--wait=false")


def test_helm_test_runs_a_job_to_done(kubectl: Any, release: Release) -> None:
    """`helm test`: the hook pod submits a 1-instance job to the chart's pool with the kubepool CLI under its own
    account (submit and follow only) and passes only when the job ends DONE (`submit --wait`'s exit code); the
    job and every hook object are gone afterwards."""
    proc = run_helm(*release.helm, "test", release.name, "--namespace", release.namespace, "--timeout", "6m", timeout=420)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{_diagnostics(kubectl, release)}"
    assert "Phase:          Succeeded" in proc.stdout, proc.stdout
    job = f"{release.name}-kubepool-test"
    # The operator ran it: its Events outlive the job, which the hook deleted.
    events = kubectl.json("get", "events", "-n", release.jobs_namespace, "--field-selector", f"involvedObject.name={job}")
    assert "Completed" in {e["reason"] for e in events["items"]}, [e["reason"] for e in events["items"]]
    for ns, kinds in ((release.jobs_namespace, "mljobs,roles,rolebindings"),
                      (release.namespace, "pods,serviceaccounts,configmaps")):
        leftovers = kubectl("get", kinds, "-n", ns, "-o", "name").stdout
        assert job not in leftovers, leftovers


def test_example_job_ends_done_and_survives_uninstall(kubectl: Any, cluster: Any, release: Release) -> None:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "ray-tasks-job.yaml").read_text()) if d]
    for d in docs:
        if d["kind"] == "MLJob":
            d["spec"]["computePool"] = release.pool
    kubectl("apply", "-n", release.jobs_namespace, "-f", "-", input=yaml.safe_dump_all(docs), check=True)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    phase = None
    while phase not in ("DONE", "FAILED", "CANCELLED"):
        assert time.monotonic() < deadline, f"job not finished ({phase}):\n{_diagnostics(kubectl, release)}"
        time.sleep(3)
        phase = kubectl.json("get", "mljob", "ray-tasks", "-n", release.jobs_namespace).get("status", {}).get("phase")
    assert phase == "DONE", _diagnostics(kubectl, release)
    logs = kubectl("logs", "-n", release.jobs_namespace, "-l", "kubepool.dev/job=ray-tasks,kubepool.dev/role=head", "--tail=-1")
    assert "score: pi~3.1" in logs.stdout, logs.stdout + logs.stderr
    # Only the chart's operator watches jobs_namespace, so DONE above was its work, under the chart's RBAC,
    # which is exactly what the code uses (test_operator_rights): nothing it tried was refused. A refusal kopf
    # retried (attempt 1-8 of 9, "will retry") is the API server's authorizer not yet seeing the chart's fresh
    # bindings at the pod's start on a loaded machine; a missing right is refused to the last attempt.
    refused = [line for line in _operator_log(kubectl, release).splitlines() if "forbidden" in line.lower()
               and not re.search(r"Request attempt #[1-8]/9 failed; will retry", line)]
    assert not refused, refused[:5]
    _runtime_account_patches_only_its_own_job(kubectl, cluster, release)

    proc = run_helm(*release.helm, "uninstall", release.name, "--namespace", release.namespace, "--wait", timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert _operator_pod(kubectl, release) is None or kubectl(
        "wait", "--for=delete", "pod", "-n", release.namespace, "-l", f"app.kubernetes.io/instance={release.name}", "--timeout=60s"
    ).returncode == 0
    job = kubectl.json("get", "mljob", "ray-tasks", "-n", release.jobs_namespace)
    assert job["status"]["phase"] == "DONE"
    assert not job["metadata"].get("finalizers"), "without an operator, nothing would ever remove them"
    crds = json.loads(kubectl("get", "crd", "-o", "json", check=True).stdout)["items"]
    assert {"mljobs.kubepool.dev", "computepools.kubepool.dev"} <= {c["metadata"]["name"] for c in crds}
