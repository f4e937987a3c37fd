"""PURE: an MLJob's status from its spec, previous status, observed pods, admission decision and the time,
decided by the named, ordered steps of `jobsteps`, its conditions by `jobconditions`; and what of a change must be written at once (`decisive`). No I/O,
no clock. The ComputePool's status is in `poolstatus`."""

from __future__ import annotations

from typing import Any

from kubepool import naming, objectmeta
from kubepool.api import JobPhase, MLJob, MLJobStatus
from kubepool.api.mljob import JobOutputs
from kubepool.contract import RunMode, output_artifacts
from kubepool.controller.builders.common import laid_out
from kubepool.controller.builders.jobcontract import output_target
from kubepool.controller.builders.layout import layout_record
from kubepool.controller.jobconditions import job_conditions
from kubepool.controller.jobpass import Observed, first_admitted, instances_of
from kubepool.controller.jobsteps import advance

# Observed is part of this module's face (the job state machine's words are in `vocabulary`).
__all__ = ["Observed", "compute_job_status", "decisive", "ends", "first_admitted", "status_changed"]


def compute_job_status(job: MLJob, obs: Observed) -> MLJobStatus:
    """The job's next status. Finished jobs keep their phase; instance entries still follow the pods."""
    prev = job.status or MLJobStatus()
    # Shallow: the steps only ever assign st's fields (never change a list or an entry in place), so the
    # previous status, which other readers hold, stays as it was; a deep copy was most of a pass's CPU.
    st = prev.model_copy()
    st.target_instances, st.min_instances = job.spec.resolved_target(), job.spec.resolved_min()
    layout = laid_out(job, obs.layout)  # once per status: the steps share it
    st.pools = ",".join(dict.fromkeys(p.pool for p in layout))
    st.instance_layout = layout_record(job)  # what every reader derives from the spec and `prev` (builders.layout)
    generation = objectmeta.generation(job)
    st.observed_generation = generation
    if prev.phase is not None and prev.phase.finished:
        if st.instances:
            # A finished job's record outlives its pods (KubeRay's all go when the job ends): an instance whose
            # pod is gone keeps what was last seen of it.
            seen = {p.instance_id for p in obs.pods if p.attempt == st.attempt}
            last = {i.instance_id: i for i in prev.instances}
            st.instances = [i if i.instance_id in seen or i.instance_id not in last else last[i.instance_id]
                            for i in instances_of(job, layout, len(st.instances), obs.pods, st.attempt)]
    else:
        advance(job, st, obs, layout)
        # Only where a dashboard runs: head mode (the others start no Ray) with spec.ray.dashboard on.
        if st.admitted_at is not None and st.phase is JobPhase.RUNNING and job.spec.ray.dashboard \
                and job.spec.mode is RunMode.HEAD:
            head = f"{naming.sagemaker_host(0)}.{naming.service_name(job.metadata['name'])}"
            st.ray_dashboard = f"http://{head}:{naming.RAY_DASHBOARD_PORT}"
    if st.phase is JobPhase.DONE and st.outputs is None:
        st.outputs = outputs_of(job)
    st.ready_instances = sum(1 for i in st.instances if i.ready)
    st.ready = f"{st.ready_instances}/{st.target_instances}"
    st.selector = f"{naming.LABEL_JOB}={job.metadata['name']}"
    st.conditions = job_conditions(prev.conditions, st, st.ready_instances >= st.min_instances, obs.now, generation)
    return st


def outputs_of(job: MLJob) -> JobOutputs | None:
    """Where a DONE job's outputs are (SageMaker's ModelArtifacts), from spec.output; instance 0's archives."""
    target = output_target(job.spec.output)
    if target is None:
        return None
    model, data = output_artifacts(target.location, objectmeta.name(job))
    return JobOutputs(model_artifacts=model, output_data=data)


def status_changed(old: MLJobStatus | None, new: MLJobStatus) -> bool:
    """Whether `new` differs from `old` on the wire (what the API server would store)."""
    return (old.wire() if old else {}) != new.wire()


def ends(prev: MLJobStatus | None, new: MLJobStatus) -> bool:
    """Whether `new` is the status that finishes the job: DONE, FAILED or CANCELLED, and `prev` was not."""
    return (new.phase is not None and new.phase.finished
            and not (prev is not None and prev.phase is not None and prev.phase.finished))


def decisive(st: MLJobStatus) -> tuple[Any, ...]:
    """What a status change must be written for at once: phase, reason, admission, attempt, times, the set of
    instances and every condition's truth. The rest (an instance's node, pod phase and readiness, the ready
    count in the message) follows a job's pods through every step of their start-up: the status writer sends
    those changes together, a little later (or with the next decisive one)."""
    return (st.phase, st.reason, st.admitted_at, st.attempt, st.queued_at, st.start_time, st.completion_time, len(st.instances),
            st.observed_generation, st.target_instances, st.min_instances, st.pools,
            tuple((c.type, c.status) for c in st.conditions))
