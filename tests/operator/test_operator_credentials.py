"""A channel's credentialsSecret is read only from a Secret that opts in (naming.LABEL_CREDENTIALS): a user who may
create MLJobs but not read Secrets cannot get a Secret's content into a job's environment. The real operator,
the real API server, and that user impersonated (`--as`)."""

from __future__ import annotations

import json
from typing import Any

from kubepool import naming
from support.operator_cluster import Operator, get_json, mljob, wait_for, wait_phase

USER = "mallory"
LABEL = f"{naming.LABEL_CREDENTIALS}={naming.CREDENTIALS_OPT_IN}"


def _job(name: str, pool: str, secret: str) -> dict[str, Any]:
    channel = {"name": "data", "source": {"s3": {"uri": "s3://bucket/data", "credentialsSecret": secret}}}
    return mljob(name, computePool=pool, entrypoint={"command": ["sleep", "600"]}, channels=[channel])


def _pods(kubectl: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={job}")["items"]
    return items


def test_only_secrets_that_opt_in_reach_a_job(kubectl: Any, namespace: str, operator: Operator, compute_pool: Any) -> None:
    ns, pool = namespace, compute_pool("cpu", max_nodes=2)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-password"},
              "stringData": {"AWS_ACCESS_KEY_ID": "admin", "AWS_SECRET_ACCESS_KEY": "not-for-mallory"}}
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(secret), check=True)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "submitter"},
            "rules": [{"apiGroups": [naming.GROUP], "resources": [naming.MLJOB_PLURAL], "verbs": ["create", "get", "list", "watch"]}]}
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(role), check=True)
    kubectl("create", "rolebinding", "submitter", "--role=submitter", f"--user={USER}", "-n", ns, check=True)
    assert kubectl("auth", "can-i", "get", "secrets", "-n", ns, "--as", USER).stdout.strip() == "no"
    assert kubectl("auth", "can-i", "create", "mljobs.kubepool.dev", "-n", ns, "--as", USER).stdout.strip() == "yes"

    # Without the owner's label: FAILED at once, before any pod, saying which Secret and which label.
    kubectl("create", "-n", ns, "--as", USER, "-f", "-", input=json.dumps(_job("steal", pool, "db-password")), check=True)
    st = wait_phase(kubectl, ns, "steal", {"FAILED", "RUNNING", "DONE"}, 60, operator)
    assert (st["phase"], st["reason"]) == ("FAILED", "CredentialsNotAllowed"), json.dumps(st, indent=1)
    assert "Secret db-password lacks the label " + LABEL in st["message"], st["message"]
    assert "credentialsSecret" in st["message"]
    assert not _pods(kubectl, ns, "steal"), "a pod of the refused job was created"
    events = get_json(kubectl, ns, "events", "--field-selector", "involvedObject.name=steal")["items"]
    assert any(e["reason"] == "CredentialsNotAllowed" and e["type"] == "Warning" and "db-password" in e["message"]
               and LABEL in e["message"] for e in events), [(e["reason"], e["message"]) for e in events]

    # A Secret that does not exist says so.
    kubectl("create", "-n", ns, "--as", USER, "-f", "-", input=json.dumps(_job("ghost", pool, "no-such-secret")), check=True)
    st = wait_phase(kubectl, ns, "ghost", {"FAILED", "RUNNING", "DONE"}, 60, operator)
    assert st["reason"] == "CredentialsNotAllowed" and "Secret no-such-secret does not exist" in st["message"], st

    # Once its owner labels it, the Secret reaches the job's pods (envFrom), as before.
    kubectl("label", "secret", "db-password", LABEL, "-n", ns, check=True)
    kubectl("create", "-n", ns, "-f", "-", input=json.dumps(_job("allowed", pool, "db-password")), check=True)
    [head] = wait_for(lambda: _pods(kubectl, ns, "allowed"), 60, "the allowed job's head pod")
    assert head["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "db-password"}}]
    assert get_json(kubectl, ns, "mljob", "allowed")["status"].get("reason") != "CredentialsNotAllowed"
    kubectl("delete", "mljob", "allowed", "-n", ns, "--wait=false")
