"""The SDK's side of a job's payload: the payload ConfigMap of a job (owned by its MLJob, so it goes with it).
The format itself (packing, unpacking, limits) is `kubepool.payload_format`, shared with the runtime."""

from __future__ import annotations

from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import ConfigMap

from kubepool import naming
from kubepool.payload_format import (
    MANIFEST_KEY,
    MAX_PAYLOAD_BYTES,
    Payload,
    PayloadFile,
    PayloadTooLarge,
    directory_payload,
    file_payload,
    pack,
    unpack,
)

__all__ = [
    "MANIFEST_KEY", "MAX_PAYLOAD_BYTES", "Payload", "PayloadFile", "PayloadTooLarge", "configmap",
    "directory_payload", "file_payload", "pack", "unpack",
]


def configmap(payload: Payload, job_name: str, namespace: str, owner_uid: str) -> ConfigMap:
    """The payload ConfigMap of `job_name`, owned by the MLJob with uid `owner_uid`."""
    return ConfigMap(
        metadata=ObjectMeta(
            name=naming.payload_configmap_name(job_name),
            namespace=namespace,
            labels={naming.LABEL_JOB: job_name, naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
            ownerReferences=[OwnerReference(
                apiVersion=naming.API_VERSION, kind=naming.MLJOB_KIND, name=job_name, uid=owner_uid,
                controller=True, blockOwnerDeletion=False,
            )],
        ),
        data=payload.data or None,
        binaryData=payload.binary_data or None,
    )
