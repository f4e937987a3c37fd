"""Helpers shared by the chart tests (paths, running helm); the fixtures are in conftest.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubepool"
EXAMPLES = REPO / "examples"
# `helm template` has no cluster to ask; the chart's kubeVersion needs one that satisfies it.
KUBE_VERSION = "1.36.0"
RELEASE, NAMESPACE = "kp", "kubepool-system"


# What the operator's code uses, (apiGroup, resource) -> verbs, with the chart's defaults (no KubeRay, no kopf
# peering). The chart must grant exactly this (test_chart_render), and the API server must find exactly this for
# the chart's ServiceAccount (test_operator_rights). Children go with their job through owner references: the
# garbage collector deletes them, not the operator.
OPERATOR_RIGHTS: dict[tuple[str, str], set[str]] = {
    # kopf lists and watches jobs; delete: ttlSecondsAfterFinished; get and patch: granted on to the runtime's
    # Role (RBAC lets the operator grant only what it holds).
    ("kubepool.dev", "mljobs"): {"get", "list", "watch", "patch", "delete"},
    ("kubepool.dev", "mljobs/status"): {"patch"},  # statuswriter
    ("kubepool.dev", "computepools"): {"list", "watch"},  # kopf: watch (only the status is written)
    ("kubepool.dev", "computepools/status"): {"patch"},
    ("", "pods"): {"list", "watch", "create", "delete"},  # instances and placeholders, one by one
    # the headless Service, created if absent; watched (a deleted one comes back) and read after a 409 (owner)
    ("", "services"): {"get", "list", "watch", "create"},
    ("", "serviceaccounts"): {"create", "patch"},  # the runtime's account, server-side applied
    # a job's contract and Ray token (created if absent, the contract patched while the job owns it); a
    # credentialsSecret's labels (metadata only)
    ("", "secrets"): {"get", "create", "patch"},
    ("", "persistentvolumeclaims"): {"get"},  # access modes of an output/checkpoint claim (jobsteps.refused_volumes)
    ("rbac.authorization.k8s.io", "roles"): {"create", "patch"},  # the runtime's, server-side applied
    ("rbac.authorization.k8s.io", "rolebindings"): {"create", "patch"},
    ("discovery.k8s.io", "endpointslices"): {"create", "patch"},  # applied; never read, deleted by GC
    ("networking.k8s.io", "networkpolicies"): {"get", "list", "watch", "create"},  # as the Service
    ("", "events"): {"create"},  # the operator posts Events (kopf too, about its handlers)
    ("", "nodes"): {"list", "watch"},  # kopf index: the pools' ready nodes
    ("scheduling.k8s.io", "priorityclasses"): {"create"},  # the placeholders' (warm capacity), if absent
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},  # kopf scans; crd_exists
    ("", "namespaces"): {"list", "watch"},  # kopf follows the watched namespaces
}

# With operator.leaderElection, in the release namespace only: the Lease (controller/leader.py).
LEASE_RIGHTS: dict[tuple[str, str], set[str]] = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}


# Namespaced rights the chart grants cluster-wide even to an operator that watches listed namespaces: Events of
# cluster-scoped ComputePools land in `default` (templates/_rbac.tpl).
EVERYWHERE: dict[tuple[str, str], set[str]] = {("", "events"): {"create"}}
CLUSTER_SCOPED = {("kubepool.dev", "computepools"), ("kubepool.dev", "computepools/status"), ("", "nodes"), ("", "namespaces"),
                  ("scheduling.k8s.io", "priorityclasses"), ("apiextensions.k8s.io", "customresourcedefinitions")}
# What every authenticated account may do (system:basic-user and friends), whatever the chart grants.
_BUILT_IN = {("authorization.k8s.io", "selfsubjectaccessreviews"), ("authorization.k8s.io", "selfsubjectrulesreviews"),
             ("authentication.k8s.io", "selfsubjectreviews")}


def rights_of(kubectl: Any, who: str, namespace: str) -> dict[tuple[str, str], set[str]]:
    """`who`'s rights in `namespace` as the API server finds them: a SelfSubjectRulesReview made as `who`."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": namespace}}
    out = json.loads(kubectl("create", "--as", who, "-f", "-", "-o", "json", input=json.dumps(review), check=True).stdout)
    assert not out["status"].get("incomplete"), out["status"]
    rights: dict[tuple[str, str], set[str]] = {}
    for rule in out["status"]["resourceRules"]:
        assert not rule.get("resourceNames"), rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                if (group, resource) not in _BUILT_IN:
                    rights.setdefault((group, resource), set()).update(rule["verbs"])
    return rights


def run_helm(helm: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=timeout)


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def is_sagemaker_api(obj: dict[str, Any]) -> bool:
    """One of the SageMaker API server's objects (templates/sagemaker-api.yaml), by its component label."""
    return (obj.get("metadata", {}).get("labels") or {}).get("app.kubernetes.io/component") == "sagemaker-api"
