"""An MLJob → what DescribeTrainingJob and ListTrainingJobs answer (pure): the request echoed back as given
(translate.ANNOTATION_REQUEST), the status SageMaker's clients read, derived from the job's phase and times."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kubepool.sagemaker_api.translate import ANNOTATION_REQUEST

ARN_ACCOUNT = "000000000000"  # the ARNs' account field: kubepool has no AWS account
_STATUS = {"DONE": "Completed", "FAILED": "Failed", "CANCELLED": "Stopped"}
_FAILED_SECONDARY = {"DeadlineExceeded": "MaxRuntimeExceeded"}


def job_arn(region: str, namespace: str, name: str) -> str:
    """The job's ARN; the namespace stands where AWS puts the account's resources path."""
    return f"arn:aws:sagemaker:{region}:{ARN_ACCOUNT}:training-job/{namespace}/{name}"


def name_of_arn(arn: str) -> tuple[str, str] | None:
    """(namespace, name) of a training job ARN of ours; None for anything else."""
    head, _, path = arn.partition(":training-job/")
    namespace, _, name = path.partition("/")
    return (namespace, name) if head.startswith("arn:aws:sagemaker:") and namespace and name else None


def _ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def statuses(job: dict[str, Any]) -> tuple[str, str]:
    """(TrainingJobStatus, SecondaryStatus) of an MLJob."""
    st = job.get("status") or {}
    phase, reason = st.get("phase"), st.get("reason")
    if phase in _STATUS:
        primary = _STATUS[phase]
        return primary, _FAILED_SECONDARY.get(str(reason), primary) if primary == "Failed" else primary
    if (job.get("spec") or {}).get("cancel"):
        return "Stopping", "Stopping"
    if phase == "RUNNING":
        return "InProgress", "Training"
    return "InProgress", "LaunchingMLInstances" if st.get("admittedAt") else "Starting"


def transitions(job: dict[str, Any]) -> list[dict[str, Any]]:
    """SecondaryStatusTransitions from the job's times: Starting, LaunchingMLInstances, Training, the end."""
    st = job.get("status") or {}
    created = _ts(job["metadata"].get("creationTimestamp"))
    admitted, started, ended = _ts(st.get("admittedAt")), _ts(st.get("startTime")), _ts(st.get("completionTime"))
    primary, secondary = statuses(job)
    steps: list[tuple[str, float | None, str]] = [
        ("Starting", created, "Starting the training job"),
        ("LaunchingMLInstances", admitted, "Launching the instances (pods) on the ComputePools"),
        ("Training", started, "Training in progress"),
    ]
    if primary in ("Completed", "Failed", "Stopped", "Stopping"):
        message = st.get("message") or {"Completed": "Training job completed", "Stopping": "Stopping the job"}.get(
            primary, primary)
        steps.append((secondary, ended or _ts(_now_iso()), message))
    out: list[dict[str, Any]] = []
    for status, start, message in steps:
        if start is None:
            continue
        if out:
            out[-1]["EndTime"] = start
        out.append({"Status": status, "StartTime": start, "StatusMessage": message})
    return out


def _now_iso() -> str:
    return datetime.now().astimezone().isoformat()


def request_of(job: dict[str, Any]) -> dict[str, Any]:
    raw = ((job["metadata"].get("annotations") or {}).get(ANNOTATION_REQUEST)) or "{}"
    out: dict[str, Any] = json.loads(raw)
    return out


def describe(job: dict[str, Any], region: str) -> dict[str, Any]:
    """DescribeTrainingJob's answer for an MLJob this server made."""
    meta, st = job["metadata"], job.get("status") or {}
    primary, secondary = statuses(job)
    created = _ts(meta.get("creationTimestamp"))
    started, ended = _ts(st.get("startTime")), _ts(st.get("completionTime"))
    req = request_of(job)
    out: dict[str, Any] = {
        **{k: v for k, v in req.items() if k != "TrainingJobName"},
        "TrainingJobName": meta["name"], "TrainingJobArn": job_arn(region, meta["namespace"], meta["name"]),
        "TrainingJobStatus": primary, "SecondaryStatus": secondary,
        "SecondaryStatusTransitions": transitions(job),
        "StoppingCondition": req.get("StoppingCondition") or {},
        "CreationTime": created,
        "LastModifiedTime": ended or started or _ts(st.get("admittedAt")) or created,
        "ModelArtifacts": {"S3ModelArtifacts": ((st.get("outputs") or {}).get("modelArtifacts")) or ""},
    }
    if not (st.get("outputs") or {}).get("modelArtifacts"):
        out.pop("ModelArtifacts")  # SageMaker too names it only once the model was uploaded
    if started is not None:
        out["TrainingStartTime"] = started
    if ended is not None:
        out["TrainingEndTime"] = ended
        seconds = int(ended - (started or ended))
        out["TrainingTimeInSeconds"] = out["BillableTimeInSeconds"] = seconds
    if primary == "Failed":
        out["FailureReason"] = f"{st.get('reason') or 'Failed'}: {st.get('message') or ''}".rstrip(": ")
    return out


def summary(job: dict[str, Any], region: str) -> dict[str, Any]:
    """ListTrainingJobs' TrainingJobSummary of an MLJob."""
    d = describe(job, region)
    return {k: d[k] for k in ("TrainingJobName", "TrainingJobArn", "CreationTime", "TrainingEndTime",
                              "LastModifiedTime", "TrainingJobStatus", "SecondaryStatus") if k in d}
