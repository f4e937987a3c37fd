"""A group's pod settings: the job's (spec) with the group's merged over them, by the rules the fields'
descriptions state (kubepool.api.podsettings). Pure."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kubepool.api import EnvVar, MLJob, PodSettings
from kubepool.controller.builders.common import Obj

T = TypeVar("T")
# Where the operator acting for Kueue writes the admission's placement of each group, with the resume (removed
# with the suspend): {pod set name: {"nodeSelector": {...}, "tolerations": [...]}} from its ResourceFlavors.
ANNOTATION_KUEUE_PLACEMENT = "kueue.kubepool.dev/placement"
AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


@dataclass(frozen=True)
class PodSettingsOf:
    """The settings the pods of one group get."""

    env: list[EnvVar]
    env_from: list[Obj]
    volumes: list[Obj]
    volume_mounts: list[Obj]
    service_account_name: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    affinity: Obj
    tolerations: list[Obj]
    priority_class_name: str | None


def merged_by(key: Callable[[T], str], base: Sequence[T], over: Sequence[T]) -> list[T]:
    """`base` with each entry `over` has a key for replaced in place, then `over`'s other entries."""
    mine = {key(o): o for o in over}
    out = [mine.pop(key(b), b) for b in base]
    return out + [o for o in over if key(o) in mine]


def group_settings(job: MLJob, group: str) -> PodSettings | None:
    """The instance group's own settings (None: the computePool form, or an unknown group)."""
    return next((g for g in job.spec.instance_groups or [] if g.name == group), None)


def pod_settings(job: MLJob, group: str) -> PodSettingsOf:
    spec = job.spec
    g = group_settings(job, group) or PodSettings()
    return PodSettingsOf(
        env=merged_by(lambda e: e.name, spec.env, g.env),
        env_from=[*spec.env_from, *g.env_from],  # later sources win a shared key, as in a pod
        volumes=merged_by(lambda v: str(v["name"]), spec.volumes, g.volumes),
        volume_mounts=merged_by(lambda m: str(m["mountPath"]), spec.volume_mounts, g.volume_mounts),
        service_account_name=g.service_account_name or spec.service_account_name,
        labels={**spec.pod_labels, **g.pod_labels},
        annotations={**spec.pod_annotations, **g.pod_annotations},
        affinity={k: v for k, v in {**(spec.affinity or {}), **(g.affinity or {})}.items() if k in AFFINITY_KINDS and v},
        tolerations=[*spec.tolerations, *g.tolerations],
        priority_class_name=g.priority_class_name or spec.priority_class_name,
    )


def kueue_placement(job: MLJob, group_label: str) -> Obj:
    """The nodeSelector and tolerations Kueue's admission gives the group (by its pod set name), or {}."""
    raw = (job.metadata.get("annotations") or {}).get(ANNOTATION_KUEUE_PLACEMENT)
    try:
        mine = json.loads(raw).get(group_label) if raw else None
    except (ValueError, AttributeError):
        return {}
    return mine if isinstance(mine, dict) else {}
