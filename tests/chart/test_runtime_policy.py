"""The chart's runtime policy (templates/runtime-policy.yaml) on the real API server, without an operator: the
namespace's shared runtime account (the operator's own Role builder) may patch an MLJob only with a token bound
to a pod the job's status lists by uid. A pod of job `a-b` (named `a-b-...`, which starts with `a-`) may not
patch job `a`; each pod may patch its own job; the runtime cannot write the status that lists the uids.

The policy is applied as rendered, its binding limited to the test's namespace (policies are cluster-wide)."""

from __future__ import annotations

import json
import ssl
import time
from typing import Any

import httpx
from chartlib import by_kind

from kubepool import naming
from kubepool.controller.builders.children import build_namespace_runtime_rbac

POLICY_READY_S = 60
MESSAGE = "only the MLJob of its own pod"


def _pod(name: str) -> dict[str, Any]:
    """A pod that never runs (no node matches) but exists, so a token can be bound to it."""
    sc = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
          "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"serviceAccountName": naming.RUNTIME_ACCOUNT, "nodeSelector": {"kubepool.dev/no-such-node": "x"},
                     "containers": [{"name": "c", "image": "none", "securityContext": sc}]}}


def _job(name: str) -> dict[str, Any]:
    return {"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND, "metadata": {"name": name},
            "spec": {"computePool": "no-such-pool", "entrypoint": {"command": ["true"]}}}


def test_a_pods_token_patches_only_the_job_that_lists_its_uid(kubectl: Any, cluster: Any, crds: None,
                                                              namespace: str, render: Any) -> None:
    ns = namespace
    objs = render("--show-only", "templates/runtime-policy.yaml")
    [policy], [binding] = by_kind(objs, "ValidatingAdmissionPolicy"), by_kind(objs, "ValidatingAdmissionPolicyBinding")
    name = f"{ns}-own-job"
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
    try:
        for obj in (policy, binding, *build_namespace_runtime_rbac(ns)):
            kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj), check=True)
        uids = {}
        for job, pod in (("a", "a-g-0"), ("a-b", "a-b-g-0")):
            kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(_job(job)), check=True)
            kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(_pod(pod)), check=True)
            uids[pod] = kubectl.json("get", "pod", pod, "-n", ns)["metadata"]["uid"]
            # What the operator writes once it sees the pod (jobpass.instances_of).
            status = {"status": {"instances": [{"instanceId": 0, "group": "g", "rankInGroup": 0, "host": "algo-1",
                                                "pod": pod, "podUid": uids[pod]}]}}
            kubectl("patch", "mljob", job, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status),
                    check=True)

        def client(pod: str) -> httpx.Client:
            token = kubectl("create", "token", naming.RUNTIME_ACCOUNT, "-n", ns, "--duration=10m", "--bound-object-kind=Pod",
                            f"--bound-object-name={pod}", f"--bound-object-uid={uids[pod]}", check=True).stdout.strip()
            tls = ssl.create_default_context(cafile=str(cluster.layout.pki.ca_cert))
            return httpx.Client(base_url=cluster.layout.apiserver_url, verify=tls,
                                headers={"Authorization": f"Bearer {token}"}, timeout=10)

        def patch(c: httpx.Client, job: str, sub: str = "") -> httpx.Response:
            return c.patch(f"/apis/{naming.API_VERSION}/namespaces/{ns}/mljobs/{job}{sub}", params={"dryRun": "All"},
                           json={"metadata": {"labels": {"touched": "yes"}}},
                           headers={"Content-Type": "application/merge-patch+json"})

        of_a, of_ab = client("a-g-0"), client("a-b-g-0")
        # The policy is in force once it refuses what any version of it refuses (a pod of `a` on job `a-b`).
        deadline = time.monotonic() + POLICY_READY_S
        while (r := patch(of_a, "a-b")).status_code != 422:
            assert time.monotonic() < deadline, f"the policy never refused a foreign job's patch: {r.status_code} {r.text}"
            time.sleep(0.5)
        assert MESSAGE in r.text, r.text

        foreign = patch(of_ab, "a")
        assert foreign.status_code == 422 and MESSAGE in foreign.text, f"a pod of job a-b patched job a: {foreign.text}"
        for c, job in ((of_ab, "a-b"), (of_a, "a")):
            own = patch(c, job)
            assert own.status_code == 200, own.text
        # The uids the policy trusts are out of the runtime's reach: it may not write any job's status.
        assert patch(of_ab, "a", "/status").status_code == 403
        assert patch(of_ab, "a-b", "/status").status_code == 403
    finally:
        kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found")
