"""Submitting and managing jobs: `submit_file`, `submit_directory`, `get_job`, `list_jobs`, `delete_job`
(Snowflake's `snowflake.ml.jobs` manager functions), on MLJob resources.

Submission checks everything it can before touching the cluster (instance counts, name, payload size), then
the compute pool, then creates the MLJob and its payload (`submission`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubepool import api, naming
from kubepool.api import Entrypoint
from kubepool.contract import RunMode
from kubepool.jobs.definitions import script_args
from kubepool.jobs.job import JobNotFound, MLJob, parse_job_id, status_of
from kubepool.jobs.options import Import, resolve_image, take_snowflake_options
from kubepool.jobs.payload import PayloadFile, directory_payload, file_payload
from kubepool.jobs.spec import build_mljob, check_instances, generate_name
from kubepool.jobs.submission import (
    annotate,
    connect,
    imports_of,
    pool_image,
    submit,
    warn_unknown,
    with_imports,
)
from kubepool.kube.errors import NotFound
from kubepool.kube.sync import Kube

log = logging.getLogger(__name__)


def submit_file(
    file_path: str | Path,
    compute_pool: str,
    *,
    args: Sequence[Any] | None = None,
    target_instances: int = 1,
    min_instances: int | None = None,
    env_vars: Mapping[str, Any] | None = None,
    pip_requirements: Sequence[str] | None = None,
    name: str | None = None,
    namespace: str | None = None,
    instances_timeout: int = naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS,
    image: str | None = None,
    runtime_environment: str | None = None,
    imports: Sequence[Import] | None = None,
    parallel: bool = False,
    session: Any = None,
    spec_overrides: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    queue: str | None = None,
    **kwargs: Any,
) -> MLJob:
    """Run a Python file on a compute pool (Snowflake's `submit_file`).

    The file runs on the head of a Ray cluster of `target_instances` instances (or on every instance with
    `parallel=True`); Ray is already initialised on the cluster (`ray.init(address="auto")`).

    Args:
        file_path: The local .py file; it is shipped in the job's payload ConfigMap.
        compute_pool: Name of the ComputePool every instance runs on.
        args: Command-line arguments of the script.
        target_instances: Instances to start (head included).
        min_instances: Instances that must be ready before the script starts (default `target_instances`).
        env_vars: Environment variables of every instance.
        pip_requirements: Packages every instance installs before the script starts, into a job-private
            location, from the operator's package index (or the MLJob's spec.pipOptions: an index or a
            wheelhouse for air-gapped clusters); a requirement pip cannot install fails the job
            (reason PipInstallFailed).
        name: Job name (DNS label, at most 40 characters); default `<file stem>-<8 hex>`.
        namespace: Namespace; default the kubeconfig context's.
        instances_timeout: Seconds to wait for `min_instances` before the job fails.
        image: Runtime image; default the compute pool's (ComputePool spec.image), else the operator's for the
            pool's hardware (its GPU image on GPU pools).
        runtime_environment: Snowflake's way to name the image: a full reference (`repo/name:tag`), or a tag
            of the compute pool's image (`"1.7.1"`); default `$MLRS_CONTAINER_IMAGE_TAG`. Excludes `image`.
        imports: More local code shipped with the payload (Snowflake's `imports`): paths or modules, each
            importable by its name, or `(path, "import.path")`; a .zip goes on sys.path as it is.
        parallel: Run the script once on every instance instead of on the head.
        session: The cluster connection (`kubepool.jobs.connect(context=...)`); default from the kubeconfig.
        spec_overrides: MLJob spec fields set over the generated spec (Snowflake's overrides of the job's
            service spec), named as in the CRD: e.g. `{"serviceAccountName": "trainer", "env": [{"name":
            "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}], "volumes": [...],
            "volumeMounts": [...], "podLabels": {...}, "tolerations": [...]}`.
        labels: Labels of the MLJob (e.g. Kueue's `kueue.x-k8s.io/queue-name`).
        queue: Kueue's LocalQueue of the job (its `kueue.x-k8s.io/queue-name` label), where Kueue admits MLJobs.
        **kwargs: Snowflake's options (`options.take_snowflake_options`): each honoured or refused.

    Returns:
        The job's handle.

    Raises:
        ValueError: Invalid instance counts or name (or spec_overrides: the message names the field); `PoolNotFound` for an unknown pool; `PayloadTooLarge`
            for a file over the ConfigMap limit.
        kubepool.kube.errors.KubeError: The API call failed (`Forbidden`, `Unreachable`, `Invalid`, ...).
    """
    path = Path(file_path)
    files = file_payload(path)
    return _submit_payload(files, Entrypoint(file=path.name), compute_pool, stem=path.stem, args=args,
                           target_instances=target_instances, min_instances=min_instances, env_vars=env_vars,
                           pip_requirements=pip_requirements, name=name, namespace=namespace,
                           instances_timeout=instances_timeout, image=image, parallel=parallel, session=session,
                           runtime_environment=runtime_environment, imports=imports,
                           spec_overrides=spec_overrides, labels=labels, queue=queue, kwargs=kwargs)


def submit_directory(
    dir_path: str | Path,
    compute_pool: str,
    *,
    entrypoint: str | Sequence[str],
    args: Sequence[Any] | None = None,
    target_instances: int = 1,
    min_instances: int | None = None,
    env_vars: Mapping[str, Any] | None = None,
    pip_requirements: Sequence[str] | None = None,
    name: str | None = None,
    namespace: str | None = None,
    instances_timeout: int = naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS,
    image: str | None = None,
    runtime_environment: str | None = None,
    imports: Sequence[Import] | None = None,
    parallel: bool = False,
    session: Any = None,
    spec_overrides: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    queue: str | None = None,
    **kwargs: Any,
) -> MLJob:
    """Run a directory's entrypoint on a compute pool (Snowflake's `submit_directory`).

    Args:
        dir_path: The local directory; its files (minus caches and VCS metadata) are shipped.
        compute_pool: Name of the ComputePool every instance runs on.
        entrypoint: A .py file relative to `dir_path`, or a command as a list (e.g. `["bash", "run.sh"]`).
        args, target_instances, min_instances, env_vars, pip_requirements, name, namespace,
        instances_timeout, image, parallel, session, spec_overrides, labels, queue, **kwargs: As in `submit_file`.

    Returns:
        The job's handle.

    Raises:
        ValueError: As in `submit_file`, or the entrypoint file is not in the directory.
    """
    root = Path(dir_path)
    files = directory_payload(root)
    if isinstance(entrypoint, str):
        if entrypoint not in {f.path for f in files}:
            raise ValueError(f"entrypoint {entrypoint!r} is not a file of {root}")
        ep, stem = Entrypoint(file=entrypoint), Path(entrypoint).stem
    else:
        ep, stem = Entrypoint(command=list(entrypoint)), root.resolve().name
    return _submit_payload(files, ep, compute_pool, stem=stem, args=args, target_instances=target_instances,
                           min_instances=min_instances, env_vars=env_vars, pip_requirements=pip_requirements,
                           name=name, namespace=namespace, instances_timeout=instances_timeout, image=image,
                           runtime_environment=runtime_environment, imports=imports,
                           parallel=parallel, session=session, spec_overrides=spec_overrides, labels=labels, queue=queue,
                           kwargs=kwargs)


def _submit_payload(files: list[PayloadFile], entrypoint: Entrypoint, compute_pool: str, *, stem: str,
                    args: Sequence[Any] | None, target_instances: int, min_instances: int | None,
                    env_vars: Mapping[str, Any] | None, pip_requirements: Sequence[str] | None, name: str | None,
                    namespace: str | None, instances_timeout: int, image: str | None, parallel: bool,
                    session: Any, spec_overrides: Mapping[str, Any] | None, kwargs: Mapping[str, Any],
                    runtime_environment: str | None = None, imports: Sequence[Import] | None = None,
                    labels: Mapping[str, str] | None = None, queue: str | None = None) -> MLJob:
    rest = dict(kwargs)
    sf = take_snowflake_options(rest, target_instances=target_instances, namespace=namespace)
    imports = imports_of(imports, rest)
    args = script_args(rest, args)
    warn_unknown(rest)
    check_instances(sf.target_instances, min_instances)
    files = with_imports(files, imports)
    kube = connect(sf.namespace, session=session)
    image = resolve_image(image, runtime_environment, lambda: pool_image(kube, compute_pool))
    job = build_mljob(
        name=name or generate_name(stem), namespace=sf.namespace or kube.namespace, entrypoint=entrypoint,
        compute_pool=compute_pool, target_instances=sf.target_instances, min_instances=min_instances,
        args=args or (), env_vars=env_vars, pip_requirements=pip_requirements,
        instances_timeout=instances_timeout, image=image, mode=RunMode.PARALLEL if parallel else RunMode.HEAD,
        spec_overrides=spec_overrides, labels=labels, queue=queue,
    )
    annotate(job, sf.annotations)
    return submit(kube, job, files)


def get_job(job_id: str, session: Any = None, *, namespace: str | None = None) -> MLJob:
    """The handle of an existing job.

    Args:
        job_id: `namespace/name` (an `MLJob.id`) or a bare name.
        session: The cluster connection (`connect`); default from the kubeconfig.
        namespace: Namespace of a bare name; default the kubeconfig context's.

    Raises:
        ValueError: `job_id` is not a job id.
        JobNotFound: No such job (a `NotFound`, `sql_error_code` 2003 as Snowflake's).
    """
    kube = connect(namespace, session=session)
    ns, name = parse_job_id(job_id, namespace or kube.namespace)
    job = MLJob(name, ns, kube=kube)
    try:
        job.refresh()
    except NotFound as err:
        raise JobNotFound(f"Job {ns}/{name} does not exist or could not be retrieved", 404) from err
    return job


@dataclass(frozen=True)
class JobSummary:
    """One row of `list_jobs`."""

    name: str
    namespace: str
    status: str
    instances: str
    pool: str
    created: str
    message: str

    @classmethod
    def of(cls, obj: api.MLJob) -> JobSummary:
        st = obj.status
        ready = st.ready_instances if st else 0
        target = (st.target_instances if st else None) or obj.spec.resolved_target()
        pools = (st.pools if st else None) or obj.spec.compute_pool or ",".join(
            dict.fromkeys(g.compute_pool for g in obj.spec.instance_groups or ()))
        return cls(
            name=obj.metadata.get("name", ""),
            namespace=obj.metadata.get("namespace", ""),
            status=status_of(obj),
            instances=f"{ready}/{target}",
            pool=pools,
            created=str(obj.metadata.get("creationTimestamp", "")),
            message=(st.message if st else None) or "",
        )


def _newest(kube: Kube, limit: int, namespace: str | None, all_namespaces: bool) -> list[api.MLJob]:
    objs = sorted(kube.list_jobs(namespace, all_namespaces), key=lambda o: str(o.metadata.get("creationTimestamp", "")),
                  reverse=True)
    return objs[:limit] if limit > 0 else objs


def job_summaries(kube: Kube, *, limit: int = -1, namespace: str | None = None,
                  all_namespaces: bool = False) -> list[JobSummary]:
    """Jobs, newest first, as rows (the plain form of `list_jobs`)."""
    return [JobSummary.of(o) for o in _newest(kube, limit, namespace, all_namespaces)]


# Snowflake's list_jobs columns (its job history query); database_name and owner have no Kubernetes counterpart
# (a job lives in a namespace, its schema; who created it is in the audit log, not on the object): None.
SNOWFLAKE_COLUMNS = ("name", "status", "message", "database_name", "schema_name", "owner", "compute_pool",
                     "target_instances", "created_time", "completed_time")


def snowflake_row(obj: api.MLJob) -> dict[str, Any]:
    """One job as a row of Snowflake's list_jobs."""
    st, row = obj.status, JobSummary.of(obj)
    return {"name": row.name, "status": row.status, "message": row.message or None, "database_name": None,
            "schema_name": row.namespace, "owner": None, "compute_pool": row.pool,
            "target_instances": (st.target_instances if st else None) or obj.spec.resolved_target(),
            "created_time": obj.metadata.get("creationTimestamp"),
            "completed_time": st.completion_time if st else None}


def list_jobs(limit: int = 10, database: str | None = None, schema: str | None = None, session: Any = None, *,
              namespace: str | None = None, all_namespaces: bool = False, as_list: bool = False) -> Any:
    """Recent jobs, newest first, as Snowflake's table: columns name, status, message, database_name (None),
    schema_name (the namespace), owner (None), compute_pool, target_instances, created_time, completed_time.

    Args:
        limit: Most rows to return; non-positive returns all.
        database: Refused when set: kubepool has no databases.
        schema: The namespace to list (Snowflake's schema); as `namespace`.
        session: The cluster connection (`connect`); default from the kubeconfig.
        namespace: Namespace to list; default the kubeconfig context's.
        all_namespaces: List every namespace.
        as_list: Return a list of `JobSummary` (name, namespace, status, instances ready/target, pool, created,
            message) instead of a pandas DataFrame.

    Returns:
        A pandas DataFrame, or a list of `JobSummary` when `as_list` is set or pandas is not installed.
    """
    sf = take_snowflake_options({"database": database, "schema": schema}, target_instances=1, namespace=namespace)
    kube = connect(sf.namespace, session=session)
    objs = _newest(kube, limit, sf.namespace, all_namespaces)
    if as_list:
        return [JobSummary.of(o) for o in objs]
    try:
        import pandas as pd
    except ImportError:
        return [JobSummary.of(o) for o in objs]
    return pd.DataFrame([snowflake_row(o) for o in objs], columns=list(SNOWFLAKE_COLUMNS))


def delete_job(job: MLJob | str, session: Any = None, *, namespace: str | None = None) -> None:
    """Delete a job with its pods, payload and logs.

    Args:
        job: The handle, or its id (`namespace/name` or a bare name).
        session: The cluster connection (`connect`) for a job id; default from the kubeconfig.
        namespace: Namespace of a bare name.
    """
    if isinstance(job, MLJob):
        job.kube.delete_job(job.name, job.namespace)
        return
    kube = connect(namespace, session=session)
    ns, name = parse_job_id(job, namespace or kube.namespace)
    kube.delete_job(name, ns)
