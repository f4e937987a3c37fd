"""The `kubepool` CLI: parsing, output formats and exit codes against an in-memory cluster (no cluster)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from fakes import FakeKube

from kubepool import cli, contract
from kubepool.kube.errors import Forbidden, Invalid, NotFound, Unreachable


def test_submit_arguments_after_double_dash() -> None:
    args, script_args = cli.parse_args(["submit", "t.py", "--pool", "cpu", "--instances", "5", "--min-instances", "2",
                                        "--env", "A=1", "--wait", "--", "--epochs", "3"])
    assert (args.path, args.pool, args.instances, args.min_instances, args.wait) == ("t.py", "cpu", 5, 2, True)
    assert script_args == ["--epochs", "3"]


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        cli.parse_args(["submit", "t.py"])
    assert err.value.code == 2
    with pytest.raises(SystemExit):
        cli.parse_args(["list", "--", "x"])


@pytest.mark.parametrize(("err", "code"), [
    (NotFound("x", 404), 3), (Forbidden("x", 403), 4), (Unreachable("x"), 5), (Invalid("x", 422), 6),
    (TimeoutError("x"), 124), (ValueError("x"), 2), (FileNotFoundError("x"), 2), (KeyboardInterrupt(), 130),
])
def test_exit_codes(err: BaseException, code: int) -> None:
    assert cli.exit_code_for(err) == code


def test_table() -> None:
    assert cli.format_table(["A", "LONG"], [[1, None], ["xyz", "b"]]) == "A    LONG\n1\nxyz  b"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "job.py"
    p.write_text("print(1)\n")
    return p


def test_submit_list_status_logs_cancel(fake_kube: FakeKube, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["submit", str(script), "--pool", "cpu", "--instances", "3", "--min-instances", "2",
                     "--name", "j1", "--", "a"]) == 0
    assert capsys.readouterr().out.strip() == "team/j1"
    assert cli.main(["list", "--output", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)  # kubectl get's List of the objects
    assert (listed["kind"], listed["apiVersion"]) == ("List", "v1")
    (obj,) = listed["items"]
    assert (obj["kind"], obj["metadata"]["name"], obj["spec"]["targetInstances"]) == ("MLJob", "j1", 3)
    fake_kube.set_phase("j1", "RUNNING", readyInstances=3, targetInstances=3, minInstances=2, instances=[
        {"instanceId": i, "group": "homogeneousCluster", "rankInGroup": i, "host": f"algo-{i + 1}",
         "pod": f"j1-homogeneouscluster-{i}", "ready": True, "phase": "Running"} for i in range(3)])
    assert cli.main(["status", "j1"]) == 0
    out = capsys.readouterr().out
    assert "team/j1: RUNNING" in out and "3/3 ready, min 2" in out and "algo-3" in out
    assert cli.main(["status", "team/j1", "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["instances"]) == 3
    start, end = contract.LOG_START_MSG.splitlines(), contract.LOG_END_MSG.splitlines()
    worker = ["Local node IP: 127.0.0.2", "kubepool[1]: up", *start, "worker line", *end]
    fake_kube.logs = {0: ["head line"], 1: worker}
    assert cli.main(["logs", "j1", "--instance", "1"]) == 0
    assert capsys.readouterr().out == "worker line\n"  # what the payload printed, as Snowflake's get_logs
    assert cli.main(["logs", "j1", "--instance", "1", "--verbose"]) == 0
    assert capsys.readouterr().out == "\n".join(worker) + "\n"
    assert cli.main(["suspend", "j1"]) == 0
    assert fake_kube.jobs[("team", "j1")].spec.suspend is True
    assert cli.main(["resume", "j1"]) == 0
    assert fake_kube.jobs[("team", "j1")].spec.suspend is False
    assert cli.main(["cancel", "j1"]) == 0
    assert fake_kube.jobs[("team", "j1")].spec.cancel is True


def test_wait_exit_codes(fake_kube: FakeKube, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["submit", str(script), "--pool", "cpu", "--name", "w"])
    fake_kube.set_phase("w", "FAILED", message="HeadFailed: exit 1")
    assert cli.main(["wait", "w"]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "HeadFailed" in captured.err
    fake_kube.set_phase("w", "DONE")
    assert cli.main(["wait", "w"]) == 0
    cli.main(["submit", str(script), "--pool", "cpu", "--name", "p"])
    assert cli.main(["wait", "p", "--timeout", "0.2"]) == 124


def test_errors_are_one_line(fake_kube: FakeKube, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["submit", str(script), "--pool", "nope"]) == 3
    assert cli.main(["submit", str(script), "--pool", "cpu", "--instances", "1", "--min-instances", "2"]) == 2
    assert cli.main(["submit", str(script.parent), "--pool", "cpu"]) == 2
    assert cli.main(["status", "missing"]) == 3
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 4 and all(e.startswith("kubepool: error: ") for e in errors)
    assert "--entrypoint" in errors[2]


def test_no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert cli.main(["list"]) == 5
    assert "set KUBECONFIG" in capsys.readouterr().err


def test_pools(fake_kube: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["pools", "-o", "json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["items"]
    assert (doc["kind"], doc["metadata"]["name"], doc["spec"]["maxNodes"]) == ("ComputePool", "cpu", 4)
    assert cli.main(["pools"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["cpu", "CPU_X64_S", "-"]


def test_unreachable_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(config))
    assert cli.main(["list"]) == 5
    err = capsys.readouterr().err
    assert err.startswith("kubepool: error: list MLJobs: cannot reach the Kubernetes API") and err.count("\n") == 1


def test_output_formats(fake_kube: FakeKube, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["submit", str(script), "--pool", "cpu", "--name", "j1"])
    fake_kube.set_phase("j1", "FAILED", message="HeadFailed: exit 3")
    capsys.readouterr()
    assert cli.main(["list", "-o", "name"]) == 0
    assert capsys.readouterr().out == "mljob.kubepool.dev/j1\n"
    assert cli.main(["list", "-o", "yaml"]) == 0
    (row,) = yaml.safe_load(capsys.readouterr().out)["items"]
    assert (row["metadata"]["name"], row["status"]["phase"], row["status"]["message"]) == (
        "j1", "FAILED", "HeadFailed: exit 3")
    assert cli.main(["list"]) == 0
    assert "MESSAGE" not in capsys.readouterr().out
    assert cli.main(["list", "-o", "wide"]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split()[-1] == "MESSAGE" and line.endswith("HeadFailed: exit 3")
    assert cli.main(["status", "j1", "-o", "name"]) == 0
    assert capsys.readouterr().out == "mljob.kubepool.dev/j1\n"
    assert cli.main(["status", "j1", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["status"] == "FAILED"
    assert cli.main(["pools", "-o", "name"]) == 0
    assert capsys.readouterr().out == "computepool.kubepool.dev/cpu\n"
    assert cli.main(["pools", "-o", "wide"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[-3:] == ["SUSPENDED", "AUTO-SUSPEND", "IDLE-SINCE"]


def test_logs_of_every_instance_are_prefixed(fake_kube: FakeKube, script: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["submit", str(script), "--pool", "cpu", "--instances", "2", "--name", "j2"])
    fake_kube.logs = {0: ["kubepool[0]: head up", "kubepool[0]: done"], 1: ["kubepool[1]: worker up"]}
    capsys.readouterr()
    assert cli.main(["logs", "j2", "--all"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[algo-1] kubepool[0]: head up", "[algo-1] kubepool[0]: done", "[algo-2] kubepool[1]: worker up"]
    assert cli.main(["logs", "j2", "--all", "--tail", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["[algo-1] kubepool[0]: done", "[algo-2] kubepool[1]: worker up"]
    with pytest.raises(SystemExit) as usage:  # one instance or all, not both
        cli.main(["logs", "j2", "--all", "--instance", "1"])
    assert usage.value.code == 2


def test_version_without_a_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert cli.main(["version", "--client", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["clientVersion"] == metadata.version("kubepool") and "serverApiVersions" not in doc
    assert cli.main(["version"]) == 5  # the server part needs a cluster


def _complete(script_text: str, words: list[str], path: str = "") -> list[str]:
    """COMPREPLY of the bash completion for `words` (the last one being typed)."""
    prog = (f'source /dev/stdin <<\'EOF\'\n{script_text}EOF\n'
            f'COMP_WORDS=({" ".join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n'
            '_kubepool; printf "%s\\n" "${COMPREPLY[@]}"')
    env = {**os.environ, "PATH": f"{path}:{os.environ['PATH']}" if path else os.environ["PATH"]}
    out = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, check=True, env=env).stdout
    return [w for w in out.splitlines() if w]


def test_bash_completion(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["completion", "bash"]) == 0
    text = capsys.readouterr().out
    assert _complete(text, ["kubepool", "st"]) == ["status"]
    assert set(_complete(text, ["kubepool", "list", "-o", ""])) == {"table", "wide", "json", "yaml", "name",
                                                                    "jsonpath=", "custom-columns="}
    assert "--all" in _complete(text, ["kubepool", "logs", "j", "--a"])
    assert _complete(text, ["kubepool", "completion", "z"]) == ["zsh"]
    # Job names come from `kubepool list -o name` with the namespace typed so far.
    fake = tmp_path / "kubepool"
    fake.write_text('#!/bin/sh\n[ "$1 $2 $3 $4 $5" = "list -o name -n team" ] && '
                    'printf "mljob.kubepool.dev/train-1\\nmljob.kubepool.dev/eval-2\\n"\n')
    fake.chmod(0o755)
    assert _complete(text, ["kubepool", "logs", "-n", "team", "tr"], path=str(tmp_path)) == ["train-1"]
    assert cli.main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out.startswith("autoload -U +X bashcompinit && bashcompinit\n")


def test_follow_every_instance_and_wait_without_logs(fake_kube: FakeKube, script: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["submit", str(script), "--pool", "cpu", "--instances", "2", "--name", "j3"])
    fake_kube.logs = {0: ["kubepool[0]: a", "kubepool[0]: b"], 1: ["kubepool[1]: c"]}
    fake_kube.set_phase("j3", "DONE")
    capsys.readouterr()
    assert cli.main(["logs", "j3", "--all", "-f"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == ["[algo-1] kubepool[0]: a", "[algo-1] kubepool[0]: b", "[algo-2] kubepool[1]: c"]
    assert lines.index("[algo-1] kubepool[0]: a") < lines.index("[algo-1] kubepool[0]: b")  # each stream in order
    # --no-logs: progress and the outcome only, none of the head's lines.
    assert cli.main(["submit", str(script), "--pool", "cpu", "--name", "j4", "--wait", "--no-logs", "--timeout", "0.2"]) == 124
    out = capsys.readouterr().out
    assert out.strip() == "team/j4" and "kubepool[0]" not in out


def test_global_flags_before_or_after_the_command() -> None:
    before, _ = cli.parse_args(["-n", "team", "--context", "prod", "--kubeconfig", "k", "list"])
    after, _ = cli.parse_args(["list", "-n", "team", "--context", "prod", "--kubeconfig", "k"])
    assert (before.namespace, before.context, before.kubeconfig) == (after.namespace, after.context,
                                                                     after.kubeconfig) == ("team", "prod", "k")
    both, _ = cli.parse_args(["-n", "a", "status", "j", "-n", "b"])  # the later one wins, as in kubectl
    assert both.namespace == "b"
    neither, _ = cli.parse_args(["status", "j"])
    assert (neither.namespace, neither.context, neither.kubeconfig) == (None, None, None)


def test_output_values_are_checked_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["list", "-o", "xml"], ["list", "-o", "jsonpath={.items[*].metadata.name"],
                ["list", "-o", "custom-columns=NAME"], ["submit", "t.py", "--pool", "p", "-o", "yaml"]):
        with pytest.raises(SystemExit) as err:
            cli.parse_args(bad)
        assert err.value.code == 2, bad
    assert "unclosed" in capsys.readouterr().err


def test_jsonpath_and_custom_columns(fake_kube: FakeKube, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("b", "a"):
        cli.main(["submit", str(script), "--pool", "cpu", "--name", name, "--label", f"app={name}"])
    fake_kube.set_phase("a", "RUNNING")
    capsys.readouterr()
    assert cli.main(["list", "-o", "jsonpath={.items[*].metadata.name}"]) == 0
    assert capsys.readouterr().out == "a b"  # the API server's order, no newline: as kubectl get
    template = '{range .items[?(@.status.phase=="RUNNING")]}{.metadata.name}:{.metadata.labels.app}{"\\n"}{end}'
    assert cli.main(["list", "-o", f"jsonpath={template}"]) == 0
    assert capsys.readouterr().out == "a:a\n"
    assert cli.main(["list", "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase"]) == 0
    assert capsys.readouterr().out.splitlines() == ["NAME   PHASE", "a      RUNNING", "b      <none>"]
    assert cli.main(["status", "a", "-o", "jsonpath={.spec.computePool}"]) == 0
    assert capsys.readouterr().out == "cpu"


def test_watch_prints_changes_until_the_job_ends(fake_kube: FakeKube, script: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from kubepool.cli import commands

    cli.main(["submit", str(script), "--pool", "cpu", "--name", "w1"])
    steps = iter([lambda: fake_kube.set_phase("w1", "RUNNING"), lambda: None, lambda: fake_kube.set_phase("w1", "DONE")])
    monkeypatch.setattr(commands.time, "sleep", lambda _: next(steps)())
    capsys.readouterr()
    assert cli.main(["status", "w1", "-w", "-o", "jsonpath={.status.phase} "]) == 0
    assert capsys.readouterr().out.split() == ["RUNNING", "DONE"]  # one line per change; ends with the job
    # list -w: the header once, then each changed row; Ctrl-C ends it with 130.
    fake_kube.set_phase("w1", "RUNNING")
    steps = iter([lambda: fake_kube.set_phase("w1", "FAILED"), lambda: None])
    monkeypatch.setattr(commands.time, "sleep", lambda _: next(steps, _interrupt)())
    assert cli.main(["list", "--watch"]) == 130
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["NAMESPACE", "NAME", "STATUS"] and len(out) == 3
    assert out[1].split()[2] == "RUNNING" and out[2].split()[2] == "FAILED"


def _interrupt() -> None:
    raise KeyboardInterrupt


def test_logs_since_and_timestamps(fake_kube: FakeKube, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["submit", str(script), "--pool", "cpu", "--name", "l1"])
    fake_kube.logs = {0: ["Ray start-up noise", *contract.LOG_START_MSG.splitlines(), "hello",
                          *contract.LOG_END_MSG.splitlines()]}
    capsys.readouterr()
    assert cli.main(["logs", "l1", "--since", "1h30m", "--timestamps"]) == 0
    assert capsys.readouterr().out == "2026-01-01T00:00:04Z hello\n"  # extracted on the text
    assert fake_kube.log_calls[-1] == {"since_seconds": 5400, "timestamps": True}
    assert cli.main(["logs", "l1", "--since", "soon"]) == 2
    assert "--since 'soon'" in capsys.readouterr().err


def test_submit_labels_queue_and_dry_run(fake_kube: FakeKube, script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["submit", str(script), "--pool", "cpu", "--name", "q1", "--queue", "team-q",
                     "--label", "app=x", "--dry-run", "-o", "yaml"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert ("team", "q1") not in fake_kube.jobs and not fake_kube.configmaps  # nothing created
    assert printed["kind"] == "MLJob" and printed["spec"]["computePool"] == "cpu"
    assert printed["metadata"]["labels"] == {"app": "x", "kueue.x-k8s.io/queue-name": "team-q",
                                             "app.kubernetes.io/managed-by": "kubepool"}
    assert cli.main(["submit", str(script), "--pool", "cpu", "--name", "q1", "--queue", "team-q", "--label", "app=x"]) == 0
    assert fake_kube.jobs[("team", "q1")].metadata["labels"] == printed["metadata"]["labels"]
    assert fake_kube.jobs[("team", "q1")].spec == api_spec(printed)  # the dry run printed what submit creates
    assert cli.main(["submit", str(script), "--pool", "nope", "--dry-run"]) == 3  # the pool is read, as by submit
    assert cli.main(["submit", str(script), "--pool", "cpu", "--label", "novalue"]) == 2


def api_spec(doc: dict[str, object]) -> object:
    from kubepool import api

    return api.MLJob.model_validate(doc).spec


def test_fish_completion(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import shutil

    assert cli.main(["completion", "fish"]) == 0
    text = capsys.readouterr().out
    assert "complete -c kubepool -n __fish_use_subcommand -a dashboard" in text
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed: the script's lines are checked, not run")
    fake = tmp_path / "kubepool"
    fake.write_text('#!/bin/sh\n[ "$1 $2 $3 $4 $5" = "list -o name -n team" ] && '
                    'printf "mljob.kubepool.dev/train-1\\n"\n')
    fake.chmod(0o755)
    script_file = tmp_path / "kubepool.fish"
    script_file.write_text(text)

    def complete(line: str) -> list[str]:
        out = subprocess.run(["fish", "--no-config", "-c", f"source {script_file}; complete -C {shlex.quote(line)}"],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}).stdout
        return [w.split("\t")[0] for w in out.splitlines()]

    assert complete("kubepool sta") == ["status"]
    assert set(complete("kubepool list -o ")) >= {"json", "yaml", "wide"}
    assert complete("kubepool logs -n team tr") == ["train-1"]


def test_dashboard_needs_a_running_head(fake_kube: FakeKube, script: Path) -> None:
    cli.main(["submit", str(script), "--pool", "cpu", "--name", "d1"])
    assert cli.main(["dashboard", "d1"]) == 3  # not running yet


def test_dashboard_server_forwards_every_request_to_the_head_pods_dashboard() -> None:
    import threading
    import urllib.request

    from kubepool.cli.commands import dashboard_server

    calls: list[tuple[object, ...]] = []

    class Kube:
        def secret_value(self, name: str, key: str, namespace: str) -> str:
            assert (name, key, namespace) == ("d1-contract", "token", "team")
            return "s3cret"

        def pod_proxy(self, name: str, port: int, path: str, **kw: object) -> tuple[int, dict[str, str], bytes]:
            headers = kw["headers"]
            assert isinstance(headers, dict) and headers["X-Ray-Authorization"] == "Bearer s3cret"
            calls.append((name, port, path, kw["method"], kw["body"], kw["namespace"]))
            return 200, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}, b'{"ray_version": "x"}'

    class Job:
        kube, namespace, name = Kube(), "team", "d1"

    server = dashboard_server(Job(), "d1-head", "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(f"{url}/api/version?x=1", timeout=10) as resp:
            assert (resp.status, resp.read(), resp.headers["Content-Type"]) == (200, b'{"ray_version": "x"}',
                                                                                "application/json")
        urllib.request.urlopen(urllib.request.Request(f"{url}/api/jobs/", data=b"{}", method="POST"), timeout=10)
    finally:
        server.shutdown()
    assert calls == [("d1-head", 8265, "/api/version?x=1", "GET", b"", "team"),
                     ("d1-head", 8265, "/api/jobs/", "POST", b"{}", "team")]


def test_docs_cli_md_is_generated_from_the_parser() -> None:
    from kubepool.cli import docgen

    doc = Path(__file__).resolve().parents[3] / "docs" / "cli.md"
    assert doc.read_text() == docgen.markdown(), "docs/cli.md is stale: python -m kubepool.cli.docgen > docs/cli.md"
