"""Snowflake's common submission options with their Kubernetes meaning: `runtime_environment` (the image the
instances run) and `imports` (more code shipped with the payload, importable by its module path)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from kubepool.payload_format import PayloadFile, directory_payload, file_payload

RUNTIME_TAG_ENV = "MLRS_CONTAINER_IMAGE_TAG"  # Snowflake's default for runtime_environment
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

ImportSource = str | Path | ModuleType
Import = ImportSource | tuple[ImportSource] | tuple[ImportSource, str | None]


def with_tag(image: str, tag: str) -> str:
    """`image` (repo[:tag][@digest]) with its tag replaced by `tag`."""
    repo = image.split("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    return f"{repo}:{tag}"


def resolve_image(image: str | None, runtime_environment: str | None, pool_image: Callable[[], str | None]) -> str | None:
    """The job's spec.image: `image`, else `runtime_environment` (the argument, else $MLRS_CONTAINER_IMAGE_TAG),
    a full image reference or a tag of the compute pool's image (`pool_image`, read only for a tag).

    Raises:
        ValueError: Both given, or a tag where the pool names no image to apply it to.
    """
    runtime_environment = runtime_environment or os.environ.get(RUNTIME_TAG_ENV) or None
    if image and runtime_environment:
        raise ValueError("set image or runtime_environment, not both")
    if image or not runtime_environment:
        return image
    if not _TAG.match(runtime_environment):
        return runtime_environment  # repository/name:tag (or @digest)
    base = pool_image()
    if not base:
        raise ValueError(f"runtime_environment {runtime_environment!r} is a tag, and the compute pool names no image "
                         "(spec.image) to apply it to: give the full image (repository/name:tag)")
    return with_tag(base, runtime_environment)


def import_files(imports: Sequence[Import] | None) -> list[PayloadFile]:
    """The files of Snowflake's `imports`, placed in the payload so each is importable by its module path: a
    directory or .py file under its own name (or the import path given with it, `("src/utils", "team.utils")`),
    a module object by its name, a .zip as it is (the runtime puts the payload's zips on sys.path).

    Raises:
        FileNotFoundError: A path that does not exist.
        ValueError: An entry that is neither, or an import path that does not end with its source's name.
    """
    out: list[PayloadFile] = []
    for entry in imports or ():
        source, import_path = (entry[0], entry[1] if len(entry) > 1 else None) if isinstance(entry, tuple) else (entry, None)
        for path, dotted in _sources(source, import_path):
            out.extend(_place(path, dotted))
    return out


def _sources(source: Any, import_path: str | None) -> list[tuple[Path, str]]:
    if isinstance(source, ModuleType):
        name = import_path or source.__name__
        if getattr(source, "__path__", None):
            return [(Path(p), name) for p in source.__path__]
        if getattr(source, "__file__", None):
            return [(Path(source.__file__), name)]  # type: ignore[arg-type]
        raise ValueError(f"module {source.__name__} has no files to ship")
    if not isinstance(source, (str, Path)):
        raise ValueError(f"imports entries are paths, modules or (path, import_path) tuples, not {source!r}")
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"import {path} does not exist")
    return [(path, import_path or path.stem)]


def _place(path: Path, dotted: str) -> list[PayloadFile]:
    if path.is_file() and path.suffix == ".zip":
        return file_payload(path)
    parts = dotted.strip().split(".")
    if not all(p.isidentifier() for p in parts):  # never '..', '/' or '' in a payload path
        raise ValueError(f"import path {dotted!r} is not a dotted module path (e.g. 'team.utils')")
    rel = "/".join(parts)
    own = path.stem if path.is_file() else path.name
    if rel.rsplit("/", 1)[-1] != own:
        raise ValueError(f"import path {dotted!r} must end with the source's name {own!r} ({path})")
    if path.is_file():
        if path.suffix != ".py":
            raise ValueError(f"import {path} is neither a directory, a .py file nor a .zip")
        return file_payload(path, f"{rel}.py")
    return [PayloadFile(f"{rel}/{f.path}", f.content, f.mode) for f in directory_payload(path)]


# --- Snowflake's keyword options (its `option_parsing` and `_submit_job`/`MLJobDefinition._create` pops) -------
ANNOTATION_COMMENT = "kubepool.dev/comment"  # Snowflake's `comment`
ANNOTATION_STAGE = "kubepool.dev/stage-name"  # Snowflake's `stage_name`: where it would have uploaded the payload
# Options with no Kubernetes meaning: refused when set (their empty or default values pass), never dropped.
REFUSED_OPTIONS: dict[str, str] = {
    "external_access_integrations": "Snowflake's egress grant; a kubepool job reaches what the cluster's "
                                    "NetworkPolicies allow (an administrator opens egress): drop the argument",
    "query_warehouse": "a Snowflake warehouse; kubepool jobs run no SQL: drop the argument",
    "database": "kubepool has no databases: a job lives in a namespace (schema= or namespace=)",
    "artifact_repositories": "a Snowflake artifact repository; the package index of pipRequirements is the job's "
                             "spec.pipOptions (spec_overrides={'pipOptions': {...}}) or the operator's pipIndexUrl",
    "preflight": "Snowflake's multi-node preflight check is not offered by kubepool",
    "payload": "Snowflake's internal payload object: pass the source instead",
}
# Every keyword option of Snowflake's that `take_snowflake_options` handles (the rest are explicit parameters).
SNOWFLAKE_OPTIONS = frozenset({*REFUSED_OPTIONS, "num_instances", "additional_payloads", "schema", "comment",
                               "stage_name", "enable_metrics", "secrets"})


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, (list, tuple, set, dict, str)) and not value)


@dataclass
class SnowflakeOptions:
    """What Snowflake's options mean for one submission."""

    target_instances: int
    namespace: str | None
    annotations: dict[str, str] = field(default_factory=dict)
    env_from: list[dict[str, Any]] = field(default_factory=list)  # `secrets`: each a Secret whose keys are env

    def overrides(self, spec_overrides: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """`spec_overrides` with the secrets' envFrom added."""
        if not self.env_from:
            return dict(spec_overrides) if spec_overrides else None
        out = dict(spec_overrides or {})
        out["envFrom"] = [*self.env_from, *(out.get("envFrom") or [])]
        return out


def take_snowflake_options(kwargs: dict[str, Any], *, target_instances: int, namespace: str | None,
                           secrets: bool = False) -> SnowflakeOptions:
    """Pop Snowflake's keyword options out of `kwargs` and give each its meaning, as Snowflake's option parsing
    does: `num_instances` (deprecated) raises `target_instances` to it, `additional_payloads` (deprecated) is
    `imports` unless those are given (left in `kwargs` as `imports`), `schema` is the namespace, `comment` and
    `stage_name` are kept as annotations of the job, `secrets` (only where Snowflake takes them: `secrets=True`) are
    Kubernetes Secrets of the namespace whose keys every instance gets as env (envFrom).

    Raises:
        ValueError: An option of REFUSED_OPTIONS set, `enable_metrics=False`, or `schema` naming another namespace
            than `namespace`.
    """
    out = SnowflakeOptions(target_instances=target_instances, namespace=namespace)
    if "num_instances" in kwargs:
        out.target_instances = max(target_instances, int(kwargs.pop("num_instances")))
    if "additional_payloads" in kwargs:
        extra = kwargs.pop("additional_payloads")
        if kwargs.get("imports") is None:
            kwargs["imports"] = extra
    for key, why in REFUSED_OPTIONS.items():
        value = kwargs.pop(key, None)
        if not _unset(value):
            raise ValueError(f"{key}={value!r} is not supported: {why}")
    if kwargs.pop("enable_metrics", True) is False:
        raise ValueError("enable_metrics=False is not supported: kubepool's job metrics are the operator's, always on")
    schema = kwargs.pop("schema", None)
    if schema:
        if namespace and namespace != schema:
            raise ValueError(f"schema={schema!r} and namespace={namespace!r} name different namespaces")
        out.namespace = str(schema)
    for key, annotation in (("comment", ANNOTATION_COMMENT), ("stage_name", ANNOTATION_STAGE)):
        value = kwargs.pop(key, None)
        if not _unset(value):
            out.annotations[annotation] = str(value)
    names = kwargs.pop("secrets", None) if secrets else None
    for name in names or ():
        if not isinstance(name, str) or not name:
            raise ValueError(f"secrets are names of Kubernetes Secrets, not {name!r}")
        out.env_from.append({"secretRef": {"name": name}})
    return out
