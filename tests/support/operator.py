"""The operator's state for unit tests: wired as in production (wiring.new_operator), over a FakeApi and plain
dicts standing in for kopf's indexes (the pod indexes are the operator's own, podwatch's), with Events recorded by reason."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubepool.api import ComputePool, MLJob
from kubepool.controller import jobwatch, podwatch, view
from kubepool.controller.config import OperatorConfig
from kubepool.controller.observed import PlaceholderView, PodView
from kubepool.controller.state import OperatorState
from kubepool.controller.wiring import new_operator
from support.fake_api import FakeApi


def wire(obj: ComputePool | MLJob) -> dict[str, Any]:
    return obj.model_dump(mode="json", by_alias=True, exclude_none=True)


def operator_state(jobs: Sequence[MLJob] = (), pools: Sequence[ComputePool] = (),
                   pods: dict[tuple[str, str], list[PodView]] | None = None,
                   placeholders: dict[str, list[PlaceholderView]] | None = None, *,
                   cfg: OperatorConfig | None = None, api: Any = None,
                   placeholder_namespace: str = "default") -> tuple[OperatorState, FakeApi, list[str]]:
    """The state, its FakeApi (or `api`) and the reasons of the Events posted. Jobs live in namespace `ns`."""
    fake: FakeApi = api if api is not None else FakeApi()
    events: list[str] = []
    op = new_operator(cfg or OperatorConfig(), fake, placeholder_namespace=placeholder_namespace,
                      post_event=lambda body, *, type, reason, message: events.append(reason))
    op.view.indexes = {
        view.POOL_INDEX: {p.metadata["name"]: [wire(p)] for p in pools},
        view.NODE_INDEX: {},
        **jobwatch.new_indexes(),
        **podwatch.new_indexes(),
    }
    for j in jobs:
        jobwatch.file(op, wire(j))
    for key, views in (pods or {}).items():
        set_pods(op, key, views)
    for name, held in (placeholders or {}).items():
        for p in held:
            op.view.indexes[view.PLACEHOLDER_INDEX].put(p.name, name, p)
    op.view.track_open_jobs()  # as main.configure does: a job added later goes through `index_job`
    return op, fake, events


def set_pods(op: OperatorState, key: tuple[str, str], views: Sequence[PodView]) -> None:
    """The job's pods, as the pod index holds them from now on."""
    index = op.view.indexes[view.POD_INDEX]
    for old in list(index.get(key, ())):
        index.drop(old.uid or old.name)
    for p in views:
        index.put(p.uid or p.name, key, p)


def index_job(op: OperatorState, j: MLJob | dict[str, Any]) -> None:
    """The job's body filed in the job index, as its watch event does (jobwatch.seen), without the pass it asks."""
    b = wire(j) if isinstance(j, MLJob) else j
    jobwatch.file(op, b)
    op.view.job_event(view.job_key(b))
