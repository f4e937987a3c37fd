"""An output or checkpoint claim of a job of several instances must be ReadWriteMany: every instance writes to it
from its own node (pure: the step that refuses, on what the operator read of the claims)."""

from __future__ import annotations

from kubepool.api import JobPhase
from kubepool.controller.admission import Decision
from kubepool.controller.jobstatus import Observed, compute_job_status
from kubepool.controller.jobsteps import refused_volumes
from kubepool.controller.vocabulary import VOLUME_NOT_SHARED
from support.factories import T0, job

PVC = {"persistentVolumeClaim": {"claimName": "results"}}


def test_a_read_write_once_output_of_two_instances_fails_the_job_naming_the_mode_it_needs() -> None:
    j = job(targetInstances=2, output=PVC)
    st = compute_job_status(j, Observed(pods=[], now=T0, decision=Decision(True, granted=2),
                                        claim_modes={"results": ["ReadWriteOnce"]}))
    assert (st.phase, st.reason) == (JobPhase.FAILED, VOLUME_NOT_SHARED)
    assert st.message is not None and "spec.output.persistentVolumeClaim" in st.message
    assert "ReadWriteOnce" in st.message and "[ReadWriteMany]" in st.message and st.admitted_at is None


def test_what_is_refused_and_what_is_not() -> None:
    two_ckpt = job(targetInstances=2, checkpoint={"persistentVolumeClaim": {"claimName": "ckpt"}})
    assert "spec.checkpoint.persistentVolumeClaim: PersistentVolumeClaim ckpt is ReadWriteOncePod" in refused_volumes(
        two_ckpt, 2, {"ckpt": ["ReadWriteOncePod"]})
    assert refused_volumes(two_ckpt, 2, {"ckpt": ["ReadWriteMany"]}) == ""
    assert refused_volumes(two_ckpt, 2, {"ckpt": ["ReadWriteOnce", "ReadWriteMany"]}) == ""
    assert refused_volumes(two_ckpt, 1, {"ckpt": ["ReadWriteOnce"]}) == ""  # one instance, one node
    assert refused_volumes(two_ckpt, 2, {"ckpt": None}) == ""  # no such claim: the pods say so
    assert refused_volumes(two_ckpt, 2, {}) == ""  # not read (an admitted job)
