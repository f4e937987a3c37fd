"""The chart, offline: lint, rendering, least-privilege RBAC, the closed values schema and the CRD copy."""

from __future__ import annotations

import filecmp
import json
import re
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, NAMESPACE, OPERATOR_RIGHTS, REPO, by_kind, run_helm

import kubepool
from kubepool import naming
from kubepool.api import ComputePool, ComputePoolSpec, InstanceFamily
from kubepool.controller.config import ENV_PREFIX, OperatorConfig

CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))

REQUIRED = OPERATOR_RIGHTS  # the chart must grant exactly what the code uses (chartlib)
CLUSTER_SCOPED = {"computepools", "computepools/status", "nodes", "priorityclasses", "customresourcedefinitions",
                  "namespaces", "events", "clusterkopfpeerings"}


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def operator_rules(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Rules of the operator's own roles (not the end-user ones)."""
    return [r for o in by_kind(objs, kind) if not re.search(r"-(viewer|editor)$", o["metadata"]["name"]) for r in o["rules"]]


def operator_config(container: dict[str, Any]) -> OperatorConfig:
    """What the operator reads from the container's env: every variable must be one of its settings."""
    env = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith(ENV_PREFIX)}
    unknown = {n for n in env if n.removeprefix(ENV_PREFIX).lower() not in OperatorConfig.model_fields}
    assert not unknown, f"the operator does not read {unknown}"
    return OperatorConfig.from_env(env)


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "default")
def test_lint_strict(helm: str, values: Any) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION]
    proc = run_helm(helm, *args, *(["-f", str(values)] if values else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_default_render(render: Any) -> None:
    objs = render()
    kinds = sorted(o["kind"] for o in objs if o["kind"] not in ("Role", "RoleBinding"))  # the leader's Lease: below
    assert [k for k in kinds if not k.startswith("ValidatingAdmissionPolicy")] == [
        "ClusterRole"] * 5 + ["ClusterRoleBinding", "Deployment", "Service", "ServiceAccount"]
    policies = {o["metadata"]["name"] for o in by_kind(objs, "ValidatingAdmissionPolicy")}
    assert policies == {o["spec"]["policyName"] for o in by_kind(objs, "ValidatingAdmissionPolicyBinding")}
    assert {"kp-kubepool-runtime-own-job", "kp-kubepool-job-results"} <= policies
    [svc] = by_kind(objs, "Service")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]


def test_deployment(render: Any) -> None:
    [dep] = by_kind(render(), "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "RollingUpdate"}  # the Lease keeps them apart
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "kp-kubepool"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [c] = pod["containers"]
    version = kubepool.__version__  # the release's one version is the chart's appVersion and the images' tag
    assert c["image"] == f"ghcr.io/kubepool/operator:{version}"
    assert c["command"] == ["python", "-m", "kubepool.controller"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["args"] == ["--log-level=info", "--log-format=full", "--standalone"]
    assert {"name": "USER", "value": "kubepool"} in c["env"]  # kopf's getpass.getuser() for any uid
    cfg = operator_config(c)
    assert cfg.default_image == f"ghcr.io/kubepool/runtime:{version}"  # beside the operator's
    assert cfg.default_backend == "pods" and cfg.namespaces == ()
    assert (cfg.liveness_port, cfg.metrics_port) == (8081, 8080)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"health": 8081, "metrics": 8080}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


def test_values_reach_the_deployment(render: Any) -> None:
    objs = render("--set", "image.tag=dev", "--set", "operator.runtimeImage=reg/rt:1",
                  "--set", "operator.watchNamespaces={a,b}", "--set", "metrics.enabled=false")
    [dep] = by_kind(objs, "Deployment")
    [c] = dep["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "ghcr.io/kubepool/operator:dev"
    cfg = operator_config(c)
    assert cfg.default_image == "reg/rt:1" and cfg.namespaces == ("a", "b") and cfg.metrics_port == 0
    assert not by_kind(objs, "Service")


def test_listen_on_pod_ip(render: Any) -> None:
    """Local process nodes share the host's network: the operator can listen on its pod IP only."""
    [c] = by_kind(render(), "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    assert operator_config(c).bind_address == "0.0.0.0"
    [c] = by_kind(render("--set", "operator.listenOnPodIP=true"), "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    [env] = [e for e in c["env"] if e["name"] == "KUBEPOOL_OPERATOR_BIND_ADDRESS"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


# OperatorConfig fields the chart sets from dedicated values; every other field is an `operator.settings` key.
DEDICATED = {"default_image", "gpu_image", "default_backend", "namespaces", "liveness_port", "metrics_port", "warm_capacity",
             "placeholder_namespace", "bind_address", "leader_election", "lease_name", "lease_namespace", "kueue"}


def test_every_operator_setting_is_reachable_from_values() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    keys = schema["properties"]["operator"]["properties"]["settings"]["properties"]
    snake = {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower() for k in keys}
    assert snake | DEDICATED == set(OperatorConfig.model_fields)


def test_kueue_value_turns_the_operator_into_kueues_controller_with_its_rbac(render: Any) -> None:
    def rules(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for o in by_kind(objs, "ClusterRole") for r in o.get("rules") or [] if "kueue.x-k8s.io" in r["apiGroups"]]

    off = render()
    [dep] = by_kind(off, "Deployment")
    assert operator_config(dep["spec"]["template"]["spec"]["containers"][0]).kueue is False and not rules(off)
    on = render("--set", "operator.kueue=true")
    [dep] = by_kind(on, "Deployment")
    assert operator_config(dep["spec"]["template"]["spec"]["containers"][0]).kueue is True
    granted = {(res, verb) for r in rules(on) for res in r["resources"] for verb in r["verbs"]}
    assert {("workloads", "create"), ("workloads", "watch"), ("workloads", "delete"), ("workloads/status", "patch")} <= granted


def test_operator_settings_reach_the_operator(render: Any, tmp_path: Any) -> None:
    values = tmp_path / "settings.yaml"
    values.write_text(yaml.safe_dump({"operator": {"settings": {
        "runtimeAccount": "none", "runAsUser": 4242, "python": "python3", "imagePullPolicy": "Never",
        "workerGraceSeconds": 5, "podTerminationGraceSeconds": 3, "rayPortStride": 3000,
    }}}))
    [dep] = by_kind(render("-f", str(values)), "Deployment")
    cfg = operator_config(dep["spec"]["template"]["spec"]["containers"][0])
    assert (cfg.runtime_account, cfg.run_as_user, cfg.python, cfg.image_pull_policy) == ("none", 4242, "python3", "Never")
    assert (cfg.worker_grace_seconds, cfg.pod_termination_grace_seconds, cfg.ray_port_stride) == (5, 3, 3000)
    [dep] = by_kind(render("--set-string", "operator.settings.runAsUser="), "Deployment")
    assert operator_config(dep["spec"]["template"]["spec"]["containers"][0]).run_as_user is None


@pytest.mark.parametrize("account", ["per-namespace", "per-job", "none"])
def test_runtime_policy_guards_only_the_shared_account(render: Any, account: str) -> None:
    """The shared per-namespace runtime account may patch any MLJob of its namespace by RBAC; the chart's policy
    narrows that to the job of the calling pod (the other modes need none)."""
    objs = [o for o in render("--set", f"operator.settings.runtimeAccount={account}")
            if o["metadata"]["name"].endswith("-runtime-own-job")]
    policies = by_kind(objs, "ValidatingAdmissionPolicy")
    if account != "per-namespace":
        assert not policies and not by_kind(objs, "ValidatingAdmissionPolicyBinding")
        return
    [policy], [binding] = policies, by_kind(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert f":{naming.RUNTIME_ACCOUNT}'" in policy["spec"]["matchConditions"][0]["expression"]
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"mljobs", "mljobs/status"} and rule["operations"] == ["UPDATE"]


@pytest.mark.parametrize("account", ["per-namespace", "per-job", "none"])
def test_results_policy_guards_every_mode(render: Any, account: str) -> None:
    """Only a job's own instance pod may write its result, whatever account the pods run as (#39 section 2;
    tests/faults/test_faults_results.py proves it on the API server)."""
    objs = [o for o in render("--set", f"operator.settings.runtimeAccount={account}")
            if o["metadata"]["name"].endswith("-job-results")]
    [policy], [binding] = by_kind(objs, "ValidatingAdmissionPolicy"), by_kind(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail" and "matchConditions" not in policy["spec"]
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["mljobs"] and rule["operations"] == ["CREATE", "UPDATE"]
    assert f"'{naming.RESULT_ANNOTATION_PREFIX}/'" in policy["spec"]["validations"][0]["expression"]


def test_cluster_role_is_exactly_what_the_operator_needs(render: Any) -> None:
    rules = operator_rules(render(), "ClusterRole")
    assert grants(rules) == REQUIRED


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "default")
def test_no_wildcards_and_no_secret_reads(render: Any, values: Any) -> None:
    objs = render(*(["-f", str(values)] if values else []))
    for role in by_kind(objs, "ClusterRole") + by_kind(objs, "Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"{role['metadata']['name']}: wildcard in {rule}"
            if "secrets" in rule["resources"]:
                assert not {"list", "watch"} & set(rule["verbs"]), f"{role['metadata']['name']} may list Secrets"


@pytest.mark.parametrize("flag", [["--set", "rbac.namespaced=true"], []], ids=["rbac-namespaced", "watched-namespaces"])
def test_namespaced_rbac_uses_the_same_rules(render: Any, flag: list[str]) -> None:
    """Listing the watched namespaces puts the namespaced rules in their Roles, with or without rbac.namespaced
    (which only makes an empty list an error): the ClusterRole keeps cluster-scoped ones (and Events)."""
    objs = render(*flag, "--set", "operator.watchNamespaces={ml-a,ml-b}")
    roles = [r for r in by_kind(objs, "Role") if not r["metadata"]["name"].endswith("-leader")]  # the Lease's: below
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["kubepool-system", "ml-a", "ml-b"]
    assert sorted(b["metadata"]["namespace"] for b in by_kind(objs, "RoleBinding")
                  if not b["metadata"]["name"].endswith("-leader")) == ["kubepool-system", "ml-a", "ml-b"]
    cluster = grants(operator_rules(objs, "ClusterRole"))
    assert {res for _, res in cluster} <= CLUSTER_SCOPED
    for role in roles:
        namespaced = grants(role["rules"])
        assert not {res for _, res in namespaced} & CLUSTER_SCOPED
        # Together they grant exactly what the cluster-wide mode grants.
        assert {**cluster, **namespaced} == REQUIRED


def test_optional_rules(render: Any) -> None:
    objs = render("--set", "rbac.kuberay=true", "--set", "operator.peering=true")
    granted = grants(operator_rules(objs, "ClusterRole"))
    assert granted[("ray.io", "rayclusters")] == {"create", "patch", "delete"}
    assert granted[("", "pods")] == OPERATOR_RIGHTS[("", "pods")] | {"patch"}  # KubeRay's pods' finalizer
    assert ("kopf.dev", "clusterkopfpeerings") in granted and ("kopf.dev", "kopfpeerings") in granted
    [dep] = by_kind(objs, "Deployment")
    assert "--standalone" not in dep["spec"]["template"]["spec"]["containers"][0]["args"]  # peering


def test_rbac_off(render: Any) -> None:
    objs = render("--set", "rbac.create=false", "--set", "rbac.userRoles=false")
    assert not [o for o in objs if o["apiVersion"].startswith("rbac.authorization.k8s.io")]


def test_user_roles_aggregate(render: Any) -> None:
    roles = {r["metadata"]["name"].removeprefix("kp-kubepool-"): r for r in by_kind(render(), "ClusterRole")}
    agg = {name: {k.rsplit("-", 1)[-1] for k in r["metadata"]["labels"] if "aggregate-to" in k} for name, r in roles.items()}
    assert agg == {"kp-kubepool": set(), "mljob-viewer": {"view"}, "mljob-editor": {"edit"},
                   "computepool-viewer": {"view"}, "computepool-editor": set()}
    assert "create" in grants(roles["mljob-editor"]["rules"])[("kubepool.dev", "mljobs")]
    assert grants(roles["mljob-viewer"]["rules"])[("kubepool.dev", "mljobs")] == {"get", "list", "watch"}


def test_replicas_with_leader_election(render: Any) -> None:
    """replicas > 1 with leader election: rolling updates (the lease keeps replicas from overlapping), the Lease
    named after the release in its namespace, and a Role there for Leases only."""
    objs = render("--set", "replicas=2", "--set", "operator.leaderElection=true")
    [deploy] = by_kind(objs, "Deployment")
    assert deploy["spec"]["replicas"] == 2 and deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    [c] = deploy["spec"]["template"]["spec"]["containers"]
    cfg = operator_config(c)
    assert cfg.leader_election and cfg.lease_name == deploy["metadata"]["name"] and cfg.lease_namespace == NAMESPACE
    [role] = [r for r in by_kind(objs, "Role") if r["metadata"]["name"].endswith("-leader")]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    assert by_kind(objs, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 1
    [default] = by_kind(render("--set", "operator.leaderElection=false"), "Deployment")
    assert default["spec"]["replicas"] == 1 and default["spec"]["strategy"]["type"] == "Recreate"
    assert not operator_config(default["spec"]["template"]["spec"]["containers"][0]).leader_election


def test_leader_election_on_by_default_and_the_ha_example(render: Any) -> None:
    """The chart's defaults elect a leader (one replica, ready for a second); ci/ha-values.yaml runs two with a
    PodDisruptionBudget that selects exactly the operator's pods."""
    defaults = render()
    [deploy] = by_kind(defaults, "Deployment")
    assert operator_config(deploy["spec"]["template"]["spec"]["containers"][0]).leader_election
    assert deploy["spec"]["replicas"] == 1 and not by_kind(defaults, "PodDisruptionBudget")
    assert [r["metadata"]["name"] for r in by_kind(defaults, "Role")] == ["kp-kubepool-leader"]
    ha = render("-f", str(CHART / "ci" / "ha-values.yaml"))
    [deploy] = by_kind(ha, "Deployment")
    [pdb] = by_kind(ha, "PodDisruptionBudget")
    assert deploy["spec"]["replicas"] == 2 and operator_config(deploy["spec"]["template"]["spec"]["containers"][0]).leader_election
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]


def test_pools_from_values(render: Any) -> None:
    pools = by_kind(render("-f", str(CHART / "ci" / "ci-values.yaml")), "ComputePool")
    assert [p["metadata"]["name"] for p in pools] == ["cpu-pool"]
    pool = ComputePool.model_validate(pools[0])
    assert pool.spec.max_nodes == 3 and pool.spec.node_selector == {"kubepool.dev/node-pool": "cpu"}


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "rbac.namespaced=true"], "rbac.namespaced: true needs operator.watchNamespaces"),
    (["--set", "operator.defaultBackend=kuberay"], "needs rbac.kuberay: true"),
    (["--set", "metrics.port=8081"], "metrics.port and health.port must differ"),
    (["--set", "pools[0].name=p", "--set", "pools[0].spec.maxNodes=2", "--set", "pools[0].spec.minNodes=3",
      "--set", "pools[0].spec.instanceFamily=CPU_X64_S"], "spec.minNodes must not exceed spec.maxNodes"),
    (["--set", "pools[0].name=p", "--set", "pools[0].spec.maxNodes=2"], "set spec.instanceFamily or spec.resources"),
    (["--set", "serviceAccount.create=false"], "serviceAccount.name is required"),
    (["--set", "replicas=2", "--set", "operator.leaderElection=false"], "replicas: 2 needs operator.leaderElection: true"),
])
def test_validate_values_fails_with_a_clear_message(helm: str, args: list[str], message: str) -> None:
    proc = run_helm(helm, "template", "kp", str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION, *args)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("setting", [
    "unknownKey=1", "image.registry=x", "rbac.bogus=true", "securityContext.runAsUsr=1",
    "tolerations[0].operator=Sometimes", "image.digest=latest",
    "pools[0].name=p", "operator.defaultBackend=ray",
])
def test_schema_rejects_unknown_or_invalid_values(helm: str, setting: str) -> None:
    proc = run_helm(helm, "template", "kp", str(CHART), "--kube-version", KUBE_VERSION, "--set", setting)
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr, proc.stderr


def _objects(schema: dict[str, Any], path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if schema.get("type") == "object":
        out.append((path, schema))
    for name, sub in (schema.get("properties") or {}).items():
        out += _objects(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out += _objects(schema["items"], f"{path}[]")
    return out


def test_schema_is_closed_at_every_level() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path, obj in _objects(schema):
        if "properties" in obj:
            assert obj.get("additionalProperties") is False, f"{path} is open"
        else:  # a map (labels, nodeSelector): any key, but typed values
            assert isinstance(obj.get("additionalProperties"), dict), f"{path} is an untyped object"


def test_schema_pool_spec_matches_the_api() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    spec = schema["properties"]["pools"]["items"]["properties"]["spec"]
    api_fields = {f.alias for f in ComputePoolSpec.model_fields.values()}
    assert set(spec["properties"]) == api_fields
    assert spec["properties"]["instanceFamily"]["enum"] == [f.value for f in InstanceFamily]


def test_every_value_is_documented() -> None:
    """Every leaf key has a `# --` comment on itself or on an enclosing key (helm-docs documents subtrees)."""
    documented: list[int] = []  # indents of the enclosing keys that carry a `# --` comment
    pending = False
    undocumented = []
    for line in (CHART / "values.yaml").read_text().splitlines():
        if line.lstrip().startswith("# --"):
            pending = True
            continue
        m = re.match(r"^(\s*)([A-Za-z][\w-]*):(.*)$", line)
        if not m:
            continue
        indent = len(m.group(1))
        documented = [i for i in documented if i < indent]
        is_leaf = yaml.safe_load(m.group(3) or "null") is not None
        if pending:
            documented.append(indent)
        elif is_leaf and not documented:
            undocumented.append(m.group(2))
        pending = False
    assert not undocumented, f"values without a `# --` comment: {undocumented}"


def test_values_yaml_matches_the_schema_defaults() -> None:
    """Every default in values.yaml is a key the schema knows (the schema is closed, helm lint checks types)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(values) == set(schema["properties"])


def test_chart_crds_are_a_byte_copy_of_crds() -> None:
    """charts/kubepool/crds is produced by `make crds`; a hand edit or a stale copy fails here."""
    src, dst = REPO / "crds", CHART / "crds"
    names = sorted(p.name for p in src.iterdir())
    assert names and names == sorted(p.name for p in dst.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(src, dst, names, shallow=False)
    assert not mismatch and not errors, f"run `make crds`: {mismatch or errors} differ"


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["appVersion"] == kubepool.__version__
