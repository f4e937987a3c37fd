"""An MLJob is never wider than its author (#39): the chart's admission policy (templates/admission-policy.yaml)
and the CRD's own rules on the real API server, attacked by `alice`, a user who may only create and read MLJobs
in one namespace (the chart's mljob-editor role, impersonated with `kubectl --as`). The operator would create
her job's pods with its own rights, so each reference she may not use herself is refused at apply, naming the
field and the missing permission; granted that one right, the same job is accepted.

The policy is applied as the chart renders it, its binding limited to the test's namespace (policies are
cluster-wide). No operator runs: admission is the whole defence under test."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from chartlib import CHART, by_kind

from kubepool import naming
from kubepool.api.k8stypes import CORE, SCHEMAS

pytestmark = pytest.mark.api  # the API server alone: no operator, no pod runs (make test-fast)

POLICY_READY_S = 60
ALICE = "alice"
WHY = "an MLJob may reference only what its author may use"

BASE: dict[str, Any] = {"computePool": "no-such-pool", "entrypoint": {"command": ["true"]}}
S3 = "s3://bucket/data"

# (case, spec fields over BASE, the field the refusal names, resource, name)
ATTACKS: list[tuple[str, dict[str, Any], str, str, str]] = [
    ("env-secret", {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]},
     "spec.env[TOKEN].valueFrom.secretKeyRef", "secrets", "db"),
    ("envfrom-secret", {"envFrom": [{"secretRef": {"name": "db"}}]}, "spec.envFrom[].secretRef", "secrets", "db"),
    ("volume-secret", {"volumes": [{"name": "s", "secret": {"secretName": "db"}}]},
     "spec.volumes[s].secret.secretName", "secrets", "db"),
    ("projected-secret", {"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "db"}}]}}]},
     "spec.volumes[p].projected.sources[].secret.name", "secrets", "db"),
    ("csi-secret", {"volumes": [{"name": "c", "csi": {"driver": "x.csi.example", "nodePublishSecretRef": {"name": "db"}}}]},
     "spec.volumes[c].csi.nodePublishSecretRef.name", "secrets", "db"),
    ("channel-credentials", {"channels": [{"name": "train", "source": {"s3": {"uri": S3, "credentialsSecret": "aws"}}}]},
     "spec.channels[train].source.s3.credentialsSecret", "secrets", "aws"),
    ("output-credentials", {"output": {"s3": {"uri": S3, "credentialsSecret": "aws"}}},
     "spec.output.s3.credentialsSecret", "secrets", "aws"),
    ("checkpoint-credentials", {"checkpoint": {"s3": {"uri": S3, "credentialsSecret": "aws"}}},
     "spec.checkpoint.s3.credentialsSecret", "secrets", "aws"),
    ("group-env-secret", {"computePool": None, "instanceGroups": [
        {"name": "g1", "computePool": "no-such-pool", "instanceCount": 1,
         "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "k"}}}]}]},
     "spec.instanceGroups[g1].env[TOKEN].valueFrom.secretKeyRef", "secrets", "db"),
    ("env-configmap", {"env": [{"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]},
     "spec.env[CFG].valueFrom.configMapKeyRef", "configmaps", "cfg"),
    ("envfrom-configmap", {"envFrom": [{"configMapRef": {"name": "cfg"}}]}, "spec.envFrom[].configMapRef", "configmaps", "cfg"),
    ("volume-configmap", {"volumes": [{"name": "c", "configMap": {"name": "cfg"}}]},
     "spec.volumes[c].configMap.name", "configmaps", "cfg"),
    ("channel-configmap", {"channels": [{"name": "train", "source": {"configMap": {"name": "cfg"}}}]},
     "spec.channels[train].source.configMap.name", "configmaps", "cfg"),
    ("wheelhouse-configmap", {"pipRequirements": ["six"], "pipOptions": {"wheelhouse": {"configMap": {"name": "cfg"}}}},
     "spec.pipOptions.wheelhouse.configMap.name", "configmaps", "cfg"),
    ("code-configmap", {"code": {"configMap": "cfg"}}, "spec.code.configMap", "configmaps", "cfg"),
    ("service-account", {"serviceAccountName": "deployer"}, "spec.serviceAccountName", "serviceaccounts", "deployer"),
    ("group-service-account", {"computePool": None, "instanceGroups": [
        {"name": "g1", "computePool": "no-such-pool", "instanceCount": 1, "serviceAccountName": "deployer"}]},
     "spec.instanceGroups[g1].serviceAccountName", "serviceaccounts", "deployer"),
    ("volume-claim", {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]},
     "spec.volumes[d].persistentVolumeClaim.claimName", "persistentvolumeclaims", "data"),
    ("channel-claim", {"channels": [{"name": "train", "source": {"persistentVolumeClaim": {"claimName": "data"}}}]},
     "spec.channels[train].source.persistentVolumeClaim.claimName", "persistentvolumeclaims", "data"),
    ("output-claim", {"output": {"persistentVolumeClaim": {"claimName": "data"}}},
     "spec.output.persistentVolumeClaim.claimName", "persistentvolumeclaims", "data"),
    ("checkpoint-claim", {"checkpoint": {"persistentVolumeClaim": {"claimName": "data"}}},
     "spec.checkpoint.persistentVolumeClaim.claimName", "persistentvolumeclaims", "data"),
    ("wheelhouse-claim", {"pipRequirements": ["six"], "pipOptions": {"wheelhouse": {"persistentVolumeClaim": {"claimName": "data"}}}},
     "spec.pipOptions.wheelhouse.persistentVolumeClaim.claimName", "persistentvolumeclaims", "data"),
    ("code-claim", {"code": {"persistentVolumeClaim": {"claimName": "data"}}},
     "spec.code.persistentVolumeClaim.claimName", "persistentvolumeclaims", "data"),
]


def _job(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in {**copy.deepcopy(BASE), **copy.deepcopy(fields)}.items() if v is not None}
    return {"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND, "metadata": {"name": name}, "spec": spec}


def _create(kubectl: Any, ns: str, job: dict[str, Any], who: str | None = ALICE, dry: bool = False) -> Any:
    args = ["create", "-n", ns, "-f", "-"] + (["--as", who] if who else []) + (["--dry-run=server"] if dry else [])
    return kubectl(*args, input=json.dumps(job))


@pytest.fixture
def policy(kubectl: Any, crds: None, namespace: str, render: Any) -> Iterator[str]:
    """The chart's policy (default values) bound to the test's namespace, and alice, who may only create and read
    MLJobs there (the chart's mljob-editor ClusterRole, renamed per test)."""
    ns = namespace
    name = f"{ns}-author"[:63]
    objs = render("--show-only", "templates/admission-policy.yaml", "--show-only", "templates/user-roles.yaml")
    [pol], [binding] = by_kind(objs, "ValidatingAdmissionPolicy"), by_kind(objs, "ValidatingAdmissionPolicyBinding")
    pol["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
    [editor] = [r for r in by_kind(objs, "ClusterRole") if r["metadata"]["name"].endswith("-mljob-editor")]
    editor["metadata"] = {"name": f"{ns}-mljob-editor"}
    rolebinding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "alice-mljobs"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": editor["metadata"]["name"]},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ALICE}]}
    try:
        for obj in (pol, binding, editor, rolebinding):
            kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj), check=True)
        # In force once it refuses alice a Secret (any version of it does).
        probe = _job("probe", ATTACKS[0][1])
        deadline = time.monotonic() + POLICY_READY_S
        while (r := _create(kubectl, ns, probe, dry=True)).returncode == 0 or WHY not in r.stderr:
            assert time.monotonic() < deadline, f"the policy never refused alice: {r.stdout}{r.stderr}"
            time.sleep(0.5)
        yield ns
    finally:
        kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found")
        kubectl("delete", "clusterrole", f"{ns}-mljob-editor", "--ignore-not-found")


def _grant(kubectl: Any, ns: str, resource: str, name: str, verb: str) -> None:
    role = f"alice-{verb}-{resource}-{name}"[:63]
    rules = [{"apiGroups": [""], "resources": [resource], "resourceNames": [name], "verbs": [verb]}]  # `use`: a verb of our own
    kubectl("apply", "-n", ns, "-f", "-", check=True, input=json.dumps(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": role}, "rules": rules}))
    kubectl("create", "rolebinding", role, "-n", ns, f"--role={role}", f"--user={ALICE}", check=True)


def test_alice_cannot_reach_what_she_may_not_use(kubectl: Any, policy: str) -> None:
    """Every reference kind the MLJob schema has, one job each: refused for alice with the field and the missing
    right named; once she holds that right on that one object, the same job is accepted."""
    ns = policy
    assert kubectl("auth", "can-i", "create", "mljobs.kubepool.dev", "-n", ns, "--as", ALICE).stdout.strip() == "yes"
    for resource in ("secrets", "configmaps", "persistentvolumeclaims", "pods"):
        assert kubectl("auth", "can-i", "get", resource, "-n", ns, "--as", ALICE).stdout.strip() == "no", resource
    refused = {}
    for case, fields, field, resource, name in ATTACKS:
        r = _create(kubectl, ns, _job(case, fields))
        verb = "use (or impersonate)" if resource == "serviceaccounts" else "get"
        want = f"{field} names {resource} {name}, which {ALICE} may not {verb} in namespace {ns}"
        refused[case] = r.returncode != 0 and want in r.stderr and "Forbidden" in r.stderr
        assert refused[case], f"{case}: alice's job was not refused as expected ({want}):\n{r.stdout}{r.stderr}"
    # Granted exactly the right the message named, on that object only, she may.
    granted = {("secrets", "db"): "get", ("secrets", "aws"): "get", ("configmaps", "cfg"): "get",
               ("persistentvolumeclaims", "data"): "get", ("serviceaccounts", "deployer"): "use"}
    for (resource, name), verb in granted.items():
        _grant(kubectl, ns, resource, name, verb)
    deadline = time.monotonic() + 30  # RBAC's cache: a new binding takes a moment to authorize
    for case, fields, *_ in ATTACKS:
        while (r := _create(kubectl, ns, _job(case, fields), dry=True)).returncode != 0:
            assert time.monotonic() < deadline, f"{case}: still refused once granted:\n{r.stderr}"
            time.sleep(0.5)


def test_impersonating_the_account_is_enough_and_updates_keep_what_was_checked(kubectl: Any, policy: str) -> None:
    """`impersonate` on a ServiceAccount (what the built-in edit role grants) stands for `use`. A job an admin made
    with a Secret alice may not read is still hers to scale: only what an update brings in is checked."""
    ns = policy
    _grant(kubectl, ns, "serviceaccounts", "deployer", "impersonate")
    deadline = time.monotonic() + 30
    while (r := _create(kubectl, ns, _job("as-deployer", {"serviceAccountName": "deployer"}), dry=True)).returncode != 0:
        assert time.monotonic() < deadline, r.stderr
        time.sleep(0.5)
    _create(kubectl, ns, _job("admins", ATTACKS[0][1]), who=None).check_returncode()
    kubectl("get", "mljob", "admins", "-n", ns, "--as", ALICE, check=True)
    r = kubectl("patch", "mljob", "admins", "-n", ns, "--as", ALICE, "--type=merge", "-p", '{"spec": {"targetInstances": 2}}')
    assert r.returncode == 0, r.stderr


def test_a_job_naming_more_objects_than_the_policy_can_check_is_refused(kubectl: Any, policy: str) -> None:
    """Each authorizer check costs a fixed share of a request's CEL budget, so the policy checks at most 16 objects
    per request; a job naming more is refused outright, even for an admin who may read them all (otherwise the
    17th would go unchecked). Repeats count once: 64 variables from 16 Secrets pass."""
    many = {"env": [{"name": f"V{i}", "valueFrom": {"secretKeyRef": {"name": f"s{i % 16}", "key": "k"}}} for i in range(64)]}
    r = _create(kubectl, policy, _job("sixteen", many), who=None, dry=True)
    assert r.returncode == 0, r.stderr
    many["env"].append({"name": "V64", "valueFrom": {"secretKeyRef": {"name": "s16", "key": "k"}}})
    r = _create(kubectl, policy, _job("seventeen", many), who=None, dry=True)
    assert r.returncode != 0 and "the admission policy checks at most 16 per request" in r.stderr, r.stdout + r.stderr


NODE_REACHING: list[tuple[str, dict[str, Any], str]] = [
    # Refused by the CRD itself, whoever applies it.
    ("host-path", {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "volumes must not be hostPath"),
    ("group-host-path", {"computePool": None, "instanceGroups": [
        {"name": "g1", "computePool": "no-such-pool", "instanceCount": 1,
         "volumes": [{"name": "root", "hostPath": {"path": "/etc"}}]}]}, "volumes must not be hostPath"),
    ("apparmor-unconfined", {"podAnnotations": {"container.apparmor.security.beta.kubernetes.io/runtime": "unconfined"}},
     "must not set AppArmor or seccomp profiles"),
    # Fields a pod has and the MLJob does not: strict field validation refuses them (never silently dropped).
    ("host-network", {"hostNetwork": True}, 'unknown field "spec.hostNetwork"'),
    ("privileged", {"securityContext": {"privileged": True}}, 'unknown field "spec.securityContext"'),
    ("capabilities", {"containerSecurityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
     'unknown field "spec.containerSecurityContext"'),
    # Refused by the chart's policy: a kind outside admissionPolicy.allowedVolumeTypes.
    ("nfs", {"volumes": [{"name": "share", "nfs": {"server": "10.0.0.1", "path": "/"}}]},
     "spec.volumes[share] is a nfs volume, a kind this cluster does not allow in MLJobs"),
    ("group-iscsi", {"computePool": None, "instanceGroups": [
        {"name": "g1", "computePool": "no-such-pool", "instanceCount": 1,
         "volumes": [{"name": "disk", "iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2001-04.com.example:x", "lun": 0}}]}]},
     "spec.instanceGroups[g1].volumes[disk] is a iscsi volume"),
]


def test_nothing_reaches_the_node(kubectl: Any, policy: str) -> None:
    for case, fields, message in NODE_REACHING:
        r = _create(kubectl, policy, _job(case, fields))
        assert r.returncode != 0 and message in r.stderr, f"{case}: alice's job was not refused ({message}):\n{r.stdout}{r.stderr}"
    # An allowed kind passes the same policy (the refusals above are not the policy refusing everything).
    r = _create(kubectl, policy, _job("scratch", {"volumes": [{"name": "scratch", "emptyDir": {}}]}), dry=True)
    assert r.returncode == 0, r.stderr


# Render-only checks (no cluster).

def test_the_chart_ships_the_policy_on_by_default(render: Any) -> None:
    objs = render()
    [pol] = [p for p in by_kind(objs, "ValidatingAdmissionPolicy") if p["metadata"]["name"] == "kp-kubepool-mljob-author"]
    [binding] = [b for b in by_kind(objs, "ValidatingAdmissionPolicyBinding") if b["spec"]["policyName"] == "kp-kubepool-mljob-author"]
    assert binding["spec"]["validationActions"] == ["Deny"] and "matchResources" not in binding["spec"]  # every namespace
    assert pol["spec"]["failurePolicy"] == "Fail"
    assert pol["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE"]
    off = render("--set", "admissionPolicy.enabled=false")
    assert not [p for p in by_kind(off, "ValidatingAdmissionPolicy") if p["metadata"]["name"].endswith("-mljob-author")]


def test_the_policys_volume_kinds_are_the_api_servers() -> None:
    """The template's list of volume kinds is every kind of the API server's Volume (k8stypes' vendored schema),
    so a kind cannot slip past the allow-list; the values schema offers every kind but hostPath (the CRD's)."""
    template = (CHART / "templates" / "admission-policy.yaml").read_text()
    [line] = [ln for ln in template.splitlines() if "$known := list" in ln]
    known = set(re.findall(r'"([A-Za-z]+)"', line))
    volume = json.loads(SCHEMAS.read_text())[CORE + "Volume"]["properties"]
    assert known == set(volume) - {"name"}
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["admissionPolicy"]["properties"]
    assert set(schema["allowedVolumeTypes"]["items"]["enum"]) == known - {"hostPath"}
