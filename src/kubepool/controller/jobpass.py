"""PURE: what one pass over an unfinished MLJob's status shares: what it observed (`Observed`), the instance
entries of the status, and the pass itself (`Pass`), which the steps in `jobsteps` read and write. The reasons
it gives are in `vocabulary`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kubepool import naming, objectmeta
from kubepool.api import Backend, ConditionStatus, InstanceStatus, JobPhase, MLJob, MLJobSpec, MLJobStatus
from kubepool.controller import vocabulary
from kubepool.controller.admission import Decision
from kubepool.controller.builders.common import Placement
from kubepool.controller.observed import PodView


@dataclass(frozen=True)
class Observed:
    """Everything the job's status depends on besides the job itself."""

    pods: Sequence[PodView]
    now: datetime
    decision: Decision | None = None  # for a job not admitted yet
    backend: Backend = Backend.PODS  # resolved (spec or operator default)
    kuberay_installed: bool = False
    # Labels of each Secret a channel takes credentials from (None: no such Secret); read before admission only.
    credentials: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)
    # Access modes of each claim every instance writes (builders.pods.shared_claims; None: no such claim); read
    # before admission and on a resize only.
    claim_modes: Mapping[str, Sequence[str] | None] = field(default_factory=dict)
    refused: str = ""  # the API server's last refusal of a write of the job's children ("": none since)
    # How long a head-mode job waits, after its head ended, for workers still keeping their outputs (OperatorConfig)
    worker_grace_seconds: int = 30
    # The job's instance layout, as the pass computed it once (builders.common.laid_out; None: computed here)
    layout: Sequence[Placement] | None = None





def instances_of(job: MLJob, layout: Sequence[Placement], granted: int, pods: Sequence[PodView],
                 attempt: int) -> list[InstanceStatus]:
    # An instance can have two pods for a while: one leaving (deleted by a shrink) and its successor (KubeRay
    # names pods itself, so a grow right after a shrink makes a new one at once). The live one is the instance.
    mine = {p.instance_id: p for p in sorted((p for p in pods if p.attempt == attempt), key=lambda p: not p.deleting)}
    out = []
    for inst in layout[:granted]:
        pod = mine.get(inst.instance_id)
        out.append(InstanceStatus(
            instance_id=inst.instance_id, group=inst.group, rank_in_group=inst.rank,
            host=naming.sagemaker_host(inst.instance_id),
            pod=pod.name if pod else naming.pod_name(objectmeta.name(job), inst.group, inst.rank, attempt),
            pod_uid=(pod.uid or None) if pod else None,
            node=pod.node if pod else None, ready=bool(pod and pod.ready),
            phase=(vocabulary.TERMINATING if pod.deleting and not pod.terminated else pod.phase) if pod else None,
            exit_code=pod.exit_code if pod else None, message=vocabulary.cut(pod.message) if pod else None,
        ))
    return out


def first_admitted(st: MLJobStatus) -> datetime | None:
    """When the job was first admitted: activeDeadlineSeconds counts from here, across retries (the Admitted
    condition keeps its transition time while it stays True; admittedAt restarts with each attempt)."""
    cond = next((c for c in st.conditions if c.type == vocabulary.ADMITTED_TYPE and c.status == ConditionStatus.TRUE), None)
    return cond.last_transition_time if cond is not None and cond.last_transition_time else st.admitted_at


def finish_status(st: MLJobStatus, phase: JobPhase, reason: str, message: str, now: datetime) -> None:
    st.phase, st.reason, st.message = phase, reason, vocabulary.cut(message)
    st.completion_time = st.completion_time or now


@dataclass
class Pass:
    """What the steps of one pass over an unfinished job share. `st` is the status being built."""

    job: MLJob
    st: MLJobStatus
    obs: Observed
    # Instances whose pod was scheduled and not yet leaving, as the previous status recorded them.
    placed_before: set[int]
    layout: Sequence[Placement]  # every instance of the job, in id order (the pass's, `Observed.layout`)
    current: list[PodView] = field(default_factory=list)  # the pods of the attempt that runs (set by _observe)
    head: PodView | None = None

    @property
    def spec(self) -> MLJobSpec:
        return self.job.spec

    @property
    def now(self) -> datetime:
        return self.obs.now

    def finish(self, phase: JobPhase, reason: str, message: str) -> bool:
        finish_status(self.st, phase, reason, message, self.now)
        return True

    def observe_instances(self) -> None:
        self.st.instances = instances_of(self.job, self.layout, len(self.st.instances), self.obs.pods, self.st.attempt)
