"""The plumbing every submission shares (the Snowflake-style functions, stored payloads, the SageMaker
Estimator): the cluster connection, the checks made before anything is created (arguments, pool), Snowflake's
`imports`, and creating a job with its payload ConfigMap owned by it (so deleting the job deletes its code; until
the ConfigMap exists the job's pods wait to mount it)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubepool import api
from kubepool.jobs.job import MLJob
from kubepool.jobs.options import Import, import_files
from kubepool.jobs.payload import PayloadFile, configmap, pack
from kubepool.kube.errors import Forbidden, KubeError, NotFound
from kubepool.kube.sync import Kube

log = logging.getLogger(__name__)

class PoolNotFound(ValueError):
    """The compute pool named by a submission does not exist."""


def warn_unknown(kwargs: Mapping[str, Any]) -> None:
    """Warn about arguments no Snowflake function takes either (Snowflake also only warns about those); every
    Snowflake option is handled before (`options.take_snowflake_options`): honoured or refused."""
    if kwargs:
        log.warning("ignoring unknown kwargs: %s", ", ".join(kwargs))


def imports_of(imports: Sequence[Import] | None, rest: dict[str, Any]) -> Sequence[Import] | None:
    """`imports`, or those `additional_payloads` gave (left in `rest` by take_snowflake_options).

    Raises:
        ValueError: Both given.
    """
    extra = rest.pop("imports", None)
    if extra is not None and imports is not None:
        raise ValueError("give imports or additional_payloads (its deprecated name), not both")
    return imports if imports is not None else extra


def annotate(job: api.MLJob, annotations: Mapping[str, str]) -> None:
    """Add Snowflake's `comment`/`stage_name` (take_snowflake_options) to the job's annotations."""
    if annotations:
        job.metadata["annotations"] = {**(job.metadata.get("annotations") or {}), **annotations}


def check_pool(kube: Kube, compute_pool: str, min_instances: int) -> None:
    """Fail early when the pool is missing or can never hold `min_instances` (Snowflake checks `max_nodes`).

    Raises:
        PoolNotFound: No such ComputePool.
        ValueError: `min_instances` exceeds the pool's `maxNodes`.
    """
    try:
        pool = kube.get_pool(compute_pool)
    except NotFound:
        raise PoolNotFound(
            f"compute pool {compute_pool!r} does not exist; `kubepool pools` lists the pools "
            "(an admin creates one as a ComputePool resource)"
        ) from None
    except Forbidden:
        log.debug("cannot read ComputePool %s; the operator will check it", compute_pool)
        return
    if min_instances > pool.spec.max_nodes:
        raise ValueError(
            f"min_instances ({min_instances}) exceeds the max_nodes ({pool.spec.max_nodes}) of compute pool "
            f"{compute_pool!r}: the job could never start"
        )


def pool_needs(spec: api.MLJobSpec) -> dict[str, int]:
    """Instances each compute pool must be able to hold for the job to start."""
    if spec.compute_pool:
        return {spec.compute_pool: spec.resolved_min()}
    needs: dict[str, int] = {}
    for g in spec.instance_groups or ():
        needs[g.compute_pool] = needs.get(g.compute_pool, 0) + g.instance_count
    return {pool: min(n, spec.resolved_min()) for pool, n in needs.items()}


def pool_image(kube: Kube, compute_pool: str) -> str | None:
    """The compute pool's own image (spec.image), if it names one."""
    try:
        return kube.get_pool(compute_pool).spec.image
    except NotFound:
        raise PoolNotFound(f"compute pool {compute_pool!r} does not exist") from None


def with_imports(files: list[PayloadFile], imports: Sequence[Import] | None) -> list[PayloadFile]:
    """The payload plus Snowflake's `imports`; an import may not replace a payload file."""
    extra = import_files(imports)
    clash = sorted({f.path for f in files} & {f.path for f in extra})
    if clash:
        raise ValueError(f"imports would replace files of the payload: {', '.join(clash)}")
    return [*files, *extra]


def submit(kube: Kube, job: api.MLJob, files: Sequence[PayloadFile]) -> MLJob:
    """Create `job` and its payload ConfigMap (the shared last step of every submission).

    Args:
        kube: Connection to the cluster.
        job: The MLJob object (from `spec.build_mljob`).
        files: The payload; empty when the code is in the image.

    Returns:
        The handle of the created job.
    """
    payload = pack(files) if files else None  # PayloadTooLarge before any API call
    for pool, need in pool_needs(job.spec).items():
        check_pool(kube, pool, need)
    name, namespace = job.metadata["name"], job.metadata["namespace"]
    created = kube.create_job(job, namespace)
    if payload is not None:
        try:
            kube.create_configmap(configmap(payload, name, namespace, created.metadata["uid"]), namespace)
        except KubeError:
            kube.delete_job(name, namespace)  # a job without its code could only fail
            raise
    return MLJob(name, namespace, kube=kube)


def connect(namespace: str | None = None, *, session: Any = None, kubeconfig: str | Path | None = None,
            context: str | None = None) -> Kube:
    """A session: the connection to one cluster that SDK calls take as `session=` (Snowflake's argument name).

    Args:
        namespace: Default namespace of the session's calls; default the kubeconfig context's.
        session: An existing session, returned as it is. Anything else (a Snowpark Session) is not one: a new
            connection is made from the kubeconfig.
        kubeconfig: The kubeconfig file (kubectl's `--kubeconfig`); default `KUBECONFIG`, in-cluster or
            `~/.kube/config`.
        context: The kubeconfig context (kubectl's `--context`); default its current context.

    Raises:
        kubepool.kube.errors.Unreachable: No such kubeconfig or context.
    """
    if isinstance(session, Kube):
        return session
    if session is not None:
        log.info("session %r is not a kubepool session (kubepool.jobs.connect): using the kubeconfig", type(session).__name__)
    return Kube(namespace, kubeconfig=kubeconfig, context=context)
