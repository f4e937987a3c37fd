"""A job's Service or NetworkPolicy deleted: the watch's event (`jobchildren.child_seen`, then `child_deleted`) makes
the job's next pass write them again, also when the deletion lands while a pass is writing them (over the FakeApi);
no other event of those streams asks for anything."""

from __future__ import annotations

from typing import Any

from kubepool import naming
from kubepool.controller import jobchildren
from kubepool.controller.jobreconcile import reconcile_job
from support.factories import job, pool
from support.operator import operator_state

KEY = ("ns", "train")
SERVICE = ("Service", naming.service_name("train"))
POLICY = ("NetworkPolicy", naming.network_policy_name("train"))


async def test_a_deleted_service_is_written_again_by_the_next_pass() -> None:
    op, api, _ = operator_state([job(targetInstances=2)], [pool(max_nodes=3)])
    await reconcile_job(op, KEY)
    del api.objects[SERVICE]
    jobchildren.child_deleted(op, KEY, "uid-train")
    await reconcile_job(op, KEY)
    assert SERVICE in api.objects


async def test_a_child_deleted_while_a_pass_writes_the_children_is_written_again() -> None:
    """`kubectl delete service,networkpolicy`: the Service's deletion wakes a pass, which finds the NetworkPolicy
    still there; the NetworkPolicy goes while that pass writes. Its pass must not be skipped as already written
    (a fresh-clone run's NetworkPolicy never came back)."""
    op, api, _ = operator_state([job(targetInstances=2)], [pool(max_nodes=3)])
    await reconcile_job(op, KEY)
    create = api.create_if_absent

    async def policy_deleted_after_the_create_found_it(obj: dict[str, Any]) -> bool:
        found = await create(obj)
        if obj["kind"] == "NetworkPolicy":
            del api.objects[POLICY]
            jobchildren.child_deleted(op, KEY, "uid-train")
        return found

    del api.objects[SERVICE]
    jobchildren.child_deleted(op, KEY, "uid-train")
    api.create_if_absent = policy_deleted_after_the_create_found_it  # type: ignore[method-assign]
    await reconcile_job(op, KEY)
    api.create_if_absent = create  # type: ignore[method-assign]
    assert SERVICE in api.objects and POLICY not in api.objects
    await reconcile_job(op, KEY)  # the pass the NetworkPolicy's deletion asked for
    assert POLICY in api.objects, "the NetworkPolicy deleted during a pass was never written again"


async def test_the_streams_deletion_event_of_a_jobs_service_has_it_written_again() -> None:
    """The Service's own body as the watch delivers it (its labels name the job and its uid)."""
    op, api, _ = operator_state([job(targetInstances=2)], [pool(max_nodes=3)])
    await reconcile_job(op, KEY)
    body = api.objects.pop(SERVICE)
    jobchildren.child_seen(op, "DELETED", body)
    await reconcile_job(op, KEY)
    assert SERVICE in api.objects


async def test_other_events_and_other_objects_of_the_child_streams_ask_for_nothing() -> None:
    op, api, _ = operator_state([job(targetInstances=2)], [pool(max_nodes=3)])
    await reconcile_job(op, KEY)
    written = dict(op.children.ready)
    service, policy = api.objects[SERVICE], api.objects[POLICY]
    for kind in (None, "ADDED", "MODIFIED"):
        jobchildren.child_seen(op, kind, service)
        jobchildren.child_seen(op, kind, policy)
    foreign = {**service, "metadata": {**service["metadata"], "labels": {
        k: v for k, v in service["metadata"]["labels"].items() if k != naming.LABEL_MANAGED_BY}}}
    jobchildren.child_seen(op, "DELETED", foreign)
    jobchildren.child_seen(op, "DELETED", {"kind": "Service"})  # no metadata at all: not raised into kopf's stream
    assert op.children.ready == written and written and not op.children.deletions
