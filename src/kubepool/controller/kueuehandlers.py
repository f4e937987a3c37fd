"""kopf glue for Kueue's Workloads, registered only where the operator acts for Kueue (OperatorConfig.kueue:
`python -m kubepool.controller` imports this module then): an index of the Workloads the operator wrote, and
their events (Kueue admitted, evicted or requeued one) as a pass of the job that owns them."""

from __future__ import annotations

from typing import Any

import kopf

from kubepool import naming
from kubepool.controller import view
from kubepool.controller.handlers import MANAGED, _op


@kopf.index(naming.KUEUE_GROUP, naming.WORKLOAD_PLURAL, labels=MANAGED, id=view.WORKLOAD_INDEX)
async def workload_index(body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]] | None:
    key = view.owning_job(body)
    return {key: dict(body)} if key else None


@kopf.on.event(naming.KUEUE_GROUP, naming.WORKLOAD_PLURAL, labels=MANAGED)
async def workload_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    key = view.owning_job(body)
    if key is not None:
        _op(memo).queue.spawn(key)
