"""Pure helpers of the P3 latency benchmark (bench/latency.py) and the summary's verdicts: no cluster."""

from __future__ import annotations

from bench.latency import MARK, STAGES, VARIANTS, breakdown, job, log_marks
from bench.summary import row, verdict


def test_log_marks_take_arrival_times_and_the_payloads_own_clock() -> None:
    lines = [
        (10.0, "kubepool[0]: Ray head started on 127.191.0.1:6979"),
        (11.0, "kubepool[0]: Waiting for instances: 1/3 available (min 3), 0s elapsed"),
        (12.5, "kubepool[0]: Target instance requirement met: 3/3 instances available"),
        (13.0, f"{MARK} 12.75"),
        (14.0, "kubepool[0]: Ray head started on 127.191.0.1:6979"),  # only the first one counts
    ]
    assert log_marks(lines) == {"ray_head": 10.0, "ray_formed": 12.5, "payload_start": 12.75}


def test_breakdown_is_seconds_since_submit_with_none_for_unseen_stages() -> None:
    b = breakdown(100.0, {"admitted": 100.5, "payload_start": 107.0})
    assert list(b) == [k for k, _ in STAGES]
    assert b["admitted"] == 0.5 and b["payload_start"] == 7.0 and b["done"] is None


def test_job_is_a_three_instance_trivial_payload() -> None:
    spec = job("lat-1")["spec"]
    assert spec["targetInstances"] == 3 and spec["computePool"] == "bench-local"
    assert spec["entrypoint"]["command"][:2] == ["python", "-c"]
    assert "ray" not in spec and job("lat-2", VARIANTS["p3_no_dashboard"])["spec"]["ray"] == {"dashboard": False}


def test_verdicts() -> None:
    assert verdict(0.9, 1.0) == "yes"
    assert verdict(1.1, 1.0) == "NO"
    assert verdict(None, 1.0) == "NO (no value)"
    assert verdict(float("nan"), 1.0) == "NO (no value)"
    assert verdict(5.0, None) == ""
    assert row("x", 7.25, 8, 1, " s") == ["x", "7.2 s", "≤ 8 s", "yes"]


def test_ray_floor_nodes_take_ports_apart_and_only_the_head_is_head() -> None:
    import re
    from pathlib import Path

    from bench import rayfloor

    nodes = [rayfloor.start_args(i, Path(f"/t/{i}")) for i in range(3)]
    ports = [int(m) for args in nodes for a in args for m in re.findall(r"port=(\d+)$", a) if m != "0"]
    assert len(ports) == len(set(ports))  # every fixed port of every node is its own
    assert ["--head" in a for a in nodes] == [True, False, False]
    assert all(f"--address={rayfloor.NODE_IP}:{rayfloor.PORT_BASE}" in a for a in nodes[1:])
    assert all("--block" in a for a in nodes)  # a session of its own to stop, never `ray stop`


def test_real_node_p3_is_compared_with_the_process_node_p3_of_the_same_bench(tmp_path, monkeypatch) -> None:
    import json

    import bench.summary as summary
    from bench.realnodes import TARGET_RATIO, _p3_lines

    monkeypatch.setattr(summary, "RESULTS", tmp_path)
    median = {k: float(i + 1) for i, (k, _) in enumerate(STAGES)}
    real = {"p3": {"instances": 3, "runs": [{}], "median": median | {"payload_start": 12.0},
                   "target_ratio_to_process_nodes": TARGET_RATIO}}
    # No process-node P3 to compare with: the target row says so rather than passing.
    assert summary.realnode_rows(real)[1][1:] == ["–", f"≤ {TARGET_RATIO:g}", "NO (no value)"]
    (tmp_path / "latency.json").write_text(json.dumps({"p3": {"median": {"payload_start": 10.0}}}))
    assert summary.realnode_rows(real) == [
        ["P3 on real nodes (containers, 3 instances): submit → payload start", "12.0 s", "", ""],
        ["P3 real nodes ÷ process nodes", "1.20", "≤ 1.5", "yes"]]
    (tmp_path / "latency.json").write_text(json.dumps({"p3": {"median": {"payload_start": 6.0}}}))
    assert summary.realnode_rows(real)[1][1:] == ["2.00", "≤ 1.5", "NO"]
    table = "\n".join(_p3_lines(real["p3"]))
    assert "| payload started (its own clock) | 12.00 |" in table.replace("  ", " ")
