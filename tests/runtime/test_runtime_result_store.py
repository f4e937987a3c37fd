"""The payload's outcome kept on the job's MLJob (runtime.result_store) and read back by the SDK
(jobs.results): what is kept, by which instance, how large, and that a log line decides nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kubepool import naming
from kubepool.contract import (
    ENV_NAMESPACE,
    ENV_POD_NAME,
    ENV_TERMINATION_LOG,
    RESULT_MAX_BYTES,
    RESULT_WORKER_MAX_BYTES,
    Entrypoint,
    Group,
    JobContract,
    RunMode,
)
from kubepool.jobs.results import RemoteError, ResultUnavailable, decode, stored_result
from kubepool.runtime import result_store
from kubepool.runtime.launcher import report
from kubepool.runtime.result import ExecutionResult
from kubepool.runtime.result import stored_result as encode

ENV = {ENV_POD_NAME: "j-0-0", ENV_NAMESPACE: "team"}


def contract(mode: RunMode = RunMode.HEAD) -> JobContract:
    return JobContract(job_name="j", namespace="team", job_uid="u", target_instances=3, min_instances=3,
                       groups=[Group(name="g", instance_type="cpu", count=3)], entrypoint=Entrypoint(path="m.py"),
                       mode=mode)


class Recorder:
    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.fail = fail

    def __call__(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        if self.fail:
            raise self.fail
        self.calls.append((namespace, name, body))

    def annotations(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for _, _, body in self.calls:
            out.update(body["metadata"]["annotations"])
        return out


def test_the_head_keeps_its_value_on_its_own_job_and_the_sdk_reads_it() -> None:
    patch = Recorder()
    assert result_store.store(contract(), 0, ExecutionResult(True, 0, value={"acc": 0.9}), ENV, patch) is None
    assert [(ns, name) for ns, name, _ in patch.calls] == [("team", "j")]
    doc = stored_result(patch.annotations(), 0, "j-0-0")
    assert doc is not None and decode(doc).unwrap() == {"acc": 0.9}
    # A result written by another pod (an earlier attempt's) is not this attempt's.
    assert stored_result(patch.annotations(), 0, "j-0-1") is None


def test_report_prints_no_result_line(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    patch = Recorder()
    env = {**ENV, ENV_TERMINATION_LOG: str(tmp_path / "t")}
    report(ExecutionResult(True, 0, value=42), contract(), 0, env, patch)
    assert "KUBEPOOL_RESULT" not in capsys.readouterr().out
    assert naming.result_annotation(0) in patch.annotations()


def test_workers_keep_only_failures_and_only_when_they_run_the_payload() -> None:
    ok, bad = ExecutionResult(True, 0, value=1), ExecutionResult(False, 1, error="ValueError: x", traceback="tb")
    for mode, res, kept in [(RunMode.HEAD, ok, False), (RunMode.HEAD, bad, False), (RunMode.PARALLEL, ok, False),
                            (RunMode.PARALLEL, bad, True), (RunMode.SAGEMAKER, bad, True)]:
        patch = Recorder()
        result_store.store(contract(mode), 2, res, ENV, patch)
        assert bool(patch.calls) is kept, (mode, res)
    patch = Recorder()
    result_store.store(contract(RunMode.PARALLEL), 2, bad, ENV, patch)
    failed = decode(stored_result(patch.annotations(), 2, None))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="ValueError: x") as err:
        failed.unwrap()
    assert isinstance(err.value.__cause__, RemoteError)


def test_a_value_too_large_is_dropped_and_says_why() -> None:
    big = ExecutionResult(True, 0, value=b"x" * RESULT_MAX_BYTES)
    doc = encode(big, 0, "p", RESULT_MAX_BYTES)
    assert doc.data is None and doc.success and "over the" in (doc.dropped or "")
    with pytest.raises(ResultUnavailable, match="kept no result: the return value takes"):
        decode(doc)


def test_a_long_failure_keeps_the_end_of_its_traceback() -> None:
    tb = "Traceback (most recent call last):\n" + "  frame\n" * 5000 + "ZeroDivisionError: division by zero"
    doc = encode(ExecutionResult(False, 1, error="ZeroDivisionError: division by zero", traceback=tb), 3, "p",
                 RESULT_WORKER_MAX_BYTES)
    assert doc.data is not None and len(doc.data) <= RESULT_WORKER_MAX_BYTES
    got = decode(doc)
    assert got.traceback.endswith("ZeroDivisionError: division by zero") and got.traceback.startswith("...")


def test_an_unpicklable_value_becomes_its_repr() -> None:
    doc = encode(ExecutionResult(True, 0, value=threading.Lock()), 0, "p", RESULT_MAX_BYTES)
    assert "lock" in decode(doc).value


def test_a_refused_write_is_reported_not_raised() -> None:
    why = result_store.store(contract(), 0, ExecutionResult(True, 0), ENV, Recorder(fail=PermissionError("403")))
    assert why is not None and "cannot keep the result on MLJob team/j" in why and "403" in why


def test_malformed_annotations_are_refused_clearly() -> None:
    with pytest.raises(ResultUnavailable, match="malformed result of instance 0"):
        stored_result({naming.result_annotation(0): "{not json"}, 0, None)


def test_a_large_head_result_goes_to_the_output_and_comes_back_only_unchanged(tmp_path: Any) -> None:
    """Over the annotation's limit, the head's value is written under spec.output (here the PVC's mount) and the
    annotation keeps its SHA-256; the SDK reads it back, and refuses (without unpickling) an object that changed."""
    from kubepool.api.mljob import OutputLocation, PvcSource
    from kubepool.contract import OutputTarget
    from kubepool.jobs.results import output_reader

    c = contract().model_copy(update={"output": OutputTarget(location="pvc://out/runs", local_path=str(tmp_path))})
    value = {"weights": b"w" * (RESULT_MAX_BYTES * 2)}
    patch = Recorder()
    assert result_store.store(c, 0, ExecutionResult(True, 0, value=value), ENV, patch,
                              upload=result_store.output_upload(c, ENV)) is None
    doc = stored_result(patch.annotations(), 0, "j-0-0")
    assert doc is not None and doc.data is None and doc.location == "pvc://out/runs/j/output/results/j-0-0.pkl"
    kept_file = tmp_path / "j" / "output" / "results" / "j-0-0.pkl"
    assert doc.size == kept_file.stat().st_size > RESULT_MAX_BYTES

    def read_claim(claim: str, path: str) -> bytes:
        assert (claim, path) == ("out", "runs/j/output/results/j-0-0.pkl")
        return kept_file.read_bytes()

    fetch = output_reader(OutputLocation(persistent_volume_claim=PvcSource(claim_name="out", sub_path="runs")), read_claim)
    assert decode(doc, fetch).unwrap() == value
    kept_file.write_bytes(kept_file.read_bytes().replace(b"www", b"wwx", 1))  # anyone who may write the claim
    with pytest.raises(ResultUnavailable, match="not the result the job's head kept"):
        decode(doc, fetch)
    with pytest.raises(ResultUnavailable, match="this client cannot read"):
        decode(doc)


def test_a_large_result_without_an_output_is_dropped_and_says_how_to_keep_it() -> None:
    patch = Recorder()
    result_store.store(contract(), 0, ExecutionResult(True, 0, value=b"x" * RESULT_MAX_BYTES), ENV, patch,
                       upload=lambda uri, blob: pytest.fail("no spec.output: nothing is uploaded"))
    doc = stored_result(patch.annotations(), 0, "j-0-0")
    assert doc is not None and doc.location is None and "spec.output" in (doc.dropped or "")


class Refused(Exception):
    """As lightkube's ApiError for a 422 (the results policy: the operator has not listed this pod's uid yet)."""

    class status:  # noqa: N801 - lightkube's attribute
        code = 422


def test_a_write_refused_until_the_operator_lists_the_pod_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(result_store.time, "sleep", lambda s: None)
    refusals = [Refused(), Refused()]
    patch = Recorder()

    def flaky(namespace: str, name: str, body: dict[str, Any]) -> None:
        if refusals:
            raise refusals.pop()
        patch(namespace, name, body)

    assert result_store.store(contract(), 0, ExecutionResult(True, 0, value=1), ENV, flaky) is None
    assert not refusals and naming.result_annotation(0) in patch.annotations()
    # Any other failure is not retried: the log says why the result was not kept.
    why = result_store.store(contract(), 0, ExecutionResult(True, 0, value=1), ENV, Recorder(fail=RuntimeError("no")))
    assert why is not None and "RuntimeError: no" in why


def _with_store(secret: str | None = "results-keys", endpoint: str | None = None) -> JobContract:
    from kubepool.contract import OutputTarget

    store = OutputTarget(location="s3://results/team", s3_uri="s3://results/team", s3_endpoint_url=endpoint)
    return contract().model_copy(update={"results_store": store, "results_store_secret": secret})


def test_without_an_output_a_large_result_goes_to_the_operators_store_and_comes_back() -> None:
    """The head writes to the operator's results store with the store's own (prefixed) credentials, never the
    payload's AWS_* ones; the SDK reads it at the endpoint the result names, with the client's credentials."""
    from kubepool.contract import RESULTS_STORE_ENV_PREFIX
    from kubepool.jobs.results import output_reader
    from support.s3 import CREDENTIALS, client, s3_server

    with s3_server() as url:
        client(url).create_bucket(Bucket="results")
        env = {**ENV, **{RESULTS_STORE_ENV_PREFIX + k: v for k, v in CREDENTIALS.items()}}
        value = {"weights": b"w" * (3 << 20)}
        patch = Recorder()
        assert result_store.store(_with_store(endpoint=url), 0, ExecutionResult(True, 0, value=value), env, patch) is None
        doc = stored_result(patch.annotations(), 0, "j-0-0")
        assert doc is not None and doc.data is None and doc.endpoint_url == url
        assert doc.location == "s3://results/team/j/output/results/j-0-0.pkl"
        with pytest.MonkeyPatch.context() as mp:  # the SDK's own credentials
            for k, v in CREDENTIALS.items():
                mp.setenv(k, v)
            assert decode(doc, output_reader(None, store_endpoint=doc.endpoint_url)).unwrap() == value


def test_a_namespace_without_the_stores_secret_keeps_the_limit_and_names_the_secret() -> None:
    patch = Recorder()
    c = _with_store()
    assert result_store.output_upload(c, ENV) is None
    result_store.store(c, 0, ExecutionResult(True, 0, value=b"x" * RESULT_MAX_BYTES), ENV, patch)
    doc = stored_result(patch.annotations(), 0, "j-0-0")
    assert doc is not None and doc.location is None
    assert "spec.output" in (doc.dropped or "") and "Secret results-keys" in (doc.dropped or "")


def test_the_jobs_own_output_wins_over_the_store() -> None:
    from kubepool.contract import OutputTarget

    c = _with_store().model_copy(update={"output": OutputTarget(location="s3://mine/out", s3_uri="s3://mine/out")})
    uploads: list[str] = []
    doc = result_store.kept(c, 0, ExecutionResult(True, 0, value=b"x" * RESULT_MAX_BYTES), "j-0-0",
                            lambda uri, blob: uploads.append(uri))
    assert uploads == ["s3://mine/out/j/output/results/j-0-0.pkl"] and doc.endpoint_url is None
    assert result_store.store_missing(c, ENV) == ""


def test_the_sdk_reads_s3_outside_spec_output_only_when_the_job_has_none() -> None:
    from kubepool.api.mljob import OutputLocation, PvcSource
    from kubepool.jobs.results import output_reader

    with pytest.raises(ResultUnavailable, match="outside the job's spec.output"):
        output_reader(OutputLocation(persistent_volume_claim=PvcSource(claim_name="out")))("s3://elsewhere/x.pkl")
