"""A job's pod settings (env from Secrets/ConfigMaps/the pod, envFrom, volumes and mounts, ServiceAccount, labels,
annotations, affinity, tolerations, priority class) on its instance pods and KubeRay templates, a group's merged
over the job's as the fields' descriptions say (pure builders)."""

from __future__ import annotations

from typing import Any

from kubepool import contract, naming
from kubepool.controller.builders import build_instance_pods
from kubepool.controller.builders.podsettings import merged_by
from kubepool.controller.builders.raycluster import build_raycluster
from kubepool.controller.config import OperatorConfig
from support.factories import gpu_pool, job, pool

CFG = OperatorConfig(default_image="img:1")
POOLS = {"cpu": pool(), "gpu": gpu_pool()}
SECRET_ENV = {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}
JOB_LEVEL: dict[str, Any] = {
    "env": [SECRET_ENV, {"name": "MODE", "value": "job"}],
    "envFrom": [{"configMapRef": {"name": "settings"}}],
    "volumes": [{"name": "config", "configMap": {"name": "settings"}}],
    "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
    "serviceAccountName": "trainer", "priorityClassName": "high",
    "podLabels": {"team": "vision", "tier": "batch"}, "podAnnotations": {"example.com/cost": "42"},
    "tolerations": [{"key": "example.com/spot", "operator": "Exists"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["bad"]}]}]}}},
}
TRAIN: dict[str, Any] = {
    "name": "train", "computePool": "gpu", "instanceCount": 2,
    "env": [{"name": "MODE", "value": "train"}, {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    "envFrom": [{"secretRef": {"name": "train-secrets"}}],
    "volumes": [{"name": "config", "secret": {"secretName": "train-config"}}, {"name": "scratch", "emptyDir": {}}],
    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}, {"name": "config", "mountPath": "/etc/app", "readOnly": True}],
    "serviceAccountName": "gpu-trainer", "priorityClassName": "low",
    "podLabels": {"team": "research"}, "podAnnotations": {"example.com/owner": "ml"},
    "tolerations": [{"key": "example.com/preempt", "operator": "Exists"}],
    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"team": "other"}}}]}},
}
GROUPS = [{"name": "data", "computePool": "cpu", "instanceCount": 1}, TRAIN]


def _pods() -> dict[str, dict[str, Any]]:
    pods = build_instance_pods(job(instanceGroups=GROUPS, mode="sagemaker", **JOB_LEVEL), POOLS, granted=3, attempt=0, cfg=CFG)
    return {p["metadata"]["labels"][naming.LABEL_GROUP]: p for p in pods}  # the last pod of each group


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = pod["spec"]["containers"][0]
    return c


def _env(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in _container(pod)["env"]}


def test_the_jobs_settings_reach_a_group_without_its_own() -> None:
    data = _pods()["data"]
    spec, meta, env = data["spec"], data["metadata"], _env(data)
    assert env["DB_PASSWORD"] == SECRET_ENV and env["MODE"] == {"name": "MODE", "value": "job"}
    assert _container(data)["envFrom"] == [{"configMapRef": {"name": "settings"}}]
    assert {"name": "config", "configMap": {"name": "settings"}} in spec["volumes"]
    assert {"name": "config", "mountPath": "/etc/app"} in _container(data)["volumeMounts"]
    assert spec["serviceAccountName"] == "trainer" and spec["automountServiceAccountToken"] is True
    assert spec["priorityClassName"] == "high"
    assert meta["labels"]["team"] == "vision" and meta["annotations"] == {"example.com/cost": "42"}
    assert {"key": "example.com/spot", "operator": "Exists"} in spec["tolerations"]
    assert spec["affinity"]["nodeAffinity"] == JOB_LEVEL["affinity"]["nodeAffinity"]


def test_a_groups_settings_merge_over_the_jobs() -> None:
    train = _pods()["train"]
    spec, meta, env, container = train["spec"], train["metadata"], _env(train), _container(train)
    # env: the group's MODE replaces the job's, the job's secret variable stays, the group's fieldRef is added
    assert env["MODE"]["value"] == "train" and env["DB_PASSWORD"] == SECRET_ENV
    assert env["NODE"] == {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    # envFrom: the job's, then the group's (a later source wins a shared key)
    assert container["envFrom"] == [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "train-secrets"}}]
    # volumes by name, mounts by path: the group's replace the job's
    config = [v for v in spec["volumes"] if v["name"] == "config"]
    assert config == [{"name": "config", "secret": {"secretName": "train-config"}}]
    assert [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/app"] == [
        {"name": "config", "mountPath": "/etc/app", "readOnly": True}]
    assert {"name": "scratch", "mountPath": "/scratch"} in container["volumeMounts"]
    assert spec["serviceAccountName"] == "gpu-trainer" and spec["priorityClassName"] == "low"
    assert meta["labels"]["team"] == "research" and meta["labels"]["tier"] == "batch"
    assert meta["annotations"] == {"example.com/cost": "42", "example.com/owner": "ml"}
    # tolerations add up: the pool's, the job's, the group's (and the operator's lost-node ones)
    keys = [t.get("key") for t in spec["tolerations"]]
    assert keys[:3] == ["nvidia.com/gpu", "example.com/spot", "example.com/preempt"]
    # affinity: the group's podAntiAffinity joins the operator's one-per-node term; the job's nodeAffinity stays
    terms = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["labelSelector"] == {"matchLabels": {naming.LABEL_POOL: "gpu"}}
    assert terms[1] == TRAIN["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert spec["affinity"]["nodeAffinity"] == JOB_LEVEL["affinity"]["nodeAffinity"]


def test_the_operators_own_wiring_stays() -> None:
    train = _pods()["train"]
    labels = train["metadata"]["labels"]
    assert labels[naming.LABEL_GROUP] == "train" and labels[naming.LABEL_POOL] == "gpu"
    names = [v["name"] for v in train["spec"]["volumes"]]
    assert names[:5] == ["contract", "tmp", "base", "result", "dshm"] and len(names) == len(set(names))
    assert "KUBEPOOL_INSTANCE_ID" in _env(train)


def test_a_literal_value_is_never_expanded_a_value_from_is_kept() -> None:
    pods = build_instance_pods(job(env=[{"name": "A", "value": "$(HOME)"}, SECRET_ENV]), POOLS, granted=1, attempt=0, cfg=CFG)
    env = _env(pods[0])
    assert env["A"] == {"name": "A", "value": "$$(HOME)"} and env["DB_PASSWORD"] == SECRET_ENV


def test_without_settings_nothing_changes() -> None:
    [pod] = build_instance_pods(job(), POOLS, granted=1, attempt=0, cfg=CFG)
    assert "priorityClassName" not in pod["spec"] and "annotations" not in pod["metadata"]
    assert pod["spec"]["serviceAccountName"] == naming.RUNTIME_ACCOUNT
    assert list(pod["spec"]["affinity"]) == ["podAntiAffinity"]


def test_kuberay_templates_carry_each_groups_settings() -> None:
    rc = build_raycluster(job(instanceGroups=GROUPS, backend="kuberay", **JOB_LEVEL), POOLS, granted=3, attempt=0, cfg=CFG)
    head = rc["spec"]["headGroupSpec"]["template"]
    [worker] = [w["template"] for w in rc["spec"]["workerGroupSpecs"] if w["groupName"] == "train"]
    assert head["spec"]["serviceAccountName"] == "trainer" and worker["spec"]["serviceAccountName"] == "gpu-trainer"
    assert head["metadata"]["labels"]["team"] == "vision" and worker["metadata"]["labels"]["team"] == "research"
    assert worker["metadata"]["annotations"] == {"example.com/cost": "42", "example.com/owner": "ml"}
    assert worker["spec"]["priorityClassName"] == "low"
    assert {"name": "scratch", "emptyDir": {}} in worker["spec"]["volumes"]
    assert _env(worker)["MODE"]["value"] == "train" and _env(head)["MODE"]["value"] == "job"


def test_merged_by_replaces_in_place_and_appends() -> None:
    assert merged_by(lambda x: x[0], ["a1", "b1", "c1"], ["b2", "d2"]) == ["a1", "b2", "c1", "d2"]


def test_envfrom_secrets_are_mounted_for_the_runtimes_redaction() -> None:
    """The Secrets of envFrom (job and group levels) are also mounted read-only, once each, optional only where every
    reference is, under the operator's directory, and named in KUBEPOOL_SECRET_DIRS: the runtime reads their values
    there to keep them out of the job's status and Events (#39), though the operator never reads a Secret."""
    job_level = {"envFrom": [{"secretRef": {"name": "db", "optional": True}}, {"configMapRef": {"name": "settings"}},
                             {"prefix": "API_", "secretRef": {"name": "api"}}]}
    group = {**GROUPS[0], "envFrom": [{"secretRef": {"name": "db"}}, {"secretRef": {"name": "extra", "optional": True}}]}
    pods = build_instance_pods(job(instanceGroups=[group, TRAIN], mode="sagemaker", **job_level), POOLS, granted=3,
                               attempt=0, cfg=CFG)
    by_group = {p["metadata"]["labels"][naming.LABEL_GROUP]: p for p in pods}
    root = contract.ENV_FROM_SECRETS_DIR
    expected = {"data": [("db", False), ("api", False), ("extra", True)],
                "train": [("db", True), ("api", False), ("train-secrets", False)]}
    for name, secrets in expected.items():
        pod = by_group[name]
        ours = [v for v in pod["spec"]["volumes"] if v["name"].startswith(contract.ENV_FROM_VOLUME_PREFIX)]
        assert ours == [{"name": f"envfrom-{i}", "secret": {"secretName": s, **({"optional": True} if opt else {})}}
                        for i, (s, opt) in enumerate(secrets)], name
        mounts = [m for m in _container(pod)["volumeMounts"] if m["name"].startswith(contract.ENV_FROM_VOLUME_PREFIX)]
        assert mounts == [{"name": f"envfrom-{i}", "mountPath": f"{root}/{i}", "readOnly": True} for i in range(len(secrets))]
        dirs = _env(pod)[contract.ENV_SECRET_DIRS]["value"].split(":")
        assert [d for d in dirs if d.startswith(root)] == [f"{root}/{i}" for i in range(len(secrets))], name
        names = [v["name"] for v in pod["spec"]["volumes"]]
        assert len(names) == len(set(names)), names
        # The operator's contract (a secret volume too) is no Secret of the job's: its lines are never blanked out.
        assert contract.CONTRACT_DIR not in dirs and "RAY_AUTH_TOKEN" in _env(pod)[contract.ENV_SECRET_ENV]["value"].split(","), dirs
    [plain] = build_instance_pods(job(envFrom=[{"configMapRef": {"name": "settings"}}]), POOLS, granted=1, attempt=0, cfg=CFG)
    assert not [v for v in plain["spec"]["volumes"] if v["name"].startswith(contract.ENV_FROM_VOLUME_PREFIX)]
