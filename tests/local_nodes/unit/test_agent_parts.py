"""Pure parts of the agent besides podspec: IP allocation, volume projections, log tails, the Node object,
termination messages."""

from __future__ import annotations

import asyncio
import base64
import stat
from pathlib import Path

import pytest

from kubepool.local.agent import runner
from kubepool.local.agent.config import NodeConfig
from kubepool.local.agent.ipam import Ipam, next_free
from kubepool.local.agent.logs_server import (
    LineTimes,
    peer_identity,
    render,
    rfc3339_nano,
    since_ns,
    tail_offset,
)
from kubepool.local.agent.node import node_object
from kubepool.local.agent.pods import termination_message
from kubepool.local.agent.probes import Prober, ProbeTiming, resolve_port
from kubepool.local.agent.volumes import (
    File,
    VolumeError,
    configmap_files,
    downward_files,
    secret_files,
    write_files,
)

NODE = NodeConfig.from_dict(
    {
        "name": "gpu-node-1",
        "ip": "127.0.2.1",
        "podCIDR": "127.111.0.0/16",
        "capacity": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1},
        "labels": {"kubepool.dev/node-pool": "gpu"},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    }
)


def test_next_free_skips_used_and_continues_after_last() -> None:
    assert next_free("127.101.0.0/16", []) == "127.101.0.1"
    assert next_free("127.101.0.0/16", ["127.101.0.1"]) == "127.101.0.2"
    assert next_free("127.101.0.0/16", [], after="127.101.0.5") == "127.101.0.6"
    assert next_free("127.101.0.0/16", [], after="127.101.0.254") == "127.101.1.1"  # .255/.0 skipped
    with pytest.raises(RuntimeError):
        next_free("127.101.0.0/30", ["127.101.0.1", "127.101.0.2"])


def test_ipam_is_stable_per_pod(tmp_path: Path) -> None:
    ipam = Ipam("127.101.0.0/16", tmp_path)
    a, b = ipam.ip_for("uid-a"), ipam.ip_for("uid-b")
    assert a != b and ipam.ip_for("uid-a") == a
    assert Ipam("127.101.0.0/16", tmp_path).used() == {"uid-a": a, "uid-b": b}


def test_configmap_and_secret_projections() -> None:
    cm = {"data": {"a": "1", "b": "2"}, "binaryData": {"bin": base64.b64encode(b"\x00").decode()}}
    assert [f.path for f in configmap_files(cm, None, 0o644, "cm", False)] == ["a", "b", "bin"]
    items = [{"key": "a", "path": "sub/a.txt", "mode": 0o600}]
    assert configmap_files(cm, items, 0o644, "cm", False) == [File("sub/a.txt", b"1", 0o600)]
    with pytest.raises(VolumeError):
        configmap_files(None, None, 0o644, "cm", False)
    assert configmap_files(None, None, 0o644, "cm", True) == []
    secret = {"data": {"token": base64.b64encode(b"s3cr3t").decode()}}
    assert secret_files(secret, None, 0o400, "s", False) == [File("token", b"s3cr3t", 0o400)]
    with pytest.raises(VolumeError):
        secret_files(secret, [{"key": "nope", "path": "x"}], 0o400, "s", False)


def test_downward_projection() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1", "b": "2"}},
        "spec": {"containers": [{"name": "c"}]},
    }
    files = downward_files(
        pod,
        [
            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu", "containerName": "c"}},
        ],
        0o644,
        {"cpu": "4"},
    )
    assert [(f.path, f.content) for f in files] == [
        ("namespace", b"ns"),
        ("labels", b'a="1"\nb="2"'),
        ("cpu", b"4"),
    ]


def test_write_files_replaces_projection(tmp_path: Path) -> None:
    write_files(tmp_path, [File("a", b"1", 0o644), File("d/b", b"2", 0o600)], None)
    write_files(tmp_path, [File("a", b"3", 0o640)], None)
    assert (tmp_path / "a").read_bytes() == b"3" and not (tmp_path / "d" / "b").exists()
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o640
    with pytest.raises(VolumeError):
        write_files(tmp_path, [File("../escape", b"", 0o644)], None)


def test_tail_offset(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"one\ntwo\nthree\n")
    assert log.read_bytes()[tail_offset(log, 2) :] == b"two\nthree\n"
    assert tail_offset(log, 10) == 0
    assert tail_offset(log, 0) == log.stat().st_size


def test_node_object() -> None:
    node = node_object(NODE, "2026-01-01T00:00:00Z")
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-node-1"
    assert node["metadata"]["labels"]["kubepool.dev/node-pool"] == "gpu"
    assert node["spec"]["taints"][0]["effect"] == "NoSchedule"
    status = node["status"]
    assert status["capacity"]["nvidia.com/gpu"] == "1" and status["allocatable"] == status["capacity"]
    assert status["addresses"][0] == {"type": "InternalIP", "address": "127.0.2.1"}
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    assert [c for c in status["conditions"] if c["type"] == "Ready"][0]["status"] == "True"


def test_termination_message_file_then_log_fallback(tmp_path: Path) -> None:
    (tmp_path / runner.LOG).write_text("".join(f"line {i}\n" for i in range(100)))
    assert termination_message(tmp_path, "File", 1) == ""
    fallback = termination_message(tmp_path, "FallbackToLogsOnError", 1)
    assert fallback.endswith("line 99") and "line 19\n" not in fallback
    assert termination_message(tmp_path, "FallbackToLogsOnError", 0) == ""
    (tmp_path / runner.TERMINATION_LOG).write_text("boom")
    assert termination_message(tmp_path, "FallbackToLogsOnError", 1) == "boom"


def test_probe_ports_and_timing() -> None:
    container = {"ports": [{"name": "http", "containerPort": 8080}]}
    assert resolve_port("http", container) == 8080 and resolve_port(9000, container) == 9000
    with pytest.raises(ValueError):
        resolve_port("grpc", container)
    timing = ProbeTiming.of({"periodSeconds": 2})
    assert (timing.period_s, timing.timeout_s, timing.failure_threshold) == (2.0, 1.0, 3)


async def test_prober_thresholds_against_a_local_port() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = {"tcpSocket": {"port": port}, "periodSeconds": 0.02, "failureThreshold": 2}
    prober = Prober(probe, {}, "127.0.0.1", 0, {})
    assert await asyncio.wait_for(prober.startup(), 5)
    changes: list[bool] = []
    readiness = asyncio.create_task(prober.readiness(changes.append))
    while changes != [True]:
        await asyncio.sleep(0.01)
    server.close()
    await server.wait_closed()
    await asyncio.wait_for(prober.until_failed(), 5)  # liveness: returns after two failures in a row
    while changes != [True, False]:
        await asyncio.sleep(0.01)
    readiness.cancel()
    assert not await asyncio.wait_for(Prober(probe, {}, "127.0.0.1", 0, {}).startup(), 5)


def test_log_times_render_timestamps_and_since(tmp_path: Path) -> None:
    (tmp_path / "log.idx").write_text(
        "0 1000000000\n4 2000000000\n8 3"
    )  # the last entry is still being written
    times = LineTimes(tmp_path / "log.idx")
    times.refresh()
    assert (times.at(0), times.at(5), times.at(100)) == (1000000000, 2000000000, 2000000000)
    block = b"one\ntwo\nthree\n"
    assert render(block, 0, times, True, None).splitlines()[0] == b"1970-01-01T00:00:01.000000000Z one"
    assert render(block, 0, times, False, 1500000000) == b"two\nthree\n"
    assert render(block, 0, LineTimes(tmp_path / "none"), True, 5) == block  # no index: no times
    assert rfc3339_nano(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"
    assert since_ns({"sinceTime": "1970-01-01T00:00:02Z"}) == 2 * 10**9
    assert since_ns({}) is None


def test_keep_roots_and_what_mounts_hide() -> None:
    from kubepool.local.agent.sandbox import hidden_by_mounts, keep_roots

    roots = keep_roots(["/tmp/x/.venv", "/tmp/x/.venv/bin", "/tmp/x/src", "/root/.pyenv/versions/3.11", "/tmp/x/src/"])
    assert roots == ["/root/.pyenv/versions/3.11", "/tmp/x/.venv", "/tmp/x/src"]
    assert hidden_by_mounts(roots, ["/tmp", "/opt/ml/model"]) == ["/tmp/x/.venv", "/tmp/x/src"]
    assert hidden_by_mounts(["/tmp/x"], ["/tmp/x"]) == []  # a volume exactly at a kept path replaces it
    assert hidden_by_mounts(["/tmp/x", "/tmpfoo/y"], ["/tmp/"]) == ["/tmp/x"]


def _peercert(*attrs: tuple[str, str]) -> dict[str, object]:
    return {"subject": tuple(((k, v),) for k, v in attrs)}


def test_peer_identity_reads_cn_and_groups_of_a_verified_cert() -> None:
    assert peer_identity(None) is None and peer_identity({}) is None
    cert = _peercert(("organizationName", "system:masters"), ("commonName", "kube-apiserver-kubelet-client"))
    assert peer_identity(cert) == ("kube-apiserver-kubelet-client", ("system:masters",))
    # Two CNs name nobody (never "the first one"): such a cert matches no identity.
    assert peer_identity(_peercert(("commonName", "a"), ("commonName", "b"))) == ("", ())
