"""A job's shared children (headless Service, NetworkPolicy, Ray token Secret) are its own, and stay there:

* a job deleted and created again under the same name while the garbage collector has not yet removed the first
  one's children gets children owned by itself, not its predecessor's (which the collector then deletes);
* a Service or NetworkPolicy deleted while its job runs comes back.

The garbage collector is held with SIGSTOP on kube-controller-manager (the local cluster runs it without leader
election, so a pause costs nothing but time), which makes the same-name race certain instead of a matter of
milliseconds."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from faultkit import component_pid, job, record, sleep_cmd

from support.operator_cluster import Operator, wait_for


@contextlib.contextmanager
def garbage_collector_paused(cluster: Any) -> Iterator[None]:
    pid = component_pid(cluster, "kube-controller-manager")
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def child_names(name: str) -> dict[str, str]:
    from kubepool import naming

    return {"service": naming.service_name(name), "networkpolicy": naming.network_policy_name(name),
            "secret": naming.job_secret_name(name)}


def owners(kubectl: Any, namespace: str, kind: str, name: str) -> list[str] | None:
    """The owner uids of one object; None when it does not exist."""
    proc = kubectl("get", kind, name, "-n", namespace, "-o", "json")
    if proc.returncode != 0:
        assert "NotFound" in proc.stderr, proc.stderr
        return None
    return [o["uid"] for o in json.loads(proc.stdout)["metadata"].get("ownerReferences") or []]


def job_uid(kubectl: Any, namespace: str, name: str) -> str:
    return str(kubectl.json("get", "mljob", name, "-n", namespace)["metadata"]["uid"])


def wait_children_owned(kubectl: Any, namespace: str, name: str, uid: str, timeout: float, op: Operator) -> float:
    """Waits until every shared child of the job exists and is owned by `uid`; returns the seconds it took."""
    t0 = time.monotonic()
    names = child_names(name)

    def state() -> dict[str, list[str] | None]:
        return {kind: owners(kubectl, namespace, kind, names[kind]) for kind in names}

    try:
        wait_for(lambda: all(o == [uid] for o in state().values()), timeout,
                 f"the Service, NetworkPolicy and Secret of MLJob {name} owned by its uid {uid}")
    except AssertionError as e:
        raise AssertionError(f"{e}\nowners now (None: missing): {state()}\noperator:\n{op.logs()[-3000:]}") from None
    return time.monotonic() - t0


@pytest.mark.exclusive  # the cluster's controller-manager paused under every cluster test
def test_same_name_recreate_gets_its_own_children(cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                                  small_pool: Any) -> None:
    pool = small_pool(max_nodes=3)
    manifest = yaml.safe_dump(job("twin", pool, sleep_cmd(20)))
    kubectl("apply", "-n", namespace, "-f", "-", input=manifest, check=True)
    first = job_uid(kubectl, namespace, "twin")
    wait_children_owned(kubectl, namespace, "twin", first, 60, operator)
    with garbage_collector_paused(cluster):
        kubectl("delete", "mljob", "twin", "-n", namespace, "--wait=false", check=True)
        wait_for(lambda: kubectl("get", "mljob", "twin", "-n", namespace).returncode != 0, 20, "MLJob twin gone")
        kubectl("apply", "-n", namespace, "-f", "-", input=manifest, check=True)
        second = job_uid(kubectl, namespace, "twin")
        assert second != first
        # The new job's pass meets its predecessor's children (the collector is held): let it try.
        wait_for(lambda: (kubectl.json("get", "mljob", "twin", "-n", namespace).get("status") or {}).get("admittedAt"),
                 30, "the new MLJob twin admitted")
        time.sleep(3)
        assert owners(kubectl, namespace, "service", child_names("twin")["service"]) == [first], \
            "the garbage collector ran while paused: the race this test needs did not happen"
    resumed = time.monotonic()
    names = child_names("twin")

    def first_ones_gone() -> bool:
        return all(first not in (owners(kubectl, namespace, kind, names[kind]) or []) for kind in names)

    wait_for(first_ones_gone, 120, "the garbage collector removing the first MLJob twin's children", interval=0.2)
    collected = time.monotonic()
    took = wait_children_owned(kubectl, namespace, "twin", second, 30, operator)
    print(f"garbage collector: the first job's children gone {collected - resumed:.1f}s after it resumed; the "
          f"re-created job's own children there {took:.1f}s after that")
    record(cluster, "same-name-recreate", faults=1, jobs=2, lost=0, orphaned=0, converge_s=time.monotonic() - collected,
           gc_s=round(collected - resumed, 1))


def test_deleted_children_come_back(cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                    small_pool: Any) -> None:
    pool = small_pool(max_nodes=3)
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job("keep", pool, sleep_cmd(60))), check=True)
    uid = job_uid(kubectl, namespace, "keep")
    wait_children_owned(kubectl, namespace, "keep", uid, 60, operator)
    names = child_names("keep")
    t0 = time.monotonic()
    for kind in ("service", "networkpolicy"):
        kubectl("delete", kind, names[kind], "-n", namespace, "--wait=true", check=True)
    took = wait_children_owned(kubectl, namespace, "keep", uid, 30, operator)
    print(f"deleted Service and NetworkPolicy back {took:.1f}s after their deletion")
    record(cluster, "children-deleted", faults=2, jobs=1, lost=0, orphaned=0, converge_s=time.monotonic() - t0)
