"""PURE builders of every object the operator creates for a job: plain dicts ready for the API.
No I/O, no clock, no environment: configuration, randomness and time are passed in."""

from kubepool.controller.builders.children import (
    build_endpoint_slice,
    build_headless_service,
    build_job_secret,
    build_namespace_runtime_rbac,
    build_network_policy,
    build_runtime_rbac,
    contract_patch,
)
from kubepool.controller.builders.common import JobRef, Obj, Placement, placement_of
from kubepool.controller.builders.jobcontract import build_job_contract
from kubepool.controller.builders.pods import build_instance_pod, build_instance_pods

__all__ = [
    "JobRef", "Obj", "Placement", "build_endpoint_slice", "build_headless_service",
    "build_instance_pod", "build_instance_pods", "build_job_contract", "build_job_secret",
    "build_namespace_runtime_rbac", "build_network_policy",
    "build_runtime_rbac", "contract_patch", "placement_of",
]
