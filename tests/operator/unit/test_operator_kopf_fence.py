"""The kopf fence (kubepool.controller.kopf_fence): each piece alone, then kopf's real event processing run
through all of them, so a kopf upgrade that moves what they rely on fails here, not in the operator:
watch lines decoded by kopf's own `stream` with orjson, a pod event indexed and handled with no diff base
built, a ComputePool's creation handled with kopf's own diff base stored, kopf's success lines demoted."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import kopf
import orjson
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import api, patching, watching
from kopf._cogs.structs import references
from kopf._core.engines import indexing
from kopf._core.intents import registries
from kopf._core.reactor import inventory, orchestration, processing, queueing

from kubepool import naming
from kubepool.controller import handlers, kopf_fence, podwatch, view
from kubepool.controller.kopf_fence import DemoteRoutine, NoDiffBaseStorage
from kubepool.controller.main import apply_settings
from support.factories import pool
from support.operator import operator_state, wire

EVENT = {"type": "MODIFIED", "object": {"kind": "MLJob", "metadata": {"name": "ü-0", "resourceVersion": "12"},
                                         "spec": {"priority": -10, "x": 1.5, "ok": True, "none": None}}}
DIFFBASE_KEY = "last-handled-configuration"


# --- watch decoding -------------------------------------------------------------------------------------------
def test_installs_where_kopf_decodes_watch_events() -> None:
    assert kopf_fence.install_fast_json() is True
    assert api.json.loads is kopf_fence.loads  # what kopf's stream() calls for each line
    assert kopf_fence.install_fast_json() is True  # idempotent


def test_decodes_like_the_standard_library() -> None:
    line = json.dumps(EVENT)
    assert kopf_fence.loads(line) == json.loads(line) == EVENT
    edges = json.dumps({"max": 2**63 - 1, "min": -(2**63), "f": 1.7976931348623157e308, "tiny": 5e-324})
    assert kopf_fence.loads(edges) == json.loads(edges)
    assert kopf_fence.loads(b'{"a": [1, 2]}') == {"a": [1, 2]}


def test_watch_events_come_without_managed_fields() -> None:
    managed = [{"manager": "kubepool", "operation": "Apply", "fieldsV1": {"f:spec": {"f:image": {}}}}]
    event = {"type": "MODIFIED", "object": {**EVENT["object"], "metadata": {"name": "p", "managedFields": managed}}}
    assert kopf_fence.loads(json.dumps(event)) == {**event, "object": {**EVENT["object"], "metadata": {"name": "p"}}}
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 410}}  # no metadata: left as it is
    assert kopf_fence.loads(json.dumps(error)) == error
    assert kopf_fence.loads("[1]") == [1] and kopf_fence.loads('{"object": 3}') == {"object": 3}


def test_a_watched_pod_keeps_only_the_spec_fields_the_views_read() -> None:
    spec = {"nodeName": "n1", "hostname": "h", "subdomain": "j", "containers": [{"name": "c", "env": [{"name": "A"}]}],
            "volumes": [{"name": "v", "emptyDir": {}}], "affinity": {"podAntiAffinity": {}}}
    pod = {"kind": "Pod", "metadata": {"name": "j-0", "labels": {"a": "b"}}, "spec": spec, "status": {"phase": "Running"}}
    decoded = kopf_fence.loads(json.dumps({"type": "MODIFIED", "object": pod}))
    assert decoded["object"] == {**pod, "spec": {"nodeName": "n1", "hostname": "h", "subdomain": "j"}}
    assert set(kopf_fence.POD_SPEC_READ) == {"nodeName", "hostname", "subdomain"}
    node = {"kind": "Node", "metadata": {"name": "n1"}, "spec": {"taints": [], "unschedulable": True}}
    assert kopf_fence.loads(json.dumps({"type": "ADDED", "object": node}))["object"] == node  # other kinds whole


# --- start-up readiness --------------------------------------------------------------------------------------
def test_lean_readiness_is_what_kopf_makes_its_sets_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiotoggles, "ToggleSet", aiotoggles.ToggleSet)  # undone after the test
    assert kopf_fence.install_lean_readiness() is True
    assert type(aiotoggles.ToggleSet(all)) is kopf_fence.LeanToggleSet
    assert kopf_fence.install_lean_readiness() is True  # idempotent
    # kopf makes its readiness set when its orchestrator starts, through the module attribute swapped above (an
    # import of the class by name would keep kopf's own and this fence would do nothing).
    assert "aiotoggles.ToggleSet(all)" in inspect.getsource(orchestration.orchestrator)


async def _first_listing(toggle_set: type[aiotoggles.ToggleSet], objects: int,
                         monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[int]]:
    """kopf's own watcher, workers and event processing over a first listing of `objects` pods, with a readiness
    set of `toggle_set`: how often a waiter re-checked the set, and how many toggles were left each time a
    worker's processing went past it (kopf holds handlers until every listed object is indexed)."""
    pods = [{"type": None, "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"p{i}", "namespace": "ns", "uid": f"u{i}", "resourceVersion": str(i)}}} for i in range(objects)]

    async def listing(**_: Any) -> AsyncIterator[Any]:
        for event in pods:
            yield event
        yield watching.Bookmark.LISTED
        await asyncio.Event().wait()

    monkeypatch.setattr(watching, "infinite_watch", listing)
    indexed = toggle_set(all)
    checks, left = 0, []
    real_is_on = indexed.is_on

    def is_on() -> bool:
        nonlocal checks
        checks += 1
        return real_is_on()

    monkeypatch.setattr(indexed, "is_on", is_on)
    settings = kopf.OperatorSettings()
    settings.queueing.idle_timeout = settings.queueing.exit_timeout = 0.01
    resource = references.Resource("", "v1", "pods", kind="Pod", namespaced=True)
    real = functools.partial(processing.process_resource_event, lifecycle=kopf.lifecycles.all_at_once,
                             indexers=indexing.OperatorIndexers(), registry=registries.OperatorRegistry(),
                             settings=settings, memories=inventory.ResourceMemories(), memobase=kopf.Memo(),
                             resource=resource, event_queue=asyncio.Queue())

    async def processor(**kwargs: Any) -> Any:
        out = await real(**kwargs)
        left.append(len(indexed))
        return out

    kind_indexed = await indexed.make_toggle(name="pods")
    watcher = asyncio.create_task(queueing.watcher(namespace=None, settings=settings, resource=resource,
                                                   processor=processor, operator_indexed=indexed,
                                                   resource_indexed=kind_indexed))
    for _ in range(3000):
        if len(left) == objects:
            break
        await asyncio.sleep(0.01)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    return checks, left


async def test_a_first_listing_wakes_the_waiting_workers_once_not_once_per_object(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = 300
    kopf_checks, kopf_left = await _first_listing(aiotoggles.ToggleSet, objects, monkeypatch)
    lean_checks, lean_left = await _first_listing(kopf_fence.LeanToggleSet, objects, monkeypatch)
    # Both hold every handler until the whole listing is indexed (no toggle left when any processing goes on).
    assert kopf_left == lean_left == [0] * objects
    # kopf's own set is re-checked by every waiter for every object listed or indexed: quadratic. The lean one a
    # few times per object (before and after each change, once per waiter when it starts and when it is woken).
    assert kopf_checks > objects * objects / 4, kopf_checks
    assert lean_checks < 10 * objects, lean_checks


# --- watch gaps -----------------------------------------------------------------------------------------------
def _job(name: str, uid: str, rv: str) -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "spec": {"computePool": "cpu"}, "status": {"phase": "RUNNING"}}


async def test_a_relist_reports_what_was_deleted_in_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own infinite_watch: a listing, a watch cut by 410 Gone, a second listing without one job and with
    a job re-created under another's name. The second listing ends with DELETED events for both earlier jobs
    (before kopf's end-of-listing mark); the first listing has nothing to compare with."""
    from kopf._cogs.clients import fetching, watching

    assert kopf_fence.install_relist_deletions() is True
    assert kopf_fence.install_relist_deletions() is True  # idempotent
    listings = [[_job("a", "ua", "1"), _job("b", "ub", "2")], [_job("b", "ub2", "9")]]

    async def fetch_objs(**_: Any) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        yield listings.pop(0), "9"

    async def watch_objs(**_: Any) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "ERROR", "object": {"code": 410}}

    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    monkeypatch.setattr(kopf_fence, "_SEEN", {})
    monkeypatch.setattr(kopf_fence, "_LISTED", set())
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0
    resource = references.Resource("kubepool.dev", "v1alpha1", "mljobs-gap-test")
    seen = [e async for e in watching.infinite_watch(settings=settings, resource=resource, namespace="ns",
                                                    _iterations=2)]
    shown = [e.name if isinstance(e, watching.Bookmark) else (e["type"], e["object"]["metadata"]["uid"]) for e in seen]
    assert shown == [(None, "ua"), (None, "ub"), "LISTED", (None, "ub2"), ("DELETED", "ua"), ("DELETED", "ub"), "LISTED"]
    deleted = seen[4]["object"]
    assert deleted["metadata"]["name"] == "a" and deleted["spec"] == {"computePool": "cpu"} and "status" not in deleted
    assert kopf_fence._LISTED == {("kubepool.dev", "mljobs-gap-test")}, "the kind's listing is recorded (when_indexed)"


async def test_listings_come_in_pages_and_lightened_like_watch_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own listing (fetching.list_objs, through infinite_watch) with kubepool's settings: it asks for pages
    of LIST_PAGE_SIZE, and what it lists reaches the handlers as the watch's events do: no managedFields, a pod's
    spec only POD_SPEC_READ (kopf decodes listings itself, not through `loads`)."""
    from kopf._cogs.clients import watching

    from kubepool.controller.main import LIST_PAGE_SIZE

    def pod(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": name, "managedFields": [{"manager": "m"}]},
                "spec": {"nodeName": "n", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}

    pages = {"": {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5", "continue": "p2"},
                  "items": [pod("a")]},
             "p2": {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": [pod("b")]}}
    urls: list[str] = []

    async def get(url: str, **_: Any) -> dict[str, Any]:
        urls.append(url)
        token = re.search(r"continue=(\w+)", url)
        return pages[token.group(1) if token else ""]

    async def watch_objs(**_: Any) -> AsyncIterator[dict[str, Any]]:
        # 410 Gone ends kopf's continuous_watch (an empty stream would be re-watched for ever).
        yield {"type": "ERROR", "object": {"code": 410}}

    assert kopf_fence.install_relist_deletions()
    monkeypatch.setattr(api, "get", get)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    monkeypatch.setattr(kopf_fence, "_SEEN", {})
    settings = kopf.OperatorSettings()
    apply_settings(settings)
    settings.watching.reconnect_backoff = 0
    resource = references.Resource("", "v1", "pods", kind="Pod", namespaced=True)
    seen = [e async for e in watching.infinite_watch(settings=settings, resource=resource, namespace="ns",
                                                    _iterations=1) if isinstance(e, dict)]
    assert all(f"limit={LIST_PAGE_SIZE}" in u for u in urls) and len(urls) == 2
    assert [e["object"] for e in seen] == [{"kind": "Pod", "apiVersion": "v1", "metadata": {"name": n, "uid": n},
                                            "spec": {"nodeName": "n"}, "status": {"phase": "Running"}} for n in "ab"]


async def test_an_idle_objects_worker_goes_after_worker_idle_seconds() -> None:
    """kopf's own per-object worker, with kubepool's settings: it handles its object's event, then, with no
    further event for WORKER_IDLE_SECONDS, ends and drops the object's queue (kopf's default keeps it 5 s)."""
    from kopf._core.reactor import queueing

    from kubepool.controller.main import WORKER_IDLE_SECONDS

    settings = kopf.OperatorSettings()
    apply_settings(settings)
    handled: list[Any] = []

    async def processor(*, raw_event: Any, **_: Any) -> None:
        handled.append(raw_event)

    key = ("pods", "uid-1")
    stream = queueing.Stream(backlog=asyncio.Queue(), pressure=asyncio.Event())
    await stream.backlog.put({"type": "ADDED", "object": {}})
    streams: dict[Any, Any] = {key: stream}
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(queueing.worker(signaller=asyncio.Condition(), settings=settings, processor=processor,
                                           streams=streams, key=key), timeout=WORKER_IDLE_SECONDS + 2)
    assert handled == [{"type": "ADDED", "object": {}}] and streams == {}
    assert WORKER_IDLE_SECONDS <= loop.time() - started < 5


def test_a_deleted_bodys_slim_copy_keeps_what_kopf_and_the_handlers_read() -> None:
    """kopf's resource observer reads a CRD event's spec.group (even of a DELETED one); pods keep no spec."""
    crd = {"kind": "CustomResourceDefinition", "metadata": {"name": "x.g", "uid": "c"},
           "spec": {"group": "g", "versions": [{"schema": {"openAPIV3Schema": {}}}]}}
    assert kopf_fence._slim(crd)["spec"] == {"group": "g"}
    pod = {"kind": "Pod", "metadata": {"name": "p", "uid": "p", "labels": {"a": "b"}, "managedFields": [{}]},
           "spec": {"containers": []}, "status": {"phase": "Running"}}
    assert kopf_fence._slim(pod) == {"kind": "Pod", "metadata": {"name": "p", "uid": "p", "labels": {"a": "b"}}}


def test_a_slim_copy_keeps_the_spec_of_kubepools_kinds_alone() -> None:
    """A deleted MLJob's pools are woken (its spec read); of a Service, a NetworkPolicy (one kept per job) or a
    node, nothing past its identity and labels, nor anyone's owner references, is read."""
    meta = {"name": "x", "namespace": "ns", "uid": "u", "labels": {"a": "b"}, "resourceVersion": "3",
            "creationTimestamp": "t", "ownerReferences": [{"uid": "j"}], "annotations": {"n": "v"}}
    kept = {k: v for k, v in meta.items() if k not in ("ownerReferences", "annotations")}
    job = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": meta, "spec": {"computePool": "p"}}
    assert kopf_fence._slim(job) == {**job, "metadata": kept}
    for api_version, kind in (("v1", "Service"), ("networking.k8s.io/v1", "NetworkPolicy"), ("v1", "Node")):
        body = {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": {"ports": []}, "status": {}}
        assert kopf_fence._slim(body) == {"apiVersion": api_version, "kind": kind, "metadata": kept}


def test_only_kubepools_pods_services_and_network_policies_are_watched() -> None:
    """The label selector kopf's listing and watch requests carry (kopf's own `collect`, as its fetching reads it)."""
    settings = kopf.OperatorSettings()
    apply_settings(settings)
    mine = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
    for group, plural in (("", "pods"), ("", "services"), ("networking.k8s.io", "networkpolicies")):
        resource = references.Resource(group, "v1", plural, namespaced=True)
        assert settings.watching.label_selectors.collect(resource) == [mine], plural
    nodes = references.Resource("", "v1", "nodes", namespaced=False)
    assert settings.watching.label_selectors.collect(nodes) == []


# --- diff base ------------------------------------------------------------------------------------------------
def _body(kind: str) -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": kind,
            "metadata": {"name": "x", "namespace": "ns", "uid": "u", "resourceVersion": "7", "generation": 2,
                         "labels": {"a": "b"}, "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
                         "annotations": {"kubepool.dev/last-handled-configuration": "{}", "user/note": "n"}},
            "spec": {"targetInstances": 3, "env": [{"name": "A", "value": "1"}]},
            "status": {"phase": "RUNNING", "instances": [{"instanceId": 0}]}}


def test_no_diff_base_is_built_or_read() -> None:
    none = NoDiffBaseStorage(prefix="kubepool.dev", key=DIFFBASE_KEY)
    full = kopf.AnnotationsDiffBaseStorage(prefix="kubepool.dev", key=DIFFBASE_KEY)
    for kind in ("Pod", "Node", "MLJob", naming.POOL_KIND):
        assert none.build(body=kopf.Body(_body(kind))) is None
        stored = _body(kind)  # even one that carries a stored diff base (kopf's, from an older kubepool)
        stored["metadata"]["annotations"][f"kubepool.dev/{DIFFBASE_KEY}"] = '{"spec": {}}'
        assert full.fetch(body=kopf.Body(stored)) == {"spec": {}} and none.fetch(body=kopf.Body(stored)) is None


def test_no_handler_needs_a_diff_base() -> None:
    """What makes NoDiffBaseStorage safe: kopf reads a diff base only for change handlers (on.create, on.update,
    on.resume, on.delete, on.field), and the operator registers none."""
    registry = registries.get_default_registry()
    assert handlers.pool_event.__name__ in {h.id for h in registry._watching.get_all_handlers()}
    assert list(registry._changing.get_all_handlers()) == []


# --- log output -----------------------------------------------------------------------------------------------
def record(msg: str, name: str = "kopf.objects", level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


@pytest.mark.parametrize(("msg", "name", "level", "shown"), [
    ("Handler 'pod_event' succeeded.", "kopf.objects", logging.INFO, False),
    ("Handler 'reconcile_mljob/spec' succeeded.", "kopf.objects", logging.INFO, False),
    ("Handler 'pod_event' failed with an exception. Will retry.", "kopf.objects", logging.ERROR, True),
    ("MLJob ns/a: ttlSecondsAfterFinished passed; deleting it", "kubepool.controller.jobchildren", logging.INFO, True),
    ("Handler 'x' succeeded.", "someone.else", logging.INFO, True),
])
def test_routine_lines_are_demoted(msg: str, name: str, level: int, shown: bool) -> None:
    r = record(msg, name, level)
    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.INFO)
    try:
        assert DemoteRoutine().filter(r) is shown
    finally:
        root.setLevel(old)
    assert (r.levelno == logging.DEBUG) is (not shown)


# --- kopf's real processing through every fence ---------------------------------------------------------------
class _Response:
    """What kopf's `stream` reads of an aiohttp response: its lines, in chunks."""

    def __init__(self, lines: list[bytes]) -> None:
        self.content = self
        self._lines = lines

    async def iter_chunked(self, size: int) -> AsyncIterator[bytes]:
        for line in self._lines:
            yield line + b"\n"

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        pass


class _Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_kopf_processes_watch_events_through_every_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = {naming.LABEL_MANAGED_BY: naming.MANAGED_BY, naming.LABEL_JOB: "train", naming.LABEL_INSTANCE: "0"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0", "namespace": "ns", "uid": "p1",
                                                            "resourceVersion": "3", "labels": labels},
           "status": {"phase": "Running"}}
    cp = {**wire(pool()), "apiVersion": naming.API_VERSION, "kind": naming.POOL_KIND}
    cp["metadata"].update(uid="c1", resourceVersion="4")
    lines = [orjson.dumps({"type": "ADDED", "object": obj}) for obj in (pod, cp)]

    # 1. kopf's own watch-stream decoding, with the fast decoder installed where kopf looks it up.
    decoded: list[Any] = []
    real_loads = orjson.loads
    monkeypatch.setattr(kopf_fence.orjson, "loads", lambda text: decoded.append(text) or real_loads(text))
    assert kopf_fence.install_fast_json()

    async def request(**_: Any) -> _Response:
        return _Response(lines)

    monkeypatch.setattr(api, "request", request)
    events = [e async for e in api.stream("/watch", settings=kopf.OperatorSettings(), logger=logging.getLogger())]
    assert [e["object"]["kind"] for e in events] == ["Pod", "ComputePool"] and len(decoded) == 2

    # 2. kopf's processing of each event, with kubepool's settings and handlers (the default registry).
    settings = kopf.OperatorSettings()
    apply_settings(settings)
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBaseStorage)
    registry = registries.get_default_registry()
    assert handlers.pod_event.__name__ in {h.id for h in registry._watching.get_all_handlers()}
    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())
    assert set(view.INDEXES) <= set(indexers.indices)  # the handler ids the view reads
    op, _, _ = operator_state(placeholder_namespace="ops")
    op.view.indexes = {**{name: indexers.indices[name] for name in view.INDEXES}, **podwatch.new_indexes()}
    patches: list[dict[str, Any]] = []

    async def patch_obj(*, patch: Any, **_: Any) -> tuple[None, None]:
        patches.append(json.loads(json.dumps(dict(patch))))
        return None, None

    monkeypatch.setattr(patching, "patch_obj", patch_obj)
    log = _Recorded()
    kopf_logger = logging.getLogger("kopf")
    kopf_logger.addHandler(log)
    monkeypatch.setattr(kopf_logger, "level", logging.DEBUG)
    memories, memo = inventory.ResourceMemories(), kopf.Memo(op=op)
    resources = {"Pod": references.Resource("", "v1", "pods", kind="Pod", namespaced=True),
                 "ComputePool": references.Resource(naming.GROUP, "v1alpha1", naming.POOL_PLURAL,
                                                    kind=naming.POOL_KIND, namespaced=False)}
    try:
        for event in events:
            await processing.process_resource_event(
                lifecycle=kopf.lifecycles.all_at_once, indexers=indexers, registry=registry, settings=settings,
                memories=memories, memobase=memo, resource=resources[event["object"]["kind"]], raw_event=event,
                event_queue=asyncio.Queue(), no_throttling=True)
    finally:
        kopf_logger.removeHandler(log)
        op.close()

    # The pod: indexed and handled (its job's pass asked for), no diff base built, nothing patched for it.
    assert [p.name for p in op.view.pods(("ns", "train"))] == ["train-0"]
    assert op.queue.pending == {("ns", "train")}
    # The pool: indexed and handled (a status pass due); kopf wrote nothing to it (no diff base, no progress).
    assert "cpu" in op.queue.pools_due and list(op.view.pools()) == ["cpu"]
    assert patches == []
    # kopf's handler success lines, as kopf writes them now, are the ones demoted (and hidden while
    # DEBUG is off). Indexers' lines are terse: kopf writes them only in verbose mode, and they stay.
    succeeded = [r for r in log.records if r.levelno == logging.INFO and "succeeded" in r.getMessage()
                 and not r.getMessage().startswith("Indexer ")]
    assert {r.getMessage().split()[0] for r in succeeded} == {"Handler"}, [r.getMessage() for r in log.records]
    for r in succeeded:
        assert DemoteRoutine().filter(r) is logging.getLogger().isEnabledFor(logging.DEBUG), r.getMessage()
        assert r.levelno == logging.DEBUG


def test_kopfs_object_lines_are_not_even_built_below_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf logs each handler's success through its per-object logger (the one whose lines it posts as Events):
    unless DEBUG is on, quiet_routine_logs stops those records at the logger, before any is built; a handler's
    failure is still logged (and posted: kopf's posting level is WARNING)."""
    from kopf._core.actions import loggers

    objects = logging.getLogger(kopf_fence.OBJECT_LOGGER)
    assert loggers.logger is objects
    monkeypatch.setattr(objects, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "level", logging.INFO)  # as kopf.configure() without --verbose
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    built: list[logging.LogRecord] = []
    monkeypatch.setattr(objects, "makeRecord", lambda *a, **k: built.append(logging.Logger.makeRecord(objects, *a, **k))
                        or built[-1])
    for lg in (objects, logging.getLogger()):  # levels answered during the test are not kept after it
        monkeypatch.setattr(lg, "_cache", {})
    kopf_fence.quiet_routine_logs()
    cause_logger = loggers.LocalObjectLogger(body=kopf.Body({"metadata": {"name": "p", "namespace": "ns"}}),
                                             settings=kopf.OperatorSettings())
    cause_logger.info("Handler 'pod_event' succeeded.")
    cause_logger.error("Handler 'pod_event' failed with an exception. Will retry.")
    assert [r.levelno for r in built] == [logging.ERROR]
    settings = kopf.OperatorSettings()
    apply_settings(settings)
    assert settings.posting.level == logging.WARNING


async def test_the_liveness_probes_leave_no_access_lines() -> None:
    """kopf serves the liveness endpoint with aiohttp's server, whose access log writes a line per probe."""
    from aiohttp import ClientSession, web

    from support.standin_server import serve

    access = logging.getLogger("aiohttp.access")
    before = access.level
    access.setLevel(logging.INFO)  # as under kopf's logging configuration (INFO at the root)
    seen = _Recorded()
    access.addHandler(seen)

    async def healthz(_: web.Request) -> web.StreamResponse:
        return web.json_response({})

    try:
        async with serve(healthz) as url, ClientSession() as client:
            await (await client.get(f"{url}/healthz")).read()
            assert [r.levelno for r in seen.records] == [logging.INFO]  # aiohttp's default: a line per request
            kopf_fence.quiet_routine_logs()
            await (await client.get(f"{url}/healthz")).read()
            assert len(seen.records) == 1
    finally:
        access.removeHandler(seen)
        access.setLevel(before)


async def test_a_taken_over_kind_reaches_its_intake_in_the_stream_and_kopf_only_its_listing_mark(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own infinite_watch of pods, taken over: every listed and watched pod, and the deletion a re-list
    finds, goes to the intake, none to kopf; kopf's end-of-listing mark follows the listing's last pod into the
    intake (kopf's readiness waits for it). Another kind streams as before, and a kind given back is kopf's."""
    from kopf._cogs.clients import fetching, watching

    def pod(uid: str) -> dict[str, Any]:
        return {"kind": "Pod", "metadata": {"name": uid, "namespace": "ns", "uid": uid, "resourceVersion": "1"},
                "status": {"phase": "Pending"}}

    listings = [[pod("a"), pod("b")], [pod("b")]]

    async def fetch_objs(**_: Any) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        yield listings.pop(0), "9"

    async def watch_objs(**_: Any) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "MODIFIED", "object": {**pod("b"), "status": {"phase": "Running"}}}
        yield {"type": "ERROR", "object": {"code": 410}}

    assert kopf_fence.install_relist_deletions()
    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    monkeypatch.setattr(kopf_fence, "_SEEN", {})
    monkeypatch.setattr(kopf_fence, "_TAKEN", {})
    order: list[Any] = []
    assert kopf_fence.take_over("", "pods", lambda kind, body: order.append((kind, body["metadata"]["uid"])))
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0
    pods = references.Resource("", "v1", "pods", kind="Pod", namespaced=True)
    async for event in watching.infinite_watch(settings=settings, resource=pods, namespace="ns", _iterations=2):
        order.append(event.name if isinstance(event, watching.Bookmark) else ("kopf", event))
    assert order == [(None, "a"), (None, "b"), "LISTED", ("MODIFIED", "b"),
                     (None, "b"), ("DELETED", "a"), "LISTED", ("MODIFIED", "b")]

    listings[:] = [[pod("c")]]
    assert kopf_fence.take_over("", "pods", None)
    given_back = [e async for e in watching.infinite_watch(settings=settings, resource=pods, namespace="other",
                                                          _iterations=1) if isinstance(e, dict)]
    assert [(e["type"], e["object"]["metadata"]["uid"]) for e in given_back] == [(None, "c"), ("MODIFIED", "b")]


def test_no_kind_is_taken_over_where_kopfs_streams_are_not_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    from kopf._cogs.clients import watching

    async def unwrapped(**_: Any) -> AsyncIterator[Any]:
        yield None

    monkeypatch.setattr(watching, "continuous_watch", unwrapped)
    monkeypatch.setattr(kopf_fence, "_TAKEN", {})
    assert kopf_fence.take_over("", "pods", lambda kind, body: None) is False and kopf_fence._TAKEN == {}


def test_streams_are_taken_over_only_behind_a_queue_held_until_kopfs_readiness(monkeypatch: pytest.MonkeyPatch) -> None:
    """main.take_over_streams: MLJobs, pods, Services and NetworkPolicies go to the operator from the stream, and the work
    queue holds what they ask for until kopf's readiness set turns on; where that moment cannot be known (kopf's
    own readiness set), nothing is taken over and kopf's handlers, which wait for it themselves, do the work."""
    from kubepool.controller.main import take_over_streams

    assert kopf_fence.install_relist_deletions()
    monkeypatch.setattr(kopf_fence, "_TAKEN", {})
    monkeypatch.setattr(kopf_fence, "_ON_INDEXED", [])
    monkeypatch.setattr(aiotoggles, "ToggleSet", kopf_fence._KopfToggleSet)
    op, _, _ = operator_state()
    assert not take_over_streams(op) and kopf_fence._TAKEN == {} and op.queue.held is None

    assert kopf_fence.install_lean_readiness()
    assert take_over_streams(op) and op.queue.held is not None
    assert set(kopf_fence._TAKEN) == {("kubepool.dev", "mljobs"), ("", "pods"), ("", "services"),
                                      ("networking.k8s.io", "networkpolicies")}
    kinds, release = kopf_fence._ON_INDEXED.pop()
    assert kinds == {("kubepool.dev", "mljobs"), ("kubepool.dev", "computepools"), ("", "pods"), ("", "nodes")}
    release()  # kopf's readiness set turned on with those listed
    assert op.queue.held is None
