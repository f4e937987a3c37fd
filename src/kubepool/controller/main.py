"""The operator's entry module for `kopf run -m kubepool.controller.main`: kopf settings (progress and
diff-base in kubepool.dev annotations, peering, events, server-side label selectors) and the operator's
state in memo. Handlers live in `handlers`."""

from __future__ import annotations

import logging
import random
from typing import Any

import kopf

from kubepool import naming
from kubepool.controller import handlers, metrics
from kubepool.controller.config import OperatorConfig
from kubepool.controller.state import OperatorState
from kubepool.kube.aio import Api
from kubepool.kube.errors import KubeError

__all__ = ["handlers"]  # importing this module registers the handlers

PEERING_NAME = "kubepool"


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    cfg = OperatorConfig.from_env()
    # kopf's own bookkeeping stays in annotations under our prefix: the strict status schema would prune it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=naming.ANNOTATION_PREFIX, key="last-handled-configuration")
    settings.persistence.finalizer = f"{naming.GROUP}/operator"  # only used if a handler ever needs one
    # Peering: with the kopf.dev CRDs installed, replicas pick distinct priorities, so exactly one works and
    # the others stand by; without them the operator runs alone (and says so).
    settings.peering.name = PEERING_NAME  # kopf sets clusterwide from --all-namespaces/--namespace
    settings.peering.priority = random.randint(1, 2**30)
    settings.posting.level = logging.INFO
    settings.posting.reporting_component = naming.FIELD_MANAGER
    settings.execution.max_workers = 4  # handlers are async; the executor only serves kopf's sync helpers
    settings.networking.connect_timeout = 10
    # Only kubepool's pods reach the operator: the selector runs in the API server, not in Python.
    settings.watching.label_selectors["pods"] = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
    memo.op = OperatorState(cfg=cfg, api=Api())
    if not settings.peering.standalone:
        try:
            scope = () if settings.peering.clusterwide else cfg.namespaces
            if not await memo.op.api.ensure_peering(PEERING_NAME, scope):
                logger.warning("kopf's peering CRDs are not installed: running without peering")
        except KubeError as e:  # e.g. RBAC allows patching the peering object but not creating it
            logger.warning("cannot create the peering object %r: %s", PEERING_NAME, e)
    metrics.serve(cfg.metrics_port)
    logger.info("kubepool operator configured: %s", cfg.model_dump(mode="json"))


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    op: OperatorState | None = getattr(memo, "op", None)
    if op is not None:
        for handle in op.wakeups.values():
            handle.cancel()
        await op.api.close()
