"""Code kept in the cluster for many jobs: Snowflake's stages and code bundles with their Kubernetes meaning.

A stage is a place the code already is: `pvc://<claim>[/<path>]` (mounted as the job's code) or
`configmap://<name>`. A code bundle is a payload stored under a name: a ConfigMap of its own (label
`kubepool.dev/stored-payload`), owned by no job, which every job run from it mounts as its code
(`spec.code.configMap`) and which stays until `delete_code_bundle`. Beside the files, key `TEMPLATE_KEY` keeps
the settings each run starts from (pool, instances, pip requirements, env, image, outputs): a partial MLJob spec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from kubepool import api, naming
from kubepool.api import CodeSource, Entrypoint
from kubepool.api.mljob import PvcSource
from kubepool.contract import RunMode
from kubepool.jobs.job import MLJob
from kubepool.jobs.locations import output_location, source_of
from kubepool.jobs.options import resolve_image, take_snowflake_options
from kubepool.jobs.payload import MANIFEST_KEY, PayloadFile, directory_payload, file_payload, pack
from kubepool.jobs.spec import build_mljob, check_instances, check_name, generate_name
from kubepool.jobs.submission import annotate, connect, imports_of, submit, warn_unknown, with_imports
from kubepool.kube.errors import NotFound
from kubepool.kube.sync import Kube

TEMPLATE_KEY = "kubepool-template.json"


# --- stored payloads (shared with job definitions) -------------------------------------------------------------
def local_payload(source: str | Path) -> list[PayloadFile]:
    path = Path(source)
    return directory_payload(path) if path.is_dir() else file_payload(path)


def store(kube: Kube, kind: str, name: str, namespace: str, files: Sequence[PayloadFile], template: Mapping[str, Any],
          *, replace: bool, annotations: Mapping[str, str] | None = None) -> None:
    """Keep `files` and the run `template` as the stored payload `name` (replacing one of that name if `replace`)."""
    payload = pack(files) if files else None
    data = {**(payload.data if payload else {}), TEMPLATE_KEY: json.dumps(template)}
    cm = ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace, labels={
        naming.LABEL_STORED_PAYLOAD: kind, naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
        annotations=dict(annotations) if annotations else None),
        data=data, binaryData=(payload.binary_data if payload else None) or None)
    if replace:
        kube.replace_configmap(cm, namespace)
    else:
        kube.create_configmap(cm, namespace)


def load(kube: Kube, kind: str, name: str, namespace: str) -> tuple[dict[str, Any], set[str]]:
    """The stored payload's run template and file paths.

    Raises:
        ValueError: `name` is no stored payload of this kind.
    """
    try:
        cm = kube.get_configmap(name, namespace)
    except NotFound:
        raise ValueError(f"no {kind} {namespace}/{name}") from None
    labels = (cm.metadata.labels if cm.metadata else None) or {}
    if labels.get(naming.LABEL_STORED_PAYLOAD) != kind:
        raise ValueError(f"ConfigMap {namespace}/{name} is not a {kind} (label {naming.LABEL_STORED_PAYLOAD}={kind})")
    data = cm.data or {}
    files = set(json.loads(data[MANIFEST_KEY])["files"]) if MANIFEST_KEY in data else set()
    return json.loads(data.get(TEMPLATE_KEY, "{}")), files


def template_of(*, compute_pool: str, target_instances: int, min_instances: int | None, pip_requirements: Sequence[str] | None,
                env_vars: Mapping[str, Any] | None, image: str | None, parallel: bool = False,
                output: str | None = None, spec_overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The partial MLJob spec (wire form) of a stored payload's runs, validated now so a bad setting fails at
    registration, not at each run."""
    target, minimum = check_instances(target_instances, min_instances)
    spec = build_mljob(
        name="template", namespace="template", entrypoint=Entrypoint(command=["true"]), compute_pool=compute_pool,
        target_instances=target, min_instances=minimum, env_vars=env_vars, pip_requirements=pip_requirements,
        image=image, mode=RunMode.PARALLEL if parallel else RunMode.HEAD, with_payload=False,
        output=output_location(output) if output else None, spec_overrides=spec_overrides,
    ).spec
    wire: dict[str, Any] = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    for key in ("entrypoint", "args", "code"):
        wire.pop(key, None)
    return wire


def run_from(kube: Kube, template: Mapping[str, Any], *, name: str, namespace: str, entrypoint: Entrypoint,
             args: Sequence[Any], code: CodeSource | None, files: Sequence[PayloadFile] = (),
             annotations: Mapping[str, str] | None = None) -> MLJob:
    """Create one job from a template: its code the stored payload (`code`) or its own `files`."""
    spec = {**template, "entrypoint": entrypoint.model_dump(mode="json", by_alias=True, exclude_none=True),
            "args": [str(a) for a in args]}
    if code is not None:
        spec["code"] = code.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif files:
        spec["code"] = {"configMap": naming.payload_configmap_name(name)}
    job = api.MLJob.model_validate({"metadata": {"name": check_name(name), "namespace": namespace}, "spec": spec})
    annotate(job, annotations or {})
    return submit(kube, job, list(files))


# --- stages -----------------------------------------------------------------------------------------------------
def stage_code(source: str) -> CodeSource:
    """A stage as a job's code: `pvc://<claim>[/<path>]` or `configmap://<name>`."""
    src = source_of(source, None, None)
    if src.s3 is not None:
        raise ValueError(f"stage {source!r}: code is run from pvc://<claim>[/<path>] or configmap://<name>; copy an S3 "
                         "prefix to a volume (or submit the local directory: submit_directory)")
    if src.config_map is not None:
        return CodeSource(config_map=src.config_map.name)
    assert src.persistent_volume_claim is not None
    return CodeSource(persistent_volume_claim=PvcSource(claim_name=src.persistent_volume_claim.claim_name,
                                                        sub_path=src.persistent_volume_claim.sub_path))


def submit_from_stage(source: str, compute_pool: str, *, entrypoint: str | list[str], stage_name: str | None = None,
                      args: list[str] | None = None, target_instances: int = 1, pip_requirements: list[str] | None = None,
                      external_access_integrations: list[str] | None = None, session: Any = None,
                      namespace: str | None = None, name: str | None = None, **kwargs: Any) -> MLJob:
    """Run code that is already in the cluster (Snowflake's `submit_from_stage`).

    Args:
        source: Where the code is: `pvc://<claim>[/<path>]` (a PersistentVolumeClaim of the job's namespace,
            mounted read-only as the code directory) or `configmap://<name>`.
        compute_pool: Name of the ComputePool every instance runs on.
        entrypoint: A .py file relative to the code directory, or a command as a list.
        stage_name: Kept as the job's annotation kubepool.dev/stage-name (the code is not uploaded).
        external_access_integrations: Refused when set (options.REFUSED_OPTIONS).
        args, target_instances, pip_requirements, session, namespace, name: As in `submit_file`.
        **kwargs: `min_instances`, `env_vars`, `parallel`, `image`/`runtime_environment`, `spec_overrides` as in
            `submit_file`, and Snowflake's options (`options.take_snowflake_options`); `imports` are refused (a
            job run from a stage runs the stage's code only: put the modules on the stage).

    Raises:
        ValueError: An S3 or unknown stage, `imports`, a refused option, or a rule of `submit_file`.
    """
    rest = {**kwargs, "stage_name": stage_name, "external_access_integrations": external_access_integrations}
    options = {k: rest.pop(k) for k in ("min_instances", "env_vars", "image", "runtime_environment", "spec_overrides",
                                        "parallel") if k in rest}
    sf = take_snowflake_options(rest, target_instances=target_instances, namespace=namespace)
    if imports_of(None, rest) is not None:
        raise ValueError("imports (additional_payloads) ship local code in the job's payload; a job run from a stage "
                         "runs the stage's code only: put the modules on the stage, or use submit_directory")
    from kubepool.jobs.definitions import script_args  # definitions builds on this module

    args = script_args(rest, args)
    warn_unknown(rest)
    code = stage_code(source)
    kube = connect(sf.namespace, session=session)
    ep = Entrypoint(command=list(entrypoint)) if isinstance(entrypoint, list) else Entrypoint(file=entrypoint)
    stem = Path(entrypoint).stem if isinstance(entrypoint, str) else source.rstrip("/").rsplit("/", 1)[-1]
    image = resolve_image(options.get("image"), options.get("runtime_environment"),
                          lambda: kube.get_pool(compute_pool).spec.image)
    template = template_of(compute_pool=compute_pool, target_instances=sf.target_instances,
                           min_instances=options.get("min_instances"), pip_requirements=pip_requirements,
                           env_vars=options.get("env_vars"), image=image, parallel=_parallel(options.get("parallel")),
                           spec_overrides=options.get("spec_overrides"))
    return run_from(kube, template, name=name or generate_name(stem), namespace=sf.namespace or kube.namespace,
                    entrypoint=ep, args=args or (), code=code, annotations=sf.annotations)


def _parallel(value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError("parallel must be a boolean.")
    return value


# --- code bundles ----------------------------------------------------------------------------------------------
class MLCodeBundle:
    """A handle to a registered code bundle (Snowflake's `MLCodeBundle`)."""

    def __init__(self, name: str, *, session: Any = None, namespace: str | None = None) -> None:
        self.kube = connect(namespace, session=session)
        ns, _, bare = name.rpartition("/")
        self.namespace, self._name = ns or namespace or self.kube.namespace, bare

    @property
    def name(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self._name}"

    def __repr__(self) -> str:
        return f"MLCodeBundle('{self.name}')"

    def delete(self) -> None:
        """Delete this code bundle."""
        delete_code_bundle(self)


def register_code_bundle(source: str | Path, compute_pool: str, result_stage: str | None = None, *,
                         stage_name: str | None = None, name: str | None = None,
                         pip_requirements: list[str] | None = None, external_access_integrations: list[str] | None = None,
                         target_instances: int = 1, session: Any = None, namespace: str | None = None,
                         **kwargs: Any) -> MLCodeBundle:
    """Store a local file or directory as a code bundle jobs are run from (Snowflake's `register_code_bundle`);
    registering a name again replaces the bundle.

    Args:
        source: Local .py file or directory.
        compute_pool: ComputePool of the bundle's jobs.
        result_stage: Where the bundle's jobs keep /opt/ml/model and /opt/ml/output/data
            (`s3://bucket/prefix` or `pvc://<claim>[/<path>]`, as spec.output); None keeps nothing.
        stage_name: Snowflake's upload stage, kept as the bundle ConfigMap's annotation kubepool.dev/stage-name.
        external_access_integrations: Refused when set (options.REFUSED_OPTIONS).
        name: Bundle name (a DNS subdomain); default `<source stem>-<8 hex>`.
        pip_requirements, target_instances: Of every job run from the bundle.
        session, namespace: The cluster connection and namespace.
        **kwargs: `min_instances`, `env_vars`, `imports`, `runtime_environment` (or `image`), `spec_overrides`, as
            in `submit_file`; `secrets`: names of Kubernetes Secrets of the namespace whose keys every instance of
            the bundle's jobs gets as env (envFrom); Snowflake's other options (`options.take_snowflake_options`).
    """
    rest = {**kwargs, "stage_name": stage_name, "external_access_integrations": external_access_integrations}
    options = {k: rest.pop(k) for k in ("min_instances", "env_vars", "runtime_environment", "image",
                                        "spec_overrides") if k in rest}
    sf = take_snowflake_options(rest, target_instances=target_instances, namespace=namespace, secrets=True)
    imports = imports_of(None, rest)
    warn_unknown(rest)
    files = with_imports(local_payload(source), imports)
    kube = connect(sf.namespace, session=session)
    ns = sf.namespace or kube.namespace
    image = resolve_image(options.get("image"), options.get("runtime_environment"),
                          lambda: kube.get_pool(compute_pool).spec.image)
    template = template_of(compute_pool=compute_pool, target_instances=sf.target_instances,
                           min_instances=options.get("min_instances"), pip_requirements=pip_requirements,
                           env_vars=options.get("env_vars"), image=image, output=result_stage,
                           spec_overrides=sf.overrides(options.get("spec_overrides")))
    bundle = check_name(name or generate_name(Path(source).stem))
    store(kube, naming.STORED_CODE_BUNDLE, bundle, ns, files, template, replace=True, annotations=sf.annotations)
    return MLCodeBundle(f"{ns}/{bundle}", session=kube)


def _bundle(code_bundle: str | MLCodeBundle, session: Any) -> MLCodeBundle:
    return code_bundle if isinstance(code_bundle, MLCodeBundle) else MLCodeBundle(code_bundle, session=session)


def register_job_from_code_bundle(code_bundle: str | MLCodeBundle, *, entrypoint: str, args: list[str] | None = None,
                                  session: Any = None, timeout: float = 60.0) -> MLJob:
    """Run a job from a code bundle (Snowflake's `register_job_from_code_bundle`); a bundle backs any number
    of jobs. The job is created at once (`timeout` is Snowflake's wait for its id: nothing to wait for here).

    Raises:
        ValueError: No such bundle, or `entrypoint` is not one of its files.
    """
    if timeout <= 0:
        raise ValueError("timeout must be greater than 0.")
    bundle = _bundle(code_bundle, session)
    template, files = load(bundle.kube, naming.STORED_CODE_BUNDLE, bundle._name, bundle.namespace)
    if entrypoint not in files:
        raise ValueError(f"entrypoint {entrypoint!r} is not a file of code bundle {bundle.name} ({', '.join(sorted(files))})")
    return run_from(bundle.kube, template, name=generate_name(Path(entrypoint).stem), namespace=bundle.namespace,
                    entrypoint=Entrypoint(file=entrypoint), args=args or (), code=CodeSource(config_map=bundle._name))


def delete_code_bundle(code_bundle: str | MLCodeBundle, *, session: Any = None) -> None:
    """Delete a code bundle; jobs that run from it keep running, new pods of them cannot start."""
    bundle = _bundle(code_bundle, session)
    load(bundle.kube, naming.STORED_CODE_BUNDLE, bundle._name, bundle.namespace)  # never delete another ConfigMap
    bundle.kube.delete_configmap(bundle._name, bundle.namespace)
