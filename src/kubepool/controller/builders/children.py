"""Builds a job's shared children: the headless Service, the contract ConfigMap, the Ray token Secret,
the runtime's ServiceAccount/Role/RoleBinding and the NetworkPolicy. Pure."""

from __future__ import annotations

import base64

from kubepool import contract, naming
from kubepool.controller.builders.common import RAY_TOKEN_KEY, JobRef, Obj

_RAY_PORTS = {
    "gcs": naming.RAY_GCS_PORT, "client": naming.RAY_CLIENT_PORT, "dashboard": naming.RAY_DASHBOARD_PORT,
    "torch": naming.TORCH_MASTER_PORT, "shutdown": naming.SHUTDOWN_PORT,
}  # fmt: skip


def build_headless_service(ref: JobRef) -> Obj:
    """Gives each instance the DNS name `algo-N.<job>-svc`; not-ready pods are published so the head is
    resolvable while it is still starting."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": ref.metadata(naming.service_name(ref.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {naming.LABEL_JOB_UID: ref.uid},
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in _RAY_PORTS.items()],
        },
    }


def build_contract_configmap(ref: JobRef, doc: contract.JobContract) -> Obj:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": ref.metadata(naming.contract_configmap_name(ref.name)),
        "data": {contract.CONTRACT_FILENAME: doc.dumps()},
    }


def build_ray_token_secret(ref: JobRef, token: str) -> Obj:
    """The job's Ray token; created once (never re-applied) so it is stable across operator restarts."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": ref.metadata(naming.ray_token_secret_name(ref.name)),
        "data": {RAY_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def build_runtime_rbac(ref: JobRef) -> list[Obj]:
    """ServiceAccount, Role and RoleBinding of the runtime: read the namespace's pods, get and patch its own
    MLJob (and its status), nothing else."""
    name = naming.runtime_service_account_name(ref.name)
    own = [ref.name]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": ref.metadata(naming.runtime_role_name(ref.name)),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [naming.GROUP], "resources": [naming.MLJOB_PLURAL, f"{naming.MLJOB_PLURAL}/status"],
             "resourceNames": own, "verbs": ["get", "patch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": ref.metadata(naming.runtime_role_name(ref.name)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": naming.runtime_role_name(ref.name)},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": ref.metadata(name)}
    return [account, role, binding]


def build_network_policy(ref: JobRef) -> Obj:
    """Only the job's own pods may reach its pods (Ray's GCS, object manager and worker ports, torch's
    rendezvous): a Ray cluster is remote code execution for whoever can reach it."""
    own = {"matchLabels": {naming.LABEL_JOB_UID: ref.uid}}
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": ref.metadata(naming.network_policy_name(ref.name)),
        "spec": {"podSelector": own, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": own}]}]},
    }
