"""Outputs are kept (spec.output) on the local cluster with a real S3-compatible server: a 2-group SageMaker
job submitted with the SageMaker SDK (`Estimator(output_path=...)`) whose model only the second group saves
leaves model.tar.gz and output.tar.gz in SageMaker's layout, each with every host's files as SageMaker
aggregates them, each host's own under its host, and `estimator.model_data` names the model;
a payload that writes /opt/ml/output/failure FAILS with those words, as on SageMaker."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import naming
from kubepool.runtime import ownership
from kubepool.sagemaker import Estimator, InstanceGroup
from support.operator_cluster import GATE_S, JOB_WAIT_S, Operator, get_json, mljob, wait_for, wait_phase
from support.s3 import CREDENTIALS, client, s3_server

pytestmark = [pytest.mark.cluster]
JOB_TIMEOUT_S = JOB_WAIT_S
TRAIN = """\
import json, os
host = os.environ["SM_CURRENT_HOST"]
model, data = os.environ["SM_MODEL_DIR"], os.environ["SM_OUTPUT_DATA_DIR"]
if os.environ["SM_CURRENT_INSTANCE_GROUP"] == "trainer":  # only the second group saves the model
    with open(os.path.join(model, "model.pt"), "w") as f:
        json.dump({"trained_by": host, "epochs": int(os.environ["SM_HP_EPOCHS"])}, f)
with open(os.path.join(data, f"metrics-{host}.csv"), "w") as f:
    f.write("loss,0.1\\n")
print("wrote outputs on", host, flush=True)
"""
FAIL = """\
import os
with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w") as f:
    f.write("label column 'y' is missing from train.csv")
raise SystemExit(3)
"""


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with s3_server("127.0.5.22") as url:  # the local nodes' pods share the host's network
        client(url).create_bucket(Bucket="models")
        yield url


def _credentials(kubectl: Any, namespace: str) -> str:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys",
              "labels": {naming.LABEL_CREDENTIALS: "true"}}, "stringData": CREDENTIALS}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(secret), check=True)
    return "s3-keys"


def _members(blob: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_estimator_outputs_are_kept_in_sagemakers_layout(kubectl: Any, namespace: str, operator: Operator,
                                                         compute_pool: Any, endpoint: str, tmp_path: Path) -> None:
    pool = compute_pool("cpu", max_nodes=2)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    groups = [InstanceGroup("reader", pool, 1), InstanceGroup("trainer", pool, 1)]
    est = Estimator(str(script), instance_groups=groups, hyperparameters={"epochs": 3},
                    namespace=namespace, output_path="s3://models/runs", s3_endpoint_url=endpoint,
                    s3_credentials_secret=_credentials(kubectl, namespace), max_run=240)
    job = est.fit(wait=False)
    st = wait_phase(kubectl, namespace, job.name, {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    base = f"runs/{job.name}/output"
    assert est.model_data == f"s3://models/{base}/model.tar.gz" == st["outputs"]["modelArtifacts"]
    s3 = client(endpoint)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="models", Prefix=f"runs/{job.name}/")["Contents"])
    # SageMaker's layout under output/, and beside it kubepool's claim of the prefix for this job (runtime/ownership.py).
    assert keys == [f"runs/{job.name}/{ownership.MARKER}", f"{base}/algo-1/output.tar.gz", f"{base}/algo-2/model.tar.gz",
                    f"{base}/algo-2/output.tar.gz", f"{base}/model.tar.gz", f"{base}/output.tar.gz"]
    model = _members(s3.get_object(Bucket="models", Key=f"{base}/model.tar.gz")["Body"].read())
    assert json.loads(model["model.pt"]) == {"trained_by": "algo-2", "epochs": 3}
    assert _members(s3.get_object(Bucket="models", Key=f"{base}/output.tar.gz")["Body"].read()) == {
        "metrics-algo-1.csv": b"loss,0.1\n", "metrics-algo-2.csv": b"loss,0.1\n"}
    assert _members(s3.get_object(Bucket="models", Key=f"{base}/algo-2/output.tar.gz")["Body"].read()) == {
        "metrics-algo-2.csv": b"loss,0.1\n"}


def test_the_payloads_failure_file_is_the_jobs_message(kubectl: Any, namespace: str, operator: Operator,
                                                       compute_pool: Any, tmp_path: Path) -> None:
    pool = compute_pool("cpu", max_nodes=1)
    script = tmp_path / "fail.py"
    script.write_text(FAIL)
    job = Estimator(str(script), instance_type=pool, instance_count=1, namespace=namespace, max_run=240).fit(wait=False)
    st = wait_phase(kubectl, namespace, job.name, {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "FAILED" and st["message"] == "label column 'y' is missing from train.csv", json.dumps(st, indent=1)


RESUME = """\
import pathlib, sys
state = pathlib.Path("/opt/ml/checkpoints/epoch.txt")
epoch = int(state.read_text()) if state.exists() else 0
print("resuming from epoch", epoch, flush=True)
if epoch == 0:
    state.write_text("5")  # checkpointed, then the attempt dies
    sys.exit(1)
print("finished from epoch", epoch, flush=True)
"""


def test_a_retry_resumes_from_its_checkpoint(kubectl: Any, namespace: str, operator: Operator, compute_pool: Any,
                                             endpoint: str) -> None:
    pool = compute_pool("cpu", max_nodes=1)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": {"resume.py": RESUME}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)
    job = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "resume"}, "spec": {
        "computePool": pool, "mode": "sagemaker", "entrypoint": {"file": "resume.py"}, "code": {"configMap": "payload"},
        "backoffLimit": 1, "checkpoint": {"s3": {"uri": f"s3://models/ckpt/{namespace}", "endpointUrl": endpoint,
                                                  "credentialsSecret": _credentials(kubectl, namespace)}}}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job), check=True)
    st = wait_phase(kubectl, namespace, "resume", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert (st["phase"], st["attempt"]) == ("DONE", 1), json.dumps(st, indent=1)
    pods = [p["metadata"]["name"] for p in kubectl.json("get", "pods", "-n", namespace, "-l", f"{naming.LABEL_JOB}=resume")["items"]]
    retry = naming.pod_name("resume", naming.DEFAULT_GROUP, 0, 1)  # instance 0 of attempt 1
    assert retry in pods, pods
    log = kubectl("logs", "-n", namespace, retry, "--tail=-1").stdout
    assert "resuming from epoch 5" in log and "finished from epoch 5" in log, log[-3000:]
    body = client(endpoint).get_object(Bucket="models", Key=f"ckpt/{namespace}/epoch.txt")["Body"].read()
    assert body == b"5"


def _claim(kubectl: Any, namespace: str, name: str, mode: str) -> None:
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
           "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "none"}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(pvc), check=True)


def test_an_ordinary_read_write_once_output_claim_of_two_instances_is_refused_naming_the_mode(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, apply: Any) -> None:
    """Every instance writes the output claim from its own node: a ReadWriteOnce claim fails the job before any
    pod exists, saying it needs ReadWriteMany; a ReadWriteMany one is admitted."""
    pool = compute_pool("cpu", max_nodes=2)
    _claim(kubectl, namespace, "rwo", "ReadWriteOnce")
    _claim(kubectl, namespace, "rwx", "ReadWriteMany")
    common = {"computePool": pool, "targetInstances": 2, "entrypoint": {"command": ["true"]}, "mode": "sagemaker"}
    apply(mljob("out-rwo", output={"persistentVolumeClaim": {"claimName": "rwo"}}, **common))
    apply(mljob("out-rwx", output={"persistentVolumeClaim": {"claimName": "rwx"}}, **common))
    st = wait_phase(kubectl, namespace, "out-rwo", {"DONE", "FAILED"}, 60, operator)
    assert (st["phase"], st["reason"]) == ("FAILED", "VolumeNotShared"), json.dumps(st, indent=1)
    assert "PersistentVolumeClaim rwo is ReadWriteOnce" in st["message"] and "[ReadWriteMany]" in st["message"]
    assert not json.loads(kubectl("get", "pods", "-n", namespace, "-l", f"{naming.LABEL_JOB}=out-rwo", "-o", "json",
                                  check=True).stdout)["items"]
    admitted = wait_for(lambda: (get_json(kubectl, namespace, "mljob", "out-rwx").get("status") or {}).get("admittedAt"),
                        60, "MLJob out-rwx admitted")
    assert admitted


SLOW_WORKER_MB = 64  # random bytes: the worker's archive, upload and aggregate take seconds after the head's end
SLOW_WORKER = f"""\
import os, pathlib, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address="auto")
head = ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=0.1)
def save():
    d = pathlib.Path(os.environ.get("KUBEPOOL_BASE_DIR", "/opt/ml")) / "model"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "weights.bin", "wb") as f:
        for _ in range({SLOW_WORKER_MB}):
            f.write(os.urandom(1 << 20))


worker = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)
ray.get(save.options(scheduling_strategy=NodeAffinitySchedulingStrategy(worker, soft=False)).remote())
"""


@pytest.mark.ray
def test_head_mode_done_waits_for_a_worker_still_keeping_its_outputs(cluster: Any, crds: None, kubectl: Any,
                                                                      namespace: str, compute_pool: Any, apply: Any,
                                                                      endpoint: str, tmp_path: Path) -> None:
    """#39 §3: the head's payload has a worker save a model (Ray task on the worker's node); the worker keeps it
    only after the head let it go. DONE comes once the worker's pod ended, not with the head's, so the job's
    model.tar.gz read at DONE has the worker's file, and the worker was not deleted under its upload (a grace
    long enough for the upload: the wait's bound is the unit tests' matter, test_operator_head_workers)."""
    op = Operator(cluster.kubeconfig, namespace, tmp_path / "operator.log",
                  env={"KUBEPOOL_OPERATOR_WORKER_GRACE_SECONDS": "90"})
    op.start()
    try:
        pool = compute_pool("cpu", max_nodes=2)
        apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": {"slow.py": SLOW_WORKER}})
        apply(mljob("slow", computePool=pool, targetInstances=2, entrypoint={"file": "slow.py"},
                    code={"configMap": "payload"}, instancesTimeoutSeconds=GATE_S,
                    output={"s3": {"uri": f"s3://models/{namespace}", "endpointUrl": endpoint,
                                   "credentialsSecret": _credentials(kubectl, namespace)}}))
        st = wait_phase(kubectl, namespace, "slow", {"DONE", "FAILED"}, JOB_TIMEOUT_S, op)
        assert (st["phase"], st["reason"]) == ("DONE", "Completed"), json.dumps(st, indent=1)
        worker = get_json(kubectl, namespace, "pod", naming.pod_name("slow", naming.DEFAULT_GROUP, 1, 0))
        model = client(endpoint).get_object(Bucket="models", Key=f"{namespace}/slow/output/model.tar.gz")["Body"].read()
        assert worker["status"]["phase"] == "Succeeded" and not worker["metadata"].get("deletionTimestamp"), worker["status"]
        assert len(_members(model).get("weights.bin", b"")) == SLOW_WORKER_MB << 20, sorted(_members(model))
    finally:
        op.stop()
