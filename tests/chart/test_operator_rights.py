"""The rights the API server finds for the chart's ServiceAccount are exactly what the operator's code uses
(chartlib.OPERATOR_RIGHTS): the chart's RBAC applied to the real API server, read back with a
SelfSubjectRulesReview made as that ServiceAccount (impersonation). Every namespace, listed namespaces (with and
without rbac.namespaced), leader election."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import yaml
from chartlib import (
    CHART,
    CLUSTER_SCOPED,
    EVERYWHERE,
    KUBE_VERSION,
    LEASE_RIGHTS,
    OPERATOR_RIGHTS,
    rights_of,
    run_helm,
)

pytestmark = pytest.mark.api  # the API server alone: no operator, no pod runs (make test-fast)


@pytest.mark.parametrize(("watch", "namespaced", "leader"), [(False, False, False), (True, False, False), (True, True, False),
                                                             (False, False, True)],
                         ids=["all-namespaces", "watched-namespaces", "rbac-namespaced", "leader-election"])
def test_the_charts_account_holds_exactly_the_rights_the_code_uses(kubectl: Any, helm: str, namespace: str, watch: bool,
                                                                    namespaced: bool, leader: bool) -> None:
    """Exactly the code's rights in a namespace it handles; and where it lists the namespaces it watches (with
    or without rbac.namespaced), nothing namespaced in any other, Events excepted: no Secrets, no pods."""
    release = f"rights-{uuid.uuid4().hex[:6]}"
    args = (["--set", f"operator.watchNamespaces={{{namespace}}}"] if watch else []) + (["--set", "rbac.namespaced=true"] if namespaced else [])
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
        assert rights_of(kubectl, who, namespace) == (OPERATOR_RIGHTS | LEASE_RIGHTS if leader else OPERATOR_RIGHTS)
        elsewhere = rights_of(kubectl, who, "default")
        if watch:
            assert elsewhere == {k: v for k, v in OPERATOR_RIGHTS.items() if k in CLUSTER_SCOPED} | EVERYWHERE
        else:  # told to watch every namespace, it must hold its rights in every one (docs/security.md)
            assert elsewhere == OPERATOR_RIGHTS
    finally:
        for o in cluster_wide:
            kubectl("delete", o["kind"], o["metadata"]["name"], "--ignore-not-found")
