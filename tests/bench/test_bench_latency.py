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


def test_a_missed_target_names_its_floor_only_where_the_floor_misses_it_too() -> None:
    assert row("p3", 10.8, 6, 1, " s", floor=("bare Ray", 9.7))[3] == "NO: target under the floor (bare Ray 9.7 s)"
    assert row("p3", 10.8, 6, 1, " s", floor=("bare Ray", 5.0))[3] == "NO", "a floor under the target excuses nothing"
    assert row("p3", 10.8, 6, 1, " s", floor=("bare Ray", None))[3] == "NO"
    assert row("p3", 5.5, 6, 1, " s", floor=("bare Ray", 9.7))[3] == "yes"


def test_p1_wall_rows_take_their_floors_from_the_same_run() -> None:
    from bench.summary import scale_rows

    med = {"wall_s": 1.0, "pods_per_s": 1.0, "requests_per_job": 1.0, "controller_peak_rss_mib": 1.0, "controller_cpu_s": 1.0}
    p1 = {"jobs": 2, "pods_per_job": 4, "median": {"kubepool": med},
          "targets": {"kubepool / kuberay": 0.8, "kubepool / floor": 1.3},
          "ratios": {"kubepool / kuberay": 0.95, "kubepool-shared / kuberay": 0.78, "kubepool / floor": 2.9,
                     "kuberay / floor": 2.95, "writes-floor / kuberay": 0.81}}
    rows = {r[0]: r[3] for r in scale_rows({"cluster_up_s": 1.0, "cold_build": "", "p1": p1})}
    assert rows["P1 wall kubepool / kuberay"] == "NO: target under the floor (writes-floor / kuberay 0.81)"
    assert rows["P1 wall kubepool-shared / kuberay"] == "yes"
    assert rows["P1 wall kubepool / floor"] == "NO: target under the floor (kuberay / floor 2.95)"
    p1["ratios"]["writes-floor / kuberay"] = 0.7
    assert scale_rows({"cluster_up_s": 1.0, "cold_build": "", "p1": p1})[3][3] == "NO"


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


def test_ray_floor_states_its_auth_so_a_stray_token_file_cannot_split_it() -> None:
    """With the mode unset, a ~/.ray/auth_token on the machine turned auth on in the floor's GCS alone and its
    driver was refused (the whole latency part failed). The floor states token auth with its own token, as a
    kubepool job's Ray does; each floor a new one."""
    from bench import rayfloor

    a, b = rayfloor.node_env(), rayfloor.node_env()
    assert a["RAY_AUTH_MODE"] == "token" and len(a["RAY_AUTH_TOKEN"]) >= 32
    assert a["RAY_AUTH_TOKEN"] != b["RAY_AUTH_TOKEN"]


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
    (tmp_path / "latency.json").write_text(json.dumps({"p3": {"median": {"payload_start": 11.0}}}))
    assert summary.realnode_rows(real) == [
        ["P3 on real nodes (containers, 3 instances of 1 CPU): submit → payload start", "12.0 s", "", ""],
        ["P3 real nodes ÷ process nodes, instances of 1 CPU", "1.09", f"≤ {TARGET_RATIO:g}", "yes"]]
    (tmp_path / "latency.json").write_text(json.dumps({"p3": {"median": {"payload_start": 6.0}}}))
    assert summary.realnode_rows(real)[1][1:] == ["2.00", f"≤ {TARGET_RATIO:g}", "NO"]
    table = "\n".join(_p3_lines(real["p3"]))
    assert "| payload started (its own clock) | 12.00 |" in table.replace("  ", " ")
    # Instances at their node's size beside them: those are compared like with like (process nodes set no quota),
    # and the 1-CPU row's miss is put down to its quota.
    real["p3"]["node_share"] = {"cpu": "1800m", "runs": [{}], "median": median | {"payload_start": 7.0}}
    rows = summary.realnode_rows(real)
    assert rows[1][3].startswith("NO: the instances' CPU quota")
    assert rows[3] == ["P3 real nodes ÷ process nodes, instances of their node's size (1800m CPU)", "1.17",
                       f"≤ {TARGET_RATIO:g}", "yes"]
    table = "\n".join(_p3_lines(real["p3"]))
    assert "| payload started (its own clock) | 12.00 | 6.00 | 7.00 | 1.00 |" in table.replace("  ", " ")


def test_an_instance_at_its_node_size_takes_what_the_busiest_node_has_free() -> None:
    from bench.realnodes import node_share

    nodes = [{"metadata": {"name": n}, "status": {"allocatable": {"cpu": "2"}}} for n in ("a", "b", "c")]

    def pod(node: str, *cpus: str, phase: str = "Running") -> dict:
        return {"spec": {"nodeName": node, "containers": [{"resources": {"requests": {"cpu": c}}} for c in cpus]},
                "status": {"phase": phase}}

    pods = [pod("a", "100m"), pod("b", "150m", "0.1"), pod("b", "1", phase="Succeeded"), pod("", "3")]
    assert node_share(nodes, pods) == "1700m"  # b: 2000 - 250, in steps of 100m
    assert node_share(nodes, []) == "2000m"
