"""The rights the API server finds for the chart's ServiceAccount are exactly what the operator's code uses
(chartlib.OPERATOR_RIGHTS): the chart's RBAC applied to the real API server, read back with a
SelfSubjectRulesReview made as that ServiceAccount (impersonation). Cluster-wide and namespaced modes."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, LEASE_RIGHTS, OPERATOR_RIGHTS, run_helm

# What every authenticated account may do (system:basic-user and friends), whatever the chart grants.
_BUILT_IN = {("authorization.k8s.io", "selfsubjectaccessreviews"), ("authorization.k8s.io", "selfsubjectrulesreviews"),
             ("authentication.k8s.io", "selfsubjectreviews")}


def _rights(kubectl: Any, who: str, namespace: str) -> dict[tuple[str, str], set[str]]:
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


@pytest.mark.parametrize(("namespaced", "leader"), [(False, False), (True, False), (False, True)],
                         ids=["cluster-wide", "namespaced", "leader-election"])
def test_the_charts_account_holds_exactly_the_rights_the_code_uses(kubectl: Any, helm: str, namespace: str,
                                                                    namespaced: bool, leader: bool) -> None:
    release = f"rights-{uuid.uuid4().hex[:6]}"
    args = ["--set", f"operator.watchNamespaces={{{namespace}}}"] + (["--set", "rbac.namespaced=true"] if namespaced else [])
    args += ["--set", "replicas=2"] if leader else ["--set", "operator.leaderElection=false"]
    proc = run_helm(helm, "template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION,
                    "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml", *args)
    assert proc.returncode == 0, proc.stderr
    objs = [o for o in yaml.safe_load_all(proc.stdout) if o]
    who = f"system:serviceaccount:{namespace}:{release}-kubepool"
    cluster_wide = [o for o in objs if o["kind"].startswith("Cluster")]
    try:
        for o in objs:
            kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(o), check=True)
        assert _rights(kubectl, who, namespace) == (OPERATOR_RIGHTS | LEASE_RIGHTS if leader else OPERATOR_RIGHTS)
    finally:
        for o in cluster_wide:
            kubectl("delete", o["kind"], o["metadata"]["name"], "--ignore-not-found")
