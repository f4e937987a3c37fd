"""What an instance pod needs for the job's pipRequirements: a job-private pip prefix (an emptyDir), the wheelhouse
volume, and the variables pip reads (index, extra indexes, find-links, no-index) from the job's pipOptions, else
the operator's configuration. The runtime installs (kubepool.runtime.pip); nothing here when there is nothing to
install. Pure."""

from __future__ import annotations

from typing import Any

from kubepool import contract
from kubepool.api import MLJob
from kubepool.controller.config import OperatorConfig

Obj = dict[str, Any]


def pip_volumes(job: MLJob) -> tuple[list[Obj], list[Obj]]:
    spec = job.spec
    if not spec.pip_requirements:
        return [], []
    volumes: list[Obj] = [{"name": "pip", "emptyDir": {}}]
    mounts: list[Obj] = [{"name": "pip", "mountPath": contract.PIP_DIR}]
    house = spec.pip_options.wheelhouse if spec.pip_options else None
    if house is not None and house.persistent_volume_claim is not None:
        pvc = house.persistent_volume_claim
        volumes.append({"name": "wheelhouse", "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": True}})
        mounts.append({"name": "wheelhouse", "mountPath": contract.WHEELHOUSE_DIR, "readOnly": True,
                       **({"subPath": pvc.sub_path} if pvc.sub_path else {})})
    elif house is not None and house.config_map is not None:
        volumes.append({"name": "wheelhouse", "configMap": {"name": house.config_map.name}})
        mounts.append({"name": "wheelhouse", "mountPath": contract.WHEELHOUSE_DIR, "readOnly": True})
    return volumes, mounts


def pip_env(job: MLJob, cfg: OperatorConfig) -> list[Obj]:
    """pip's own environment variables; the job's pipOptions win over the operator's defaults."""
    spec = job.spec
    if not spec.pip_requirements:
        return []
    opts = spec.pip_options
    index = (opts.index_url if opts else None) or cfg.pip_index_url
    extra = " ".join(opts.extra_index_urls) if opts and opts.extra_index_urls else cfg.pip_extra_index_urls
    env: list[Obj] = []
    if index:
        env.append({"name": "PIP_INDEX_URL", "value": index})
    if extra:
        env.append({"name": "PIP_EXTRA_INDEX_URL", "value": extra})
    if opts is not None and opts.wheelhouse is not None:
        env.append({"name": "PIP_FIND_LINKS", "value": contract.WHEELHOUSE_DIR})
        if not opts.index_url:  # air-gapped: the wheelhouse is the only source
            env.append({"name": "PIP_NO_INDEX", "value": "1"})
    return env
