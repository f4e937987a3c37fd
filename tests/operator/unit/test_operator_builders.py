"""Builders: pods, Service, the job's Secret, RBAC and NetworkPolicy of a job (pure)."""

from __future__ import annotations

import base64

import pytest

from kubepool import contract, naming
from kubepool.controller.builders import (
    JobRef,
    build_endpoint_slice,
    build_headless_service,
    build_instance_pods,
    build_job_contract,
    build_job_secret,
    build_namespace_runtime_rbac,
    build_network_policy,
    build_runtime_rbac,
    contract_patch,
)
from kubepool.controller.builders.common import local_port_shift
from kubepool.controller.config import OperatorConfig, RuntimeAccountPolicy
from kubepool.controller.observed import PodView
from support.factories import gpu_pool, job, pool

CFG = OperatorConfig(default_image="img:1")
NODE_LOST = [{"key": t, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
             for t in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
POOLS = {"cpu": pool(), "gpu": gpu_pool()}
GROUPS = [{"name": "instance_group_1", "computePool": "cpu", "instanceCount": 2},
          {"name": "gpu_group", "computePool": "gpu", "instanceCount": 1}]


def _env(pod: dict) -> dict[str, dict]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(("spec", "names", "roles"), [
    ({"targetInstances": 3}, ["train-homogeneouscluster-0", "train-homogeneouscluster-1", "train-homogeneouscluster-2"],
     ["head", "worker", "worker"]),
    ({}, ["train-homogeneouscluster-0"], ["head"]),
    ({"instanceGroups": GROUPS}, ["train-instance-group-1-0", "train-instance-group-1-1", "train-gpu-group-0"],
     ["head", "worker", "worker"]),
], ids=["three-instances", "default-one", "two-groups"])
def test_pod_names_and_roles(spec: dict, names: list[str], roles: list[str]) -> None:
    j = job(**spec)
    pods = build_instance_pods(j, POOLS, granted=j.spec.resolved_target(), attempt=0, cfg=CFG)
    assert [p["metadata"]["name"] for p in pods] == names
    assert [p["metadata"]["labels"][naming.LABEL_ROLE] for p in pods] == roles
    assert [p["spec"]["hostname"] for p in pods] == [f"algo-{i + 1}" for i in range(len(names))]


def test_pod_shape_cpu() -> None:
    p = build_instance_pods(job(targetInstances=2), POOLS, granted=2, attempt=0, cfg=CFG)[1]
    spec, c = p["spec"], p["spec"]["containers"][0]
    assert p["metadata"]["ownerReferences"][0] == {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob",
                                                   "name": "train", "uid": "uid-train", "controller": True,
                                                   "blockOwnerDeletion": False}
    labels = p["metadata"]["labels"]
    assert labels[naming.LABEL_JOB] == "train" and labels[naming.LABEL_JOB_UID] == "uid-train"
    assert labels[naming.LABEL_INSTANCE] == "1" and labels[naming.LABEL_POOL] == "cpu"
    assert c["resources"] == {"requests": {"cpu": "3", "memory": "13Gi"}, "limits": {"cpu": "3", "memory": "13Gi"}}
    assert c["command"] == ["python", "-m", "kubepool.runtime"] and c["image"] == "img:1"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert spec["restartPolicy"] == "Never" and spec["subdomain"] == "train-svc"
    assert spec["dnsConfig"] == {"searches": ["train-svc.ns.svc.cluster.local"]}
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti == {"labelSelector": {"matchLabels": {naming.LABEL_POOL: "cpu"}}, "namespaceSelector": {},
                    "topologyKey": "kubernetes.io/hostname"}
    assert "nodeSelector" not in spec
    assert spec["tolerations"] == NODE_LOST  # a lost node's instances are evicted after node_lost_seconds
    env = _env(p)
    assert env[contract.ENV_INSTANCE_ID]["value"] == "1"
    assert env[contract.ENV_POD_IP]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env[contract.ENV_RAY_AUTH_TOKEN]["valueFrom"]["secretKeyRef"] == {"name": "train-contract", "key": "token"}
    contract_volume = next(v for v in spec["volumes"] if v["name"] == "contract")
    # the contract's key alone is a file; the token is not (it is the runtime's variable)
    assert contract_volume["secret"] == {"secretName": "train-contract",
                                         "items": [{"key": contract.CONTRACT_FILENAME, "path": contract.CONTRACT_FILENAME}]}
    assert spec["serviceAccountName"] == naming.RUNTIME_ACCOUNT and spec["automountServiceAccountToken"] is True


def test_pod_shape_gpu_group() -> None:
    p = build_instance_pods(job(instanceGroups=GROUPS), POOLS, granted=3, attempt=0, cfg=CFG)[2]
    c = p["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"cpu": "6", "memory": "27Gi", "nvidia.com/gpu": "1"}
    assert p["spec"]["nodeSelector"] == {"kubepool.dev/node-pool": "gpu"}
    assert p["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, *NODE_LOST]
    assert p["metadata"]["labels"][naming.LABEL_GROUP] == "gpu-group"


def test_image_by_job_then_pool_then_the_pools_hardware() -> None:
    """A GPU pool's instances get the operator's GPU image (CPU torch cannot use its devices), a pool may name its
    own, a job's spec.image wins over both; warm placeholders pull what the pool's instances will run."""
    from kubepool.controller.builders.placeholders import build_placeholder_pod

    cfg = OperatorConfig(default_image="img:1", gpu_image="img:1-cuda")

    def images(j: object, pools: dict) -> list[str]:
        return [p["spec"]["containers"][0]["image"] for p in build_instance_pods(j, pools, granted=3, attempt=0, cfg=cfg)]  # type: ignore[arg-type]

    assert images(job(instanceGroups=GROUPS), POOLS) == ["img:1", "img:1", "img:1-cuda"]
    own = {"cpu": pool(image="team/cpu:7"), "gpu": pool("gpu", "GPU_NV_S", 2, image="team/gpu:7")}
    assert images(job(instanceGroups=GROUPS), own) == ["team/cpu:7", "team/cpu:7", "team/gpu:7"]
    assert images(job(instanceGroups=GROUPS, image="mine:2"), own) == ["mine:2"] * 3
    assert images(job(instanceGroups=GROUPS), POOLS)[2] == "img:1-cuda"
    no_gpu_image = OperatorConfig(default_image="img:1")  # unset: the default image everywhere
    assert build_instance_pods(job(instanceGroups=GROUPS), POOLS, granted=3, attempt=0, cfg=no_gpu_image)[2][
        "spec"]["containers"][0]["image"] == "img:1"
    ph = build_placeholder_pod(gpu_pool(), 0, namespace="ops", cfg=cfg)["spec"]["containers"][0]
    assert ph["image"] == "img:1-cuda" and ph["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_the_accelerator_resource_is_configurable() -> None:
    cfg = OperatorConfig(default_image="img:1", accelerator_resource="amd.com/gpu")
    c = build_instance_pods(job(instanceGroups=GROUPS), POOLS, granted=3, attempt=0, cfg=cfg)[2]["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"cpu": "6", "memory": "27Gi", "amd.com/gpu": "1"}
    with pytest.raises(ValueError):
        OperatorConfig(accelerator_resource="gpu")  # not an extended resource name


def test_pod_is_restricted() -> None:
    p = build_instance_pods(job(), POOLS, granted=1, attempt=0, cfg=CFG)[0]
    psc, csc = p["spec"]["securityContext"], p["spec"]["containers"][0]["securityContext"]
    assert psc["runAsNonRoot"] and psc["runAsUser"] == 1000 and psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                   "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    assert all("hostPath" not in v for v in p["spec"]["volumes"])


@pytest.mark.parametrize(("extra", "mounts"), [
    ({}, {contract.CONTRACT_DIR, "/tmp", "/opt/ml", contract.RESULT_DIR, "/dev/shm"}),
    ({"code": {"configMap": "train-payload"}},
     {contract.CONTRACT_DIR, "/tmp", "/opt/ml", contract.RESULT_DIR, "/dev/shm", contract.PAYLOAD_DIR}),
    ({"channels": [{"name": "train", "source": {"configMap": {"name": "data"}}},
                   {"name": "s3in", "source": {"s3": {"uri": "s3://bucket/x", "credentialsSecret": "aws"}}}]},
     {contract.CONTRACT_DIR, "/tmp", "/opt/ml", contract.RESULT_DIR, "/dev/shm", "/opt/kubepool/channels/train"}),
], ids=["base", "payload-configmap", "channels"])
def test_pod_mounts(extra: dict, mounts: set[str]) -> None:
    p = build_instance_pods(job(**extra), POOLS, granted=1, attempt=0, cfg=CFG)[0]
    c = p["spec"]["containers"][0]
    assert {m["mountPath"] for m in c["volumeMounts"]} == mounts
    if "channels" in extra:
        assert c["envFrom"] == [{"secretRef": {"name": "aws"}}]
    shm = next(v for v in p["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory"}


def test_channels_reach_only_their_groups() -> None:
    spec = {"instanceGroups": GROUPS, "channels": [
        {"name": "a", "source": {"configMap": {"name": "a"}}, "instanceGroups": ["gpu_group"]}]}
    pods = build_instance_pods(job(**spec), POOLS, granted=3, attempt=0, cfg=CFG)
    has = ["/opt/kubepool/channels/a" in {m["mountPath"] for m in p["spec"]["containers"][0]["volumeMounts"]} for p in pods]
    assert has == [False, False, True]


def test_user_env_cannot_override_contract_env() -> None:
    j = job(env=[{"name": "KUBEPOOL_INSTANCE_ID", "value": "7"}, {"name": "LR", "value": "0.1"}])
    env = _env(build_instance_pods(j, POOLS, granted=1, attempt=0, cfg=CFG)[0])
    assert env["KUBEPOOL_INSTANCE_ID"]["value"] == "0" and env["LR"]["value"] == "0.1"


def test_auth_disabled_has_no_token_and_no_account_policy() -> None:
    cfg = OperatorConfig(runtime_account=RuntimeAccountPolicy.NONE)
    p = build_instance_pods(job(ray={"authMode": "disabled"}), POOLS, granted=1, attempt=0, cfg=cfg)[0]
    assert contract.ENV_RAY_AUTH_TOKEN not in _env(p)
    assert "serviceAccountName" not in p["spec"] and p["spec"]["automountServiceAccountToken"] is False


def test_granted_prefix_and_attempt_names() -> None:
    pods = build_instance_pods(job(targetInstances=3, minInstances=2), POOLS, granted=2, attempt=2, cfg=CFG)
    assert [p["metadata"]["name"] for p in pods] == ["train-homogeneouscluster-0-r2", "train-homogeneouscluster-1-r2"]
    assert {p["metadata"]["labels"][naming.LABEL_ATTEMPT] for p in pods} == {"2"}


def test_service_is_headless_without_selector() -> None:
    svc = build_headless_service(JobRef("train", "ns", "u1"))
    assert svc["metadata"]["name"] == "train-svc"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert "selector" not in svc["spec"], "the operator writes the endpoints, not the endpoint controllers"


def _view(name: str, instance: int, **kw: object) -> PodView:
    return PodView(name=name, instance_id=instance, attempt=0, job_uid="u1", uid=f"pod-{instance}",
                   hostname=f"algo-{instance + 1}", subdomain="train-svc", **kw)  # type: ignore[arg-type]


def test_endpoint_slice_lists_live_addressed_pods_with_hostnames() -> None:
    ref = JobRef("train", "ns", "u1")
    pods = [_view("w", 1, ip="10.0.0.3", node="n2"), _view("h", 0, ip="10.0.0.2", node="n1"),
            _view("pending", 2), _view("done", 3, ip="10.0.0.5", phase="Succeeded"),
            _view("going", 4, ip="10.0.0.6", deleting=True),
            PodView(name="other", instance_id=0, attempt=0, job_uid="u0", ip="10.0.0.9")]
    s = build_endpoint_slice(ref, pods)
    assert s is not None and s["kind"] == "EndpointSlice" and s["addressType"] == "IPv4"
    assert s["metadata"]["name"] == "train-svc" and s["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert s["metadata"]["labels"][naming.LABEL_SERVICE_NAME] == "train-svc"
    assert s["metadata"]["labels"][naming.LABEL_SLICE_MANAGED_BY] == naming.SLICE_MANAGER
    assert [(e["addresses"], e["hostname"], e["nodeName"], e["conditions"]["ready"]) for e in s["endpoints"]] == [
        (["10.0.0.2"], "algo-1", "n1", True), (["10.0.0.3"], "algo-2", "n2", True)]
    assert {p["name"] for p in s["ports"]} == {p["name"] for p in build_headless_service(ref)["spec"]["ports"]}
    assert build_endpoint_slice(ref, list(reversed(pods))) == s, "order of the input does not matter"


def test_endpoint_slice_none_without_addresses_and_no_hostname_outside_the_service() -> None:
    ref = JobRef("train", "ns", "u1")
    assert build_endpoint_slice(ref, [_view("h", 0)]) is None
    # The API rejects loopback addresses in a slice (the local cluster's process nodes use them).
    assert build_endpoint_slice(ref, [_view("h", 0, ip="127.0.9.1"), _view("w", 1, ip="169.254.0.3")]) is None
    worker = PodView(name="kuberay-worker", instance_id=1, attempt=0, job_uid="u1", ip="fd00::1")
    s = build_endpoint_slice(ref, [worker])
    assert s is not None and s["addressType"] == "IPv6" and "hostname" not in s["endpoints"][0]


def test_job_secret_holds_contract_and_token() -> None:
    ref = JobRef("train", "ns", "u1")
    doc = build_job_contract(job(), POOLS)
    sec = build_job_secret(ref, doc, "s3cret")
    assert sec["kind"] == "Secret" and sec["metadata"]["name"] == "train-contract"
    assert sec["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert base64.b64decode(sec["data"]["token"]).decode() == "s3cret"
    assert contract.parse_contract(base64.b64decode(sec["data"][contract.CONTRACT_FILENAME]).decode()).job_name == "train"
    assert set(build_job_secret(ref, doc, None)["data"]) == {contract.CONTRACT_FILENAME}  # no token auth: no token
    # A later contract: its key alone, only into a Secret whose first owner is the job.
    later = build_job_contract(job(), POOLS, attempt=2)
    test, add = contract_patch(ref, later)
    assert test == {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": "u1"}
    assert add == {"op": "add", "path": f"/data/{contract.CONTRACT_FILENAME}",
                   "value": base64.b64encode(later.dumps().encode()).decode()}


def test_rbac_is_least_privilege() -> None:
    account, role, binding = build_runtime_rbac(JobRef("train", "ns", "u1"))
    assert account["kind"] == "ServiceAccount" and account["metadata"]["name"] == "train-runtime"
    # scale_cluster gets and patches its own MLJob: no pods, no status (the operator writes it).
    assert role["rules"] == [{"apiGroups": ["kubepool.dev"], "resources": ["mljobs"], "resourceNames": ["train"],
                              "verbs": ["get", "patch"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "train-runtime", "namespace": "ns"}]


def test_namespace_runtime_account_is_shared_and_unowned() -> None:
    account, role, binding = build_namespace_runtime_rbac("ns")
    assert {o["metadata"]["name"] for o in (account, role, binding)} == {naming.RUNTIME_ACCOUNT}
    assert all("ownerReferences" not in o["metadata"] and o["metadata"]["namespace"] == "ns"
               for o in (account, role, binding))
    assert role["rules"] == [{"apiGroups": ["kubepool.dev"], "resources": ["mljobs"], "verbs": ["get", "patch"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": naming.RUNTIME_ACCOUNT, "namespace": "ns"}]


def test_per_job_account_policy_names_the_jobs_account() -> None:
    cfg = OperatorConfig(runtime_account=RuntimeAccountPolicy.PER_JOB)
    p = build_instance_pods(job(), POOLS, granted=1, attempt=0, cfg=cfg)[0]
    assert p["spec"]["serviceAccountName"] == "train-runtime" and p["spec"]["automountServiceAccountToken"] is True


def test_network_policy_only_job_pods() -> None:
    np = build_network_policy(JobRef("train", "ns", "u1"))
    own = {"matchLabels": {naming.LABEL_JOB_UID: "u1"}}
    assert np["spec"] == {"podSelector": own, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": own}]}]}


def test_ray_port_offset_only_on_local_clusters() -> None:
    j = job(targetInstances=2)
    plain = build_instance_pods(j, POOLS, granted=2, attempt=0, cfg=CFG)
    assert all(contract.ENV_RAY_PORT_OFFSET not in _env(p) for p in plain)
    local = build_instance_pods(j, POOLS, granted=2, attempt=0, cfg=OperatorConfig(ray_port_stride=3000))
    shift = local_port_shift("uid-train", 3000)
    assert shift % 100 == 0 and 100 <= shift <= 700 and local_port_shift("uid-train", 0) == 0
    assert [_env(p)[contract.ENV_RAY_PORT_OFFSET]["value"] for p in local] == [str(shift), str(shift + 3000)]
    assert build_job_contract(j, POOLS, port_shift=shift).ray.gcs_port == naming.RAY_GCS_PORT + shift
    assert build_job_contract(j, POOLS).ray.dashboard is True
    assert build_job_contract(job(ray={"dashboard": False}), POOLS).ray.dashboard is False


def test_the_crd_refuses_every_variable_the_operator_sets() -> None:
    """contract.OPERATOR_ENV (the CRD's rule against spec.env naming them) lists every variable a pod or KubeRay
    template gets from the operator; a user's own variable still reaches the pod."""
    from kubepool.controller.builders.raycluster import build_raycluster

    cfg = OperatorConfig(default_image="img:1", ray_port_stride=3000)
    j = job(instanceGroups=GROUPS, env=[{"name": "MINE", "value": "1"}])
    pods = build_instance_pods(j, POOLS, granted=3, attempt=0, cfg=cfg)
    rc = build_raycluster(j, POOLS, granted=3, attempt=0, cfg=cfg)
    templates = [rc["spec"]["headGroupSpec"]["template"], *(g["template"] for g in rc["spec"]["workerGroupSpecs"])]
    for pod in [*pods, *templates]:
        names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert names - {"MINE"} <= set(contract.OPERATOR_ENV), names - {"MINE"} - set(contract.OPERATOR_ENV)
        assert "MINE" in names


def test_pip_requirements_get_a_private_prefix_and_pips_variables() -> None:
    def _values(pod: dict) -> dict[str, str]:  # type: ignore[type-arg]
        return {k: e.get("value") for k, e in _env(pod).items()}

    def pod_of(cfg: OperatorConfig = CFG, **spec: object) -> dict:  # type: ignore[type-arg]
        return build_instance_pods(job(**spec), POOLS, granted=1, attempt=0, cfg=cfg)[0]

    bare = pod_of()
    assert "pip" not in {v["name"] for v in bare["spec"]["volumes"]}
    assert not [n for n in _env(bare) if n.startswith("PIP_")]
    p = pod_of(pipRequirements=["tabulate"], pipOptions={"wheelhouse": {"configMap": {"name": "wheels"}}})
    mounts = {m["name"]: m for m in p["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["pip"]["mountPath"] == contract.PIP_DIR and "readOnly" not in mounts["pip"]
    assert mounts["wheelhouse"] == {"name": "wheelhouse", "mountPath": contract.WHEELHOUSE_DIR, "readOnly": True}
    assert {"name": "wheelhouse", "configMap": {"name": "wheels"}} in p["spec"]["volumes"]
    env = _values(p)
    assert env["PIP_FIND_LINKS"] == contract.WHEELHOUSE_DIR and env["PIP_NO_INDEX"] == "1"  # air-gapped
    cfg = CFG.model_copy(update={"pip_index_url": "https://mirror.example/simple", "pip_extra_index_urls": "https://x.example/simple"})
    env = _values(pod_of(cfg, pipRequirements=["tabulate"]))
    assert (env["PIP_INDEX_URL"], env["PIP_EXTRA_INDEX_URL"]) == ("https://mirror.example/simple", "https://x.example/simple")
    env = _values(pod_of(cfg, pipRequirements=["tabulate"], pipOptions={"indexUrl": "https://own.example/simple",
                                                                     "wheelhouse": {"configMap": {"name": "w"}}}))
    assert env["PIP_INDEX_URL"] == "https://own.example/simple" and "PIP_NO_INDEX" not in env  # the job's index wins
    env = _values(pod_of(cfg, pipRequirements=["tabulate"], env=[{"name": "PIP_INDEX_URL", "value": "https://mine/simple"}]))
    assert env["PIP_INDEX_URL"] == "https://mine/simple"  # the job's own env wins over the operator's default


def test_the_sagemaker_instance_type_is_what_scripts_read() -> None:
    from kubepool.controller.builders import build_job_contract
    from kubepool.runtime import sagemaker

    groups = [{"name": "a", "computePool": "cpu", "instanceCount": 1, "instanceType": "ml.c5.xlarge"},
              {"name": "b", "computePool": "gpu", "instanceCount": 1}]
    doc = build_job_contract(job(instanceGroups=groups), POOLS)
    assert [g.instance_type for g in doc.groups] == ["ml.c5.xlarge", "GPU_NV_S"]  # default: the pool's family
    assert sagemaker.resource_config(doc, doc.identity(0))["current_instance_type"] == "ml.c5.xlarge"
    single = build_job_contract(job(instanceType="ml.m5.large"), POOLS)
    assert [g.instance_type for g in single.groups] == ["ml.m5.large"]


def test_the_contract_carries_the_admission_time() -> None:
    from datetime import UTC, datetime

    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    doc = build_job_contract(job(), POOLS, attempt=1, admitted_at=at)
    assert doc.admitted_at == at.timestamp() and doc.gate_timeout(at.timestamp() + 100) == 620
    assert build_job_contract(job(), POOLS).admitted_at is None


@pytest.mark.parametrize(("mode", "probe"), [("head", ["test", "-e", f"/scratch/ray/{contract.RAY_READY_FILE}"]),
                                             ("parallel", None), ("sagemaker", None)])
def test_a_head_mode_instance_is_ready_once_it_joined_the_ray_cluster(mode: str, probe: list[str] | None) -> None:
    """#38 item 4: Ready = joined (`ray start` writes its marker once the GCS registered the node), so RUNNING
    counts only joined instances, as on the KubeRay backend; modes without Ray are ready while running."""
    j = job(targetInstances=2, mode=mode, env=[{"name": contract.ENV_RAY_TEMP_DIR, "value": "/scratch/ray"}])
    for p in build_instance_pods(j, POOLS, granted=2, attempt=0, cfg=CFG):
        got = p["spec"]["containers"][0].get("readinessProbe")
        assert (got["exec"]["command"] if got else None) == probe
