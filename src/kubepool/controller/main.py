"""The operator's entry module for `kopf run -m kubepool.controller.main`: kopf settings (progress and
diff-base in kubepool.dev annotations, peering, events, server-side label selectors) and the operator's
state in memo. Handlers live in `handlers`."""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import kopf

from kubepool import naming
from kubepool.controller import fastjson, handlers, metrics, reconcile
from kubepool.controller.config import OperatorConfig, resolve_placeholder_namespace
from kubepool.controller.state import OperatorState
from kubepool.kube.aio import Api
from kubepool.kube.errors import KubeError

__all__ = ["handlers"]  # importing this module registers the handlers

PEERING_NAME = "kubepool"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


# Kinds with change handlers (on.create/update/resume): only they need kopf's diff base. MLJobs have none
# (handlers.reconcile_mljob watches events and tracks generations itself).
CHANGE_HANDLED_KINDS = frozenset({naming.POOL_KIND})


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf builds a diff base for every event of every watched kind by deep-copying the whole body (status and
    managedFields too, dropped right after): the largest CPU cost of a pod event. Kinds without change handlers
    (pods, nodes) get none, and the others are copied without the parts the essence drops anyway."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        if body.get("kind") not in CHANGE_HANDLED_KINDS:
            return cast(kopf.BodyEssence, None)  # kopf treats None as "no essence": no diff, no change cause
        extra = list(extra_fields or ())
        if all(tuple(f)[:1] not in (("metadata",), ("status",)) for f in extra):
            meta = body.get("metadata") or {}
            slim = {k: v for k, v in body.items() if k not in ("metadata", "status")}
            slim["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
            body = kopf.Body(cast(kopf.RawBody, slim))
        return super().build(body=body, extra_fields=extra)


@kopf.on.login()
def login(settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """An explicit KUBECONFIG wins; in a pod, reach the API server where client-go would
    (KUBERNETES_SERVICE_HOST/PORT): kopf's own in-cluster login assumes kubernetes.default.svc:443."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not os.environ.get("KUBECONFIG") and host and port and (SA_DIR / "token").is_file():
        server_host = f"[{host}]" if ":" in host else host
        return kopf.ConnectionInfo(
            server=f"https://{server_host}:{port}",
            ca_path=str(SA_DIR / "ca.crt"),
            scheme="Bearer",
            token=(SA_DIR / "token").read_text().strip(),  # re-read on 401: kopf calls login again
            default_namespace=(SA_DIR / "namespace").read_text().strip() if (SA_DIR / "namespace").is_file() else None,
        )
    return kopf.login_with_kubeconfig(settings=settings, **kwargs)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    cfg = OperatorConfig.from_env()
    # kopf's own bookkeeping stays in annotations under our prefix: the strict status schema would prune it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = LeanDiffBaseStorage(
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
    # Watch streams that die silently (no TCP reset: a NAT or proxy dropped them; kopf #787/#957, dask-kubernetes
    # #620) would leave the operator blind: the server ends each watch within 5 min and the client gives up on
    # one after 6, so every stream is re-established (kopf lists again and resumes) at least that often.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 360
    settings.watching.connect_timeout = 10
    # Only kubepool's pods reach the operator: the selector runs in the API server, not in Python.
    settings.watching.label_selectors["pods"] = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
    if not fastjson.install():
        logger.warning("kopf's watch decoding is not where kubepool expects it: watching with the standard json")
    memo.op = OperatorState(cfg=cfg, api=Api())
    own = (SA_DIR / "namespace").read_text().strip() if (SA_DIR / "namespace").is_file() else None
    memo.op.placeholder_namespace = resolve_placeholder_namespace(cfg, own)
    if cfg.namespaces and memo.op.placeholder_namespace not in cfg.namespaces:
        logger.warning("placeholder namespace %r is not watched: warm capacity cannot follow its placeholders",
                       memo.op.placeholder_namespace)
    memo.op.recheck = asyncio.get_running_loop().create_task(reconcile.recheck_queue_forever(memo.op))
    if not settings.peering.standalone:
        try:
            scope = () if settings.peering.clusterwide else cfg.namespaces
            if not await memo.op.api.ensure_peering(PEERING_NAME, scope):
                logger.warning("kopf's peering CRDs are not installed: running without peering")
        except KubeError as e:  # e.g. RBAC allows patching the peering object but not creating it
            logger.warning("cannot create the peering object %r: %s", PEERING_NAME, e)
    try:
        metrics.serve(cfg.metrics_port, cfg.bind_address)
    except OSError as e:  # a taken port must not stop the operator (retrying startup would, every 60 s)
        logger.warning("metrics disabled: cannot listen on port %s: %s", cfg.metrics_port, e)
    logger.info("kubepool operator configured: %s", cfg.model_dump(mode="json"))


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    op: OperatorState | None = getattr(memo, "op", None)
    if op is not None:
        for handle in [*op.wakeups.values(), *op.suspend_timers.values()]:
            handle.cancel()
        if op.recheck is not None:
            op.recheck.cancel()
        await op.api.close()
