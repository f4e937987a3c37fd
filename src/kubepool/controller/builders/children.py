"""Builds a job's shared children: the headless Service and its EndpointSlice, the Secret of its contract and
Ray token, the runtime's ServiceAccount/Role/RoleBinding (per job, or per namespace) and the NetworkPolicy.
Pure."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Sequence

from kubepool import contract, naming
from kubepool.controller.builders.common import RAY_TOKEN_KEY, JobRef, Obj
from kubepool.controller.observed import PodView

_RAY_PORTS = {
    "gcs": naming.RAY_GCS_PORT, "client": naming.RAY_CLIENT_PORT, "dashboard": naming.RAY_DASHBOARD_PORT,
    "torch": naming.TORCH_MASTER_PORT, "shutdown": naming.SHUTDOWN_PORT,
}  # fmt: skip


def build_headless_service(ref: JobRef) -> Obj:
    """Gives each instance the DNS name `algo-N.<job>-svc`. No selector: the operator writes its EndpointSlice
    (build_endpoint_slice) once per change of the job's addresses, where the endpoint controllers, following
    every pod update, rewrote Endpoints and EndpointSlice ~7 times per 4-instance job."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": ref.metadata(naming.service_name(ref.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in _RAY_PORTS.items()],
        },
    }


def build_endpoint_slice(ref: JobRef, pods: Sequence[PodView]) -> Obj | None:
    """The headless Service's endpoints: every live pod of the job with an address, ready or not (the head must
    resolve while it starts, as publishNotReadyAddresses would give), with its hostname so cluster DNS answers
    `algo-N.<job>-svc`. None while no pod has an address the API accepts in a slice (the local cluster's process
    nodes give loopback addresses, which it rejects; their /etc/hosts is written from the pods instead). Sorted,
    so equal inputs give equal slices."""
    live = sorted((p for p in pods if p.ip and _routable(p.ip) and not p.deleting and not p.terminated
                   and p.job_uid == ref.uid), key=lambda p: (p.instance_id, p.name))
    if not live:
        return None
    svc = naming.service_name(ref.name)
    endpoints = []
    for p in live:
        ep: Obj = {"addresses": [p.ip], "conditions": {"ready": True, "serving": True, "terminating": False},
                   "targetRef": {"kind": "Pod", "namespace": ref.namespace, "name": p.name, "uid": p.uid}}
        if p.hostname and p.subdomain == svc:
            ep["hostname"] = p.hostname
        if p.node:
            ep["nodeName"] = p.node
        endpoints.append(ep)
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": ref.metadata(naming.endpoint_slice_name(ref.name), **{
            naming.LABEL_SERVICE_NAME: svc, naming.LABEL_SLICE_MANAGED_BY: naming.SLICE_MANAGER}),
        "addressType": "IPv6" if ":" in (live[0].ip or "") else "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in _RAY_PORTS.items()],
    }


def _routable(ip: str) -> bool:
    """What EndpointSlice validation accepts: no loopback, link-local or unspecified address."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return not (addr.is_loopback or addr.is_link_local or addr.is_unspecified)


def build_job_secret(ref: JobRef, doc: contract.JobContract, token: str | None) -> Obj:
    """The job's contract and, with Ray token auth, its Ray token: one Secret, one create per job. The pods mount
    the contract's key alone as a file; the token reaches them as a variable. A later contract (a new attempt, a
    resize) goes in by `contract_patch`, which leaves the token as created: stable across operator restarts. A
    Secret, not a ConfigMap: the token must stay as private as a Secret; the contract is no less private."""
    data = {contract.CONTRACT_FILENAME: _b64(doc.dumps())}
    if token is not None:
        data[RAY_TOKEN_KEY] = _b64(token)
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": ref.metadata(naming.job_secret_name(ref.name)),
        "data": data,
    }


def contract_patch(ref: JobRef, doc: contract.JobContract) -> list[Obj]:
    """A JSON patch that writes the contract into the job's Secret only while the job owns it (its first owner
    is the job's uid): a Secret of that name that is another's (deleted and replaced since) is never written."""
    return [{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": ref.uid},
            {"op": "add", "path": f"/data/{contract.CONTRACT_FILENAME}", "value": _b64(doc.dumps())}]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# What the runtime does with the API: scale_cluster reads its MLJob and patches its spec. Nothing else.
RUNTIME_VERBS = ["get", "patch"]


def build_runtime_rbac(ref: JobRef) -> list[Obj]:
    """ServiceAccount, Role and RoleBinding of the runtime: get and patch its own MLJob, nothing else."""
    name = naming.runtime_service_account_name(ref.name)
    own = [ref.name]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": ref.metadata(naming.runtime_role_name(ref.name)),
        "rules": [{"apiGroups": [naming.GROUP], "resources": [naming.MLJOB_PLURAL], "resourceNames": own,
                   "verbs": RUNTIME_VERBS}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": ref.metadata(naming.runtime_role_name(ref.name)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": naming.runtime_role_name(ref.name)},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": ref.metadata(name)}
    return [account, role, binding]


def build_namespace_runtime_rbac(namespace: str) -> list[Obj]:
    """ServiceAccount, Role and RoleBinding (naming.RUNTIME_ACCOUNT) shared by every job of a namespace: get and
    patch its MLJobs (scale_cluster); the chart's ValidatingAdmissionPolicy narrows the patches to the pod's own
    job. No owner: they outlive any one job."""
    meta = {"name": naming.RUNTIME_ACCOUNT, "namespace": namespace,
            "labels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
        "rules": [{"apiGroups": [naming.GROUP], "resources": [naming.MLJOB_PLURAL], "verbs": RUNTIME_VERBS}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": naming.RUNTIME_ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": naming.RUNTIME_ACCOUNT, "namespace": namespace}],
    }
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}, role, binding]


def build_network_policy(ref: JobRef) -> Obj:
    """Only the job's own pods may reach its pods (Ray's GCS, object manager and worker ports, torch's
    rendezvous): a Ray cluster is remote code execution for whoever can reach it."""
    own = {"matchLabels": {naming.LABEL_JOB_UID: ref.uid}}
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": ref.metadata(naming.network_policy_name(ref.name)),
        "spec": {"podSelector": own, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": own}]}]},
    }
