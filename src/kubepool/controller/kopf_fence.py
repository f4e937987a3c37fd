"""Everything of kubepool that depends on kopf's behaviour beyond its documented API, in one place (kopf is
pinned below 2; tests/operator/unit/test_operator_kopf_fence.py runs kopf's real event processing through each
of these, so a kopf upgrade that moves them fails a test instead of the operator):

- `install_fast_json`: kopf decodes every watch event with the standard library's json, a fifth of the
  operator's CPU in a burst of new jobs (every pod event carries the whole pod); orjson decodes the same lines
  several times faster. Swapped in where kopf looks `json` up, or not at all. Each event's object loses its
  managedFields on the way, a pod most of its spec (`lighten`: read by nothing; most of a pod's body); listed
  objects lose the same in `relist_deletions`, which sees every object kopf lists.
- `NoDiffBaseStorage`: kopf deep-copies every watched body to build a diff base for change handlers, of which
  kubepool has none: it builds none (`build` returns None, which kopf's annotated contract does not allow but
  its processing treats as "no essence").
- `DemoteRoutine`, `quiet_routine_logs`: kopf's routine success lines are recognised by their text and demoted to
  DEBUG; unless DEBUG is on, kopf's per-object logger (`OBJECT_LOGGER`, read from kopf) logs from WARNING up, so
  no record is even built for them.
- `install_relist_deletions`: after a watch gap long enough for the API server to answer 410 Gone (its watch
  cache or etcd compacted past the stream's resourceVersion; an API server restart), kopf lists again and
  resumes, but an object deleted in the gap is simply absent from the list: no DELETED event, and kopf's
  indexes keep it forever. Each stream remembers what it has seen; when a re-list ends, what it lacks is
  delivered as a DELETED event (before kopf's end-of-listing mark), so the indexes and every handler resync.
  `take_over` hands one kind's events (pods: most of them) to the operator in the stream itself, past kopf's
  per-event processing.
- `install_lean_readiness`: kopf holds every handler until each object of the first listings is indexed, with
  one toggle per listed object in one set, and wakes every waiting worker on each toggle added or dropped:
  N² wake-ups for N listed objects (a restart with thousands of jobs and pods never got to its first pass).
  Waiters are woken only when the set's answer changes; `when_indexed` callbacks run when it turns on with the
  kinds they need listed."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, cast

import kopf
import orjson
from kopf._cogs.aiokits import aiotoggles
from kopf._core.actions import loggers as kopf_loggers

from kubepool import naming, objectmeta
from kubepool.controller.observed import POD_SPEC_READ


# --- watch decoding -------------------------------------------------------------------------------------------
def loads(text: str | bytes) -> Any:
    """orjson's decoding; the standard library's for what orjson refuses. (orjson reads integers beyond 64 bits
    as floats; the API server never sends them: it decodes every number into Go's int64 or float64.)

    A watch event's object comes without its managedFields, and a pod without the parts of its spec the views of
    observed.py do not read (POD_SPEC_READ): neither kopf nor any handler reads them, and they are most of a pod's
    body. Dropped here, they are freed at once instead of living as long as the event waits in kopf's queues,
    where under load every tracked container adds to each collection."""
    try:
        event = orjson.loads(text)
    except orjson.JSONDecodeError:
        event = json.loads(text)
    if isinstance(event, dict) and isinstance(event.get("object"), dict):
        lighten(event["object"])
    return event


def lighten(obj: dict[str, Any]) -> None:
    """What the operator keeps of a watched object (in place): no managedFields, and of a pod's spec only
    POD_SPEC_READ."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    spec = obj.get("spec")
    if obj.get("kind") == "Pod" and isinstance(spec, dict):
        obj["spec"] = {k: spec[k] for k in POD_SPEC_READ if k in spec}


class _Json:
    """The part of the `json` module kopf's API client uses."""

    loads = staticmethod(loads)
    dumps = staticmethod(json.dumps)
    JSONDecodeError = json.JSONDecodeError


def install_fast_json() -> bool:
    """Make kopf's watch streams decode with `loads`. False (and nothing changed) if kopf no longer decodes them
    with a module-level `json` in kopf._cogs.clients.api."""
    from kopf._cogs.clients import api

    current = getattr(api, "json", None)
    if current is _Json:
        return True
    if current is not json:
        return False
    api.json = _Json  # type: ignore[assignment,attr-defined]  # kopf's module, swapped for one with the same three names
    return True


# --- watch gaps -----------------------------------------------------------------------------------------------
log = logging.getLogger(__name__)
# What each watch stream has seen and not seen deleted, by (resource, namespace) → uid → a slim body (what the
# handlers of a DELETED event read: identity and labels; the spec only of kubepool's own kinds (a deleted MLJob's
# pools are woken), and of a CRD only its group, which kopf's resource observer re-scans on any CRD event). One is
# kept for every object the operator watches, so what it holds is a live job's cost several times over.
_SEEN: dict[tuple[Any, Any], dict[str, dict[str, Any]]] = {}
_KEEP_META = ("name", "namespace", "uid", "labels", "resourceVersion", "creationTimestamp")
_SPEC_KEPT_OF = naming.GROUP + "/"  # apiVersion prefix of the kinds whose deleted body keeps its spec


def _slim(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    out: dict[str, Any] = {k: body[k] for k in ("apiVersion", "kind") if k in body}
    out["metadata"] = {k: meta[k] for k in _KEEP_META if k in meta}
    spec = body.get("spec")
    if body.get("kind") == "CustomResourceDefinition":
        out["spec"] = {"group": (spec or {}).get("group", "")}
    elif spec is not None and str(body.get("apiVersion", "")).startswith(_SPEC_KEPT_OF):
        out["spec"] = spec
    return out


def relist_deletions(stream: Callable[..., AsyncIterator[Any]], listed_mark: object) -> Callable[..., AsyncIterator[Any]]:
    """Wraps kopf's `continuous_watch` (one listing, then watching until the stream ends): objects an earlier
    stream of the same resource and namespace saw, and this stream's listing lacks, come as DELETED events right
    before `listed_mark`. The first listing of a process has nothing to compare with."""

    async def continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
        seen = _SEEN.setdefault((kwargs.get("resource"), kwargs.get("namespace")), {})
        listed: set[str] | None = set()  # uids of this stream's listing; None once it ended
        what = _kind_of(kwargs.get("resource"))
        async for event in stream(**kwargs):
            if event is listed_mark:
                _LISTED.add(what)
                if listed is not None:
                    gone = [uid for uid in seen if uid not in listed]
                    if gone:
                        log.warning("%s re-listed after a watch gap: %d object(s) deleted meanwhile, handled as "
                                    "deleted now", kwargs.get("resource"), len(gone))
                    intake = _TAKEN.get(what)
                    for uid in gone:
                        if intake is not None:
                            intake("DELETED", seen.pop(uid))
                        else:
                            yield {"type": "DELETED", "object": seen.pop(uid)}
                listed = None
                yield event
                continue
            if isinstance(event, dict) and isinstance(event.get("object"), dict):
                obj = event["object"]
                obj_uid: str = objectmeta.uid(obj)
                kind = event.get("type")
                if kind is None:  # listed: decoded by kopf's own client, not `loads`
                    lighten(obj)
                if obj_uid and kind == "DELETED":
                    seen.pop(obj_uid, None)
                elif obj_uid and kind in (None, "ADDED", "MODIFIED"):
                    seen[obj_uid] = _slim(obj)
                    if listed is not None and kind is None:
                        listed.add(obj_uid)
                intake = _TAKEN.get(what)
                if intake is not None and kind in (None, "ADDED", "MODIFIED", "DELETED"):
                    intake(kind, obj)
                    continue
            yield event

    continuous_watch.__wrapped__ = stream  # type: ignore[attr-defined]
    return continuous_watch


def take_over(group: str, plural: str, intake: Callable[[str | None, dict[str, Any]], None] | None) -> bool:
    """From now on every object event of kopf's `group`/`plural` streams (type None: listed; ADDED, MODIFIED,
    DELETED, and those `relist_deletions` makes) goes to `intake` instead of kopf's processing, in the stream's
    task, as it arrives; kopf's end-of-listing mark still reaches kopf, after `intake` had every listed object,
    so kopf's readiness (every index filled before any handler runs) still waits for the listing. `intake` must
    not raise. None gives the kind back to kopf. False (and nothing changed) if `install_relist_deletions` did
    not wrap kopf's streams."""
    from kopf._cogs.clients import watching

    if not hasattr(getattr(watching, "continuous_watch", None), "__wrapped__"):
        return False
    if intake is None:
        _TAKEN.pop((group, plural), None)
    else:
        _TAKEN[(group, plural)] = intake
    return True


_TAKEN: dict[tuple[str, str], Callable[[str | None, dict[str, Any]], None]] = {}
_LISTED: set[tuple[str, str]] = set()  # the kinds (group, plural) a stream has listed in this process


def _kind_of(resource: Any) -> tuple[str, str]:
    return getattr(resource, "group", None) or "", getattr(resource, "plural", None) or ""


def install_relist_deletions() -> bool:
    """Make kopf's watch streams report deletions missed in a watch gap (`relist_deletions`). False (and nothing
    changed) if kopf no longer streams through kopf._cogs.clients.watching.continuous_watch."""
    from kopf._cogs.clients import watching

    current = getattr(watching, "continuous_watch", None)
    mark = getattr(getattr(watching, "Bookmark", None), "LISTED", None)
    if current is None or mark is None:
        return False
    if hasattr(current, "__wrapped__"):
        return True
    watching.continuous_watch = relist_deletions(current, mark)
    return True


# --- start-up readiness --------------------------------------------------------------------------------------
_KopfToggleSet = aiotoggles.ToggleSet


class LeanToggleSet(_KopfToggleSet):
    """kopf's ToggleSet, notifying its waiters only when `is_on()` changed. What a waiter waits for is that
    answer alone, so a wake-up that leaves it unchanged only makes every waiter re-take the lock in turn. A
    toggle of the set turned on or off still notifies (kopf's Toggle.turn_to, unchanged)."""

    async def make_toggle(self, __val: bool = False, *, name: str | None = None) -> aiotoggles.Toggle:
        toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
        async with self._condition:
            before = self.is_on()
            self._toggles.add(toggle)
            self._notify_if_changed(before)
        return toggle

    async def drop_toggle(self, toggle: aiotoggles.Toggle) -> None:
        await self.drop_toggles([toggle])

    async def drop_toggles(self, toggles: Iterable[aiotoggles.Toggle]) -> None:
        async with self._condition:
            before = self.is_on()
            self._toggles.difference_update(toggles)
            self._notify_if_changed(before)

    def _notify_if_changed(self, before: bool) -> None:
        if self.is_on() != before:
            self._condition.notify_all()
            if self._fn is all and not before:  # kopf's readiness set: every listed object indexed
                due = [entry for entry in _ON_INDEXED if entry[0] <= _LISTED]
                for entry in due:
                    _ON_INDEXED.remove(entry)
                    entry[1]()


_ON_INDEXED: list[tuple[frozenset[tuple[str, str]], Callable[[], None]]] = []


def when_indexed(callback: Callable[[], None], kinds: Iterable[tuple[str, str]] = ()) -> bool:
    """Call `callback` once, the first time kopf's readiness set turns on after a stream of each of `kinds`
    ((group, plural)) has passed its first listing (`relist_deletions`): every object of those listings indexed
    by kopf or handed to its intake (`take_over`), every handler about to run. (kopf's set is also on for a
    moment before its first streams start, when it has watched nothing yet.) False (and never called) where
    `install_lean_readiness` did not install LeanToggleSet."""
    if aiotoggles.ToggleSet is not LeanToggleSet:
        return False
    _ON_INDEXED.append((frozenset(kinds), callback))
    return True


def install_lean_readiness() -> bool:
    """Make the toggle sets kopf creates from now on `LeanToggleSet`s (before `kopf.run`: kopf makes its
    readiness set when its orchestrator starts). False (and nothing changed) if kopf's ToggleSet no longer keeps
    its toggles and condition where LeanToggleSet reads them."""
    current = aiotoggles.ToggleSet
    if current is LeanToggleSet:
        return True
    probe = current(all)
    if current is not _KopfToggleSet or not isinstance(getattr(probe, "_toggles", None), set) \
            or not isinstance(getattr(probe, "_condition", None), asyncio.Condition):
        return False
    aiotoggles.ToggleSet = LeanToggleSet  # type: ignore[misc]  # kopf reads it from the module when it makes a set
    return True


# --- diff base ------------------------------------------------------------------------------------------------
class NoDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf builds a diff base for every event of every watched kind by deep-copying the whole body (status and
    managedFields too, dropped right after), for its change handlers (on.create/update/resume) alone. kubepool
    registers none: jobs and pools are acted on by their events' generations (jobwatch, poolwatch). So none is
    built, nor is a stored one looked up."""

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None  # the old half of a diff nothing reads

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, None)  # kopf treats None as "no essence": no diff, no change cause


# --- log output -----------------------------------------------------------------------------------------------
OBJECT_LOGGER = kopf_loggers.logger.name  # kopf's per-object logger: handler outcomes, and the Events it posts
# kopf's per-handler success lines (kopf/_core/actions/execution.py).
_ROUTINE = re.compile(r"Handler '[^']*' succeeded\.")
# kopf's per-object logger (every handler's and cause's success at INFO; its warnings and errors stay) and its
# liveness endpoint, an aiohttp server: one INFO line per probe, two every 10 s in the chart's pod.
_CHATTY = (OBJECT_LOGGER, "aiohttp.access")


class DemoteRoutine(logging.Filter):
    """Marks kopf's routine success lines as DEBUG and lets them through only when DEBUG is on. kopf's Event
    posting is a handler of its own logger, run before the root handlers filtered here, so the Events it posts
    do not change."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and record.name.startswith("kopf") and _ROUTINE.fullmatch(record.getMessage()):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def quiet_routine_logs() -> None:
    """After kopf.configure(): demote routine lines on the root handlers; unless DEBUG is on, kopf's per-object
    lines and the liveness probes' access lines below WARNING. kopf logs every handler run at INFO (~50 lines per
    job: a record built, its caller found, then dropped, for every handler of every watch event) and its liveness
    server every probe; the operator's own transitions, warnings and errors stay."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(DemoteRoutine())
    for name in _CHATTY:
        if not logging.getLogger(name).isEnabledFor(logging.DEBUG):
            logging.getLogger(name).setLevel(logging.WARNING)
