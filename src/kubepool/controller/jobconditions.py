"""PURE: an MLJob's conditions from the status its steps decided: each condition type's truth and reason, in
the order the status lists them. A condition keeps its transition time while unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from kubepool.api import Condition, ConditionStatus, JobPhase, MLJobStatus
from kubepool.controller import vocabulary


def job_conditions(prev: Sequence[Condition], st: MLJobStatus, ready_ok: bool, now: datetime,
                   generation: int | None) -> list[Condition]:
    """Admitted, InstancesReady, Complete, Failed, Suspended. Suspended as in Job: True while paused, False once
    resumed (reason Resumed)."""
    phase = st.phase
    old = {c.type: c for c in prev}
    suspended = st.reason == vocabulary.SUSPENDED and phase is JobPhase.PENDING
    was = old.get(vocabulary.SUSPENDED_TYPE)
    resumed = was is not None and (was.status == ConditionStatus.TRUE or was.reason == vocabulary.RESUMED)
    ended_badly = phase in (JobPhase.FAILED, JobPhase.CANCELLED)
    want = [
        (vocabulary.ADMITTED_TYPE, st.admitted_at is not None,
         vocabulary.ADMITTED if st.admitted_at else (st.reason or vocabulary.PENDING)),
        (vocabulary.INSTANCES_READY_TYPE, ready_ok,
         vocabulary.INSTANCES_READY if ready_ok else vocabulary.WAITING_FOR_INSTANCES),
        (vocabulary.COMPLETE_TYPE, phase is JobPhase.DONE,
         vocabulary.COMPLETED if phase is JobPhase.DONE else vocabulary.NOT_COMPLETE),
        (vocabulary.FAILED_TYPE, ended_badly, (st.reason or vocabulary.FAILED) if ended_badly else vocabulary.NOT_FAILED),
        (vocabulary.SUSPENDED_TYPE, suspended,
         vocabulary.SUSPENDED if suspended else vocabulary.RESUMED if resumed else vocabulary.NOT_SUSPENDED),
    ]
    out = []
    for ctype, true, reason in want:
        status = ConditionStatus.TRUE if true else ConditionStatus.FALSE
        before = old.get(ctype)
        since = before.last_transition_time if before is not None and before.status == status else now
        message = (st.message or "") if true or ctype == vocabulary.ADMITTED_TYPE else ""
        out.append(Condition(type=ctype, status=status, reason=reason, message=message[:vocabulary.MESSAGE_MAX],
                             last_transition_time=since, observed_generation=generation))
    return out
