"""The operator's entry module for `kopf run -m kubepool.controller.main`: kopf settings (progress and
diff-base in kubepool.dev annotations, peering, events, server-side label selectors) and the operator's
state in memo. The configuration comes in kopf's memo (`memo.cfg`, set by `python -m kubepool.controller`;
read from the environment only when kopf is started directly). Handlers live in `handlers`."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf

from kubepool import naming
from kubepool.controller import handlers, jobwatch, metrics, podwatch
from kubepool.controller.collector import StartupHold
from kubepool.controller.config import OperatorConfig, resolve_lease_namespace, resolve_placeholder_namespace
from kubepool.controller.election import Timing
from kubepool.controller.events import EventPoster
from kubepool.controller.jobchildren import child_seen
from kubepool.controller.kopf_fence import (
    NoDiffBaseStorage,
    install_fast_json,
    install_relist_deletions,
    take_over,
    when_indexed,
)
from kubepool.controller.leader import LeaderElector
from kubepool.controller.state import OperatorState
from kubepool.controller.view import INDEXES, OPTIONAL_INDEXES, WORKLOAD_INDEX
from kubepool.controller.wiring import new_operator
from kubepool.kube.aio import Api
from kubepool.kube.errors import KubeError, Unreachable
from kubepool.kube.transport import AiohttpHttp, Endpoint

__all__ = ["handlers"]  # importing this module registers the handlers

PEERING_NAME = "kubepool"
LIST_PAGE_SIZE = 500  # objects per page of kopf's listings (client-go's reflectors page by 500 too)
WORKER_IDLE_SECONDS = 1.0  # kopf's per-object worker exits after this long without an event of its object
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CHILD_KINDS = (("", "services"), ("networking.k8s.io", "networkpolicies"))  # (group, plural): handlers.child_event's


@kopf.on.login()
def login(settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    return credentials(settings, **kwargs)


def credentials(settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
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


def new_api(settings: kopf.OperatorSettings) -> Api:
    """The operator's client for its own reads and writes, logged in as kopf's watches are (`login`): on a 401 it
    asks for the credentials again, as kopf does (a rotated service account token)."""
    def connect() -> Endpoint:
        info = credentials(settings)
        if info is None:
            raise Unreachable("no credentials for the Kubernetes API: set KUBECONFIG, or run in a pod with a service account")
        tls = info.as_ssl_context() if info.server.startswith("https:") else False
        return Endpoint(info.server, ssl=tls, headers=info.as_http_headers())
    return Api(AiohttpHttp(connect))


def apply_settings(settings: kopf.OperatorSettings, cfg: OperatorConfig | None = None) -> None:
    """kopf's settings for kubepool (also applied by the fence test, which runs kopf's processing with them)."""
    cfg = cfg or OperatorConfig()
    # kopf's own bookkeeping stays in annotations under our prefix: the strict status schema would prune it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = NoDiffBaseStorage(
        prefix=naming.ANNOTATION_PREFIX, key="last-handled-configuration")
    settings.persistence.finalizer = f"{naming.GROUP}/operator"  # only used if a handler ever needs one
    # Peering: with the kopf.dev CRDs installed, replicas pick distinct priorities, so exactly one works and
    # the others stand by; without them the operator runs alone (and says so).
    settings.peering.name = PEERING_NAME  # kopf sets clusterwide from --all-namespaces/--namespace
    settings.peering.priority = random.randint(1, 2**30)
    # kopf's own Events (its per-object log lines) only for its warnings and errors, as its log (kopf_fence.
    # quiet_routine_logs); the operator's transitions are Events of its own (events.EventPoster).
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = naming.FIELD_MANAGER
    settings.execution.max_workers = 4  # handlers are async; the executor only serves kopf's sync helpers
    # kopf keeps a task (its queue, its coroutine frames) per watched object for 5 s after the object's last
    # event: a burst of new jobs, or a restart's listing of every job and pod, held thousands at once. The
    # handlers keep no state in them; a later event starts a new one.
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    settings.networking.connect_timeout = 10
    # Watch streams that die silently (no TCP reset: a NAT or proxy dropped them; kopf #787/#957, dask-kubernetes
    # #620) would leave the operator blind: the server ends each watch within 5 min and the client gives up on
    # one after 6, so every stream is re-established (kopf lists again and resumes) at least that often.
    settings.watching.server_timeout = cfg.watch_timeout_seconds
    settings.watching.client_timeout = cfg.watch_timeout_seconds + max(cfg.watch_timeout_seconds // 5, 2)
    settings.watching.connect_timeout = 10
    # Only kubepool's pods, Services and NetworkPolicies reach the operator: the selector runs in the API server,
    # not in Python, and the operator keeps nothing of a cluster's other objects of those kinds.
    for group, plural in (("", "pods"), *CHILD_KINDS):
        settings.watching.label_selectors[(group, plural) if group else plural] = \
            f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
    # A listing (at start-up, after a watch gap) comes in pages: kopf decodes each whole before handing on its
    # objects, so thousands of jobs and pods would be in memory at once, each with all its fields.
    settings.watching.chunk_size = LIST_PAGE_SIZE


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any) -> None:
    cfg: OperatorConfig = getattr(memo, "cfg", None) or OperatorConfig.from_env()
    if getattr(memo, "gc_hold", None) is None:  # once, also when kopf retries this handler
        memo.gc_hold = StartupHold()
        memo.gc_hold.hold()  # until the first listings are in and their passes done (collector.py)
        when_indexed(memo.gc_hold.indexed, READ_KINDS)
    apply_settings(settings, cfg)
    if not install_fast_json():
        logger.warning("kopf's watch decoding is not where kubepool expects it: watching with the standard json")
    if not install_relist_deletions():
        logger.warning("kopf's watch streams are not where kubepool expects them: deletions during a watch gap "
                       "(a re-list) are not seen until the operator restarts")
    own = own_namespace()
    # kopf's indexes are live views, created before the startup handlers run: captured once, here.
    if cfg.kueue and WORKLOAD_INDEX not in kwargs:
        raise kopf.PermanentError("kueue is on but its handlers are not registered: run `python -m kubepool.controller`")
    indexes = {name: kwargs[name] for name in (*INDEXES, *OPTIONAL_INDEXES) if name in kwargs}
    indexes.update(jobwatch.new_indexes() | podwatch.new_indexes())  # the operator's own
    op = new_operator(cfg, new_api(settings), indexes=indexes,
                      placeholder_namespace=resolve_placeholder_namespace(cfg, own))
    op.view.track_open_jobs()  # the job handlers and the status writer report every change of a claim from here on
    op.view.track_pool_changes()  # and the pool handlers count the pool index's changes
    memo.op = op
    if not take_over_streams(op):
        logger.warning("kopf's watch streams or readiness are not where kubepool expects them: MLJob, pod, Service "
                       "and NetworkPolicy events go through kopf's handlers (more CPU and memory per object)")
    if cfg.leader_election:
        # `python -m kubepool.controller` waited for the lease before kopf started; `kopf run` waits here.
        elector: LeaderElector | None = getattr(memo, "elector", None)
        if elector is None:
            elector = memo.elector = new_elector(cfg, own)
        # Renewed (or taken) now, before kopf's watches start: kopf's own start-up may have outlasted the renew
        # deadline since `__main__` took the lease, and a pass skipped for not leading is not run again.
        await elector.acquire(op.api)
        op.leading = elector.leading
        memo.keeper = asyncio.get_running_loop().create_task(elector.keep(op.api, _stop_process))
    if cfg.namespaces and op.placeholder_namespace not in cfg.namespaces:
        logger.warning("placeholder namespace %r is not watched: warm capacity cannot follow its placeholders",
                       op.placeholder_namespace)
    op.queue.recheck = asyncio.get_running_loop().create_task(op.queue.recheck_forever())
    memo.gc_release = asyncio.get_running_loop().create_task(memo.gc_hold.release_when_settled(op.queue.idle))
    if not settings.peering.standalone:
        try:
            scope = () if settings.peering.clusterwide else cfg.namespaces
            if not await op.api.ensure_peering(PEERING_NAME, scope):
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
    for name in ("keeper", "gc_release"):
        task: asyncio.Task[None] | None = getattr(memo, name, None)
        if task is not None:
            task.cancel()
    if op is not None:
        give_back_streams()
        op.close()
        elector: LeaderElector | None = getattr(memo, "elector", None)
        if elector is not None:
            await elector.release(op.api)  # the next replica takes over at once
        if isinstance(op.post_event, EventPoster):
            await op.post_event.drain()  # the last transitions' Events, before the client closes
        await op.api.close()


# The kinds (group, plural) every pass reads, all listed before the first pass runs. Not Kueue's Workloads: where
# their CRD is gone, nothing would ever run (kopf's readiness, which the release also waits for, covers them
# where they are watched).
READ_KINDS = ((naming.GROUP, naming.MLJOB_PLURAL), (naming.GROUP, naming.POOL_PLURAL), ("", "pods"), ("", "nodes"))


def take_over_streams(op: OperatorState) -> bool:
    """kopf's streams start after the startup handlers: from their first listing on, each MLJob event goes to
    jobwatch, each pod event to podwatch, each Service and NetworkPolicy event to jobchildren, past kopf's
    per-object tasks and memory. kopf runs no handler before every first listing is in; these events come sooner,
    in the stream itself, so the work queue holds every pass they ask for until then (kopf_fence.when_indexed:
    the kinds a pass reads listed, and kopf's readiness on). Where either cannot be done, nothing is taken over
    and kopf's handlers, which wait for kopf's readiness themselves, do the work. Whether it was done."""
    intakes: dict[tuple[str, str], Callable[[OperatorState, str | None, dict[str, Any]], None]] = {
        (naming.GROUP, naming.MLJOB_PLURAL): jobwatch.seen, ("", "pods"): podwatch.seen,
        **dict.fromkeys(CHILD_KINDS, child_seen)}
    if all(take_over(*kind, functools.partial(intake, op)) for kind, intake in intakes.items()) \
            and when_indexed(op.queue.release, READ_KINDS):
        op.queue.hold()
        return True
    give_back_streams()
    return False


def give_back_streams() -> None:
    for kind in ((naming.GROUP, naming.MLJOB_PLURAL), ("", "pods"), *CHILD_KINDS):
        take_over(*kind, None)


def new_elector(cfg: OperatorConfig, own_namespace: str | None) -> LeaderElector:
    timing = Timing(cfg.lease_seconds, cfg.lease_renew_deadline_seconds, cfg.lease_retry_seconds)
    return LeaderElector(resolve_lease_namespace(cfg, own_namespace), cfg.lease_name, timing)


def own_namespace() -> str | None:
    return (SA_DIR / "namespace").read_text().strip() if (SA_DIR / "namespace").is_file() else None


def _stop_process() -> None:
    """The lease is lost: stop as on SIGTERM (kopf's graceful shutdown); the pod restarts as a standby."""
    os.kill(os.getpid(), signal.SIGTERM)
