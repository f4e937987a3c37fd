"""MLJob → DescribeTrainingJob and pod logs → CloudWatch Logs, as pure functions; the token walk is the SageMaker
SDK 2.257 tailer's (sagemaker.logs.log_stream: a page per call from the last forward token until one is empty)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubepool.sagemaker_api import logs, status
from kubepool.sagemaker_api.errors import AwsError
from kubepool.sagemaker_api.translate import ANNOTATION_REQUEST

REQ = {"TrainingJobName": "j", "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2},
       "StoppingCondition": {"MaxRuntimeInSeconds": 60}}


def _job(phase: str | None = None, reason: str | None = None, cancel: bool = False, **st: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {ANNOTATION_REQUEST: json.dumps(REQ)}},
            "spec": {"cancel": cancel}, "status": {"phase": phase, "reason": reason, **st}}


@pytest.mark.parametrize("job,expected", [
    (_job(), ("InProgress", "Starting")),
    (_job("PENDING", admittedAt="2026-01-01T00:00:01Z"), ("InProgress", "LaunchingMLInstances")),
    (_job("RUNNING"), ("InProgress", "Training")),
    (_job("RUNNING", cancel=True), ("Stopping", "Stopping")),
    (_job("DONE"), ("Completed", "Completed")),
    (_job("FAILED", "HeadFailed"), ("Failed", "Failed")),
    (_job("FAILED", "DeadlineExceeded"), ("Failed", "MaxRuntimeExceeded")),
    (_job("CANCELLED", "Cancelled", cancel=True), ("Stopped", "Stopped")),
])
def test_statuses(job, expected):
    assert status.statuses(job) == expected


def test_describe_echoes_the_request_and_reads_the_status():
    job = _job("FAILED", "PayloadFailed", message="label column 'y' is missing",
               admittedAt="2026-01-01T00:00:01Z", startTime="2026-01-01T00:00:03Z",
               completionTime="2026-01-01T00:00:13Z")
    d = status.describe(job, "eu-west-1")
    assert d["ResourceConfig"] == REQ["ResourceConfig"] and d["StoppingCondition"] == REQ["StoppingCondition"]
    assert d["TrainingJobArn"] == "arn:aws:sagemaker:eu-west-1:000000000000:training-job/ns/j"
    assert status.name_of_arn(d["TrainingJobArn"]) == ("ns", "j")
    assert d["FailureReason"] == "PayloadFailed: label column 'y' is missing"
    assert d["TrainingTimeInSeconds"] == 10 and "ModelArtifacts" not in d
    assert [(t["Status"], t.get("EndTime")) for t in d["SecondaryStatusTransitions"]] == [
        ("Starting", d["CreationTime"] + 1), ("LaunchingMLInstances", d["CreationTime"] + 3),
        ("Training", d["TrainingEndTime"]), ("Failed", None)]
    assert all("StatusMessage" in t for t in d["SecondaryStatusTransitions"])  # the SDK prints them
    done = status.describe(_job("DONE", outputs={"modelArtifacts": "s3://b/p/j/output/model.tar.gz"}), "r")
    assert done["ModelArtifacts"] == {"S3ModelArtifacts": "s3://b/p/j/output/model.tar.gz"}


LOG = "".join(f"2026-01-01T00:00:0{i // 2}.{i:09d}Z line {i}\n" for i in range(7)) + "not a stamped line\n"


def test_parse_log_keeps_stamped_lines():
    events = logs.parse_log(LOG)
    assert [e["message"] for e in events] == [f"line {i}" for i in range(7)]
    assert events[2]["timestamp"] == events[0]["timestamp"] + 1000


def _tail(events: list[dict[str, Any]], limit: int, start_time: int = 0) -> list[str]:
    """sagemaker.logs.log_stream's loop."""
    out: list[str] = []
    token = None
    while True:
        page = logs.get_events(events, {"startTime": start_time, "startFromHead": True, "limit": limit,
                                        **({"nextToken": token} if token else {})})
        token = page["nextForwardToken"]
        if not page["events"]:
            return out
        out += [e["message"] for e in page["events"]]


def test_the_tailers_walk_reads_every_line_once_and_ends():
    events = logs.parse_log(LOG)
    assert _tail(events, 3) == [f"line {i}" for i in range(7)]
    assert _tail(events, 100, start_time=events[4]["timestamp"]) == ["line 4", "line 5", "line 6"]
    last = logs.get_events(events, {"startFromHead": True})
    more = logs.get_events(events + logs.parse_log("2026-01-01T00:00:09.0Z late\n"),
                           {"startFromHead": True, "nextToken": last["nextForwardToken"]})
    assert [e["message"] for e in more["events"]] == ["late"]  # a forward token resumes where it stopped
    tail = logs.get_events(events, {"limit": 2})  # without startFromHead: the newest
    assert [e["message"] for e in tail["events"]] == ["line 5", "line 6"]
    back = logs.get_events(events, {"limit": 2, "nextToken": tail["nextBackwardToken"]})
    assert [e["message"] for e in back["events"]] == ["line 3", "line 4"]


def test_streams_and_their_names():
    job = _job("RUNNING", instances=[{"host": "algo-2", "pod": "j-b-0"}, {"host": "algo-1", "pod": "j-a-0"},
                                     {"host": "algo-3", "pod": None}])
    streams = logs.streams_of(job)
    assert [s.name for s in streams] == ["j/algo-1-1767225600", "j/algo-2-1767225600"]  # only instances with pods
    assert logs.parse_stream_name(streams[0].name) == ("j", "algo-1")
    assert logs.parse_stream_name("j/other") is None
    page = logs.describe_streams(streams, "j/", False, 1, None)
    assert [s["logStreamName"] for s in page["logStreams"]] == [streams[0].name]
    page = logs.describe_streams(streams, "j/", False, 1, page["nextToken"])
    assert [s["logStreamName"] for s in page["logStreams"]] == [streams[1].name] and "nextToken" not in page


def test_filter_interleaves_and_matches_terms():
    a = logs.parse_log("2026-01-01T00:00:01Z epoch 1 loss 0.5\n2026-01-01T00:00:03Z done\n")
    b = logs.parse_log("2026-01-01T00:00:02Z epoch 1 loss 0.4\n")
    out = logs.filter_events({"a": a, "b": b}, {})
    assert [(e["logStreamName"], e["message"]) for e in out["events"]] == [
        ("a", "epoch 1 loss 0.5"), ("b", "epoch 1 loss 0.4"), ("a", "done")]
    hits = logs.filter_events({"a": a, "b": b}, {"filterPattern": '"loss 0.4"'})["events"]
    assert [e["logStreamName"] for e in hits] == ["b"]
    page = logs.filter_events({"a": a, "b": b}, {"limit": 2})
    assert len(page["events"]) == 2 and logs.filter_events({"a": a, "b": b}, {"nextToken": page["nextToken"]})[
        "events"][0]["message"] == "done"
    for bad in ('{ $.level = "x" }', "[ip, user]", "?a ?b", '"open'):
        with pytest.raises(AwsError):
            logs.filter_events({"a": a}, {"filterPattern": bad})


def test_only_the_training_log_group():
    logs.check_group(logs.LOG_GROUP)
    with pytest.raises(AwsError) as e:
        logs.check_group("/aws/sagemaker/ProcessingJobs")
    assert e.value.code == "ResourceNotFoundException"
    with pytest.raises(AwsError):
        logs.decode_token("x/1", "f")
