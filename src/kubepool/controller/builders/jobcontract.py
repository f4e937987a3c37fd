"""Builds the runtime contract (`kubepool.contract.JobContract`) of one job attempt from its spec and
pools: one `contract.JobContract(...)`. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from kubepool import contract, naming
from kubepool.api import Channel as ApiChannel
from kubepool.api import ComputePool, MLJob
from kubepool.api.mljob import OutputLocation, S3Source
from kubepool.controller.builders.common import JobRef, Placement, laid_out, parse_quantity, pool_named
from kubepool.controller.builders.layout import instance_ids

CHANNELS_DIR = "/opt/kubepool/channels"  # PVC and ConfigMap channels are mounted at CHANNELS_DIR/<name>


def channel_mount_path(name: str) -> str:
    return f"{CHANNELS_DIR}/{name}"


def _channel(ch: ApiChannel) -> contract.Channel:
    src = ch.source
    if src.s3 is not None:
        source = contract.ChannelSource(s3_uri=src.s3.uri, s3_endpoint_url=src.s3.endpoint_url)
    else:
        source = contract.ChannelSource(local_path=channel_mount_path(ch.name))
    return contract.Channel(
        name=ch.name, distribution=ch.distribution, source=source,
        instance_groups=list(ch.instance_groups or []), content_type=ch.content_type, input_mode=ch.input_mode,
    )


def output_target(out: OutputLocation | None) -> contract.OutputTarget | None:
    """spec.output as the runtime reads it: an S3 prefix, or the PVC mounted at OUTPUT_MOUNT (its subPath applied
    by the mount); `location` names it for users."""
    if out is None:
        return None
    if out.s3 is not None:
        return contract.OutputTarget(location=out.s3.uri, s3_uri=out.s3.uri, s3_endpoint_url=out.s3.endpoint_url)
    assert out.persistent_volume_claim is not None  # the CRD requires exactly one
    pvc = out.persistent_volume_claim
    return contract.OutputTarget(location=f"pvc://{pvc.claim_name}" + (f"/{pvc.sub_path}" if pvc.sub_path else ""),
                                 local_path=contract.OUTPUT_MOUNT)


def results_store(job: MLJob, store: S3Source | None) -> tuple[contract.OutputTarget | None, str | None]:
    """Where the head keeps a result too large for its MLJob when the job has no spec.output: the operator's results
    store, under a prefix of the job's namespace (jobs of one name in two namespaces never share an object), and the
    name of its credentials Secret in the job's namespace; a job's own spec.output always wins."""
    if store is None or job.spec.output is not None:
        return None, None
    uri = f"{store.uri.rstrip('/')}/{JobRef.of(job).namespace}"
    return contract.OutputTarget(location=uri, s3_uri=uri, s3_endpoint_url=store.endpoint_url), store.credentials_secret


def _groups(job: MLJob, pools: dict[str, ComputePool], layout: Sequence[Placement]) -> list[contract.Group]:
    counts: dict[str, tuple[str, int]] = {}
    for p in layout:
        pool, n = counts.get(p.group, (p.pool, 0))
        counts[p.group] = (pool, n + 1)
    declared = {g.name: g.instance_type for g in job.spec.instance_groups or ()}
    out = []
    for group, (pool_name, count) in counts.items():
        spec = pool_named(pools, pool_name).spec
        size = spec.instance_size()
        # What SageMaker scripts read as the instance type: the job's SageMaker type, else the pool's family.
        kind = declared.get(group) or job.spec.instance_type or str(spec.instance_family or "custom")
        out.append(contract.Group(
            name=group, instance_type=kind, count=count,
            cpus=float(parse_quantity(size.cpu)), memory_bytes=int(parse_quantity(size.memory)), gpus=size.gpus,
        ))
    return out


def build_job_contract(job: MLJob, pools: dict[str, ComputePool], *, attempt: int = 0,
                       port_shift: int = 0, admitted_at: datetime | None = None,
                       store: S3Source | None = None,
                       layout: Sequence[Placement] | None = None) -> contract.JobContract:
    """The contract of `attempt`: instance pods carry that attempt's names. `port_shift` moves the head's
    Ray ports (local clusters, see `local_port_shift`); `admitted_at` starts the head's instances timeout;
    `store` is the operator's results store (`results_store`); `layout`: the pass's (`laid_out`).

    Raises:
        ValueError: a pool of the job is not in `pools`.
    """
    ref, spec = JobRef.of(job), job.spec
    ep = spec.entrypoint
    groups = _groups(job, pools, laid_out(job, layout))
    store_target, store_secret = results_store(job, store)
    return contract.JobContract(
        job_name=ref.name,
        namespace=ref.namespace,
        job_uid=ref.uid,
        groups=groups,
        instances=contract.build_instances(ref.name, groups, instance_ids(job), attempt),
        target_instances=spec.resolved_target(),
        min_instances=spec.resolved_min(),
        instances_timeout_seconds=spec.instances_timeout_seconds,
        admitted_at=admitted_at.timestamp() if admitted_at is not None else None,
        channels=[_channel(c) for c in spec.channels or []],
        hyperparameters=spec.hyper_parameters,
        entrypoint=contract.Entrypoint(
            path=ep.file, module=ep.module, command=ep.command, args=list(spec.args),
            working_dir=spec.working_dir, function=ep.function,
        ),
        mode=spec.mode,
        pip_requirements=list(spec.pip_requirements),
        output=output_target(spec.output),
        checkpoint_s3=contract.OutputTarget(location=spec.checkpoint.s3.uri, s3_uri=spec.checkpoint.s3.uri,
                                            s3_endpoint_url=spec.checkpoint.s3.endpoint_url)
        if spec.checkpoint is not None and spec.checkpoint.s3 is not None else None,
        results_store=store_target,
        results_store_secret=store_secret,
        distribution_instance_groups=list(spec.distribution_instance_groups or []),
        ray=contract.RaySettings(auth_mode=spec.ray.auth_mode, dashboard=spec.ray.dashboard,
                                 gcs_port=naming.RAY_GCS_PORT + port_shift,
                                 dashboard_port=naming.RAY_DASHBOARD_PORT + port_shift,
                                 client_port=naming.RAY_CLIENT_PORT + port_shift),
    )
