"""Shared pieces of the builders: the job's identity, labels, owner references, where each instance
runs (its pool) and quantity parsing. Pure."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubepool import naming, objectmeta
from kubepool.api import ComputePool, MLJob, MLJobStatus
from kubepool.api.common import QUANTITY_PATTERN
from kubepool.controller.builders.layout import group_counts, instance_ids

Obj = dict[str, Any]
RAY_TOKEN_KEY = naming.RAY_TOKEN_KEY


_QUANTITY = re.compile(QUANTITY_PATTERN)
_SUFFIX = {"": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6,
           "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
           **{s: Decimal(2) ** (10 * (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))}}


def parse_quantity(value: str) -> Decimal:
    """A Kubernetes quantity ("3", "500m", "13Gi", "1e3") as a number, in the forms the API's schema admits
    (`api.common.QUANTITY_PATTERN`); ValueError otherwise. Its own parser, not lightkube's: importing lightkube
    brings its HTTP client into the operator's memory."""
    text = value.strip()
    if not _QUANTITY.match(text):
        raise ValueError(f"invalid quantity {value!r}")
    suffix = text.lstrip("+0123456789.")
    if suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdigit():
        suffix = ""  # an exponent: Decimal reads it
    try:
        return Decimal(text[: len(text) - len(suffix)]) * _SUFFIX[suffix]
    except (ArithmeticError, KeyError) as e:  # InvalidOperation, Overflow
        raise ValueError(f"invalid quantity {value!r}") from e


@dataclass(frozen=True)
class JobRef:
    """The identity of one MLJob: what every child's name, labels and owner reference derive from."""

    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, job: MLJob) -> JobRef:
        return cls(name=objectmeta.name(job), namespace=objectmeta.namespace(job), uid=objectmeta.uid(job))

    def owner_reference(self) -> Obj:
        # blockOwnerDeletion stays off: it would need update on mljobs/finalizers and buys nothing with
        # background garbage collection.
        return {"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND, "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": False}

    def labels(self) -> dict[str, str]:
        return {naming.LABEL_JOB: self.name, naming.LABEL_JOB_UID: self.uid, naming.LABEL_MANAGED_BY: naming.MANAGED_BY}

    def metadata(self, name: str, **extra_labels: str) -> Obj:
        return {"name": name, "namespace": self.namespace, "labels": {**self.labels(), **extra_labels},
                "ownerReferences": [self.owner_reference()]}


@dataclass(frozen=True)
class Placement:
    """One instance: its global id, group, rank in the group and pool."""

    instance_id: int
    group: str
    rank: int
    pool: str


def placement_of(job: MLJob, st: MLJobStatus | None = None) -> list[Placement]:
    """Every instance of the job in instance id order: instance 0 (the head) is the first group's first. The ids
    are stable across resizes (builders.layout), from `st` (default the job's own status)."""
    ids = instance_ids(job, st)
    out = [Placement(iid, group, rank, pool) for group, pool, _ in group_counts(job)
           for rank, iid in enumerate(ids[group])]
    return sorted(out, key=lambda p: p.instance_id)


def laid_out(job: MLJob, layout: Sequence[Placement] | None) -> Sequence[Placement]:
    """The job's layout as its pass computed it once (`placement_of`) and passed along; computed here only for a
    builder or decision called on its own (tests, benchmarks, the claims index)."""
    return layout if layout is not None else placement_of(job)


def pool_image(pool: ComputePool, default_image: str, gpu_image: str) -> str:
    """The image a pool's instances run unless their job names one: the pool's own, else the operator's for the
    pool's hardware (CPU torch cannot use a GPU node's devices)."""
    if pool.spec.image:
        return pool.spec.image
    return (gpu_image or default_image) if pool.spec.instance_size().gpus else default_image


def pools_of(job: MLJob, layout: Sequence[Placement] | None = None) -> list[str]:
    """The job's pool names, in first-use order."""
    return list(dict.fromkeys(p.pool for p in laid_out(job, layout)))


def pool_named(pools: dict[str, ComputePool], name: str) -> ComputePool:
    try:
        return pools[name]
    except KeyError:
        raise ValueError(f"ComputePool {name!r} is not known") from None


def local_port_shift(uid: str, stride: int) -> int:
    """Local clusters only (stride > 0): a per-job shift of every Ray port, 100..700, so two jobs' heads rarely
    share a port on the one host and never take Ray's default ports; 0 on real clusters."""
    return (zlib.crc32(uid.encode()) % 7 + 1) * 100 if stride else 0
