"""Real nodes (upstream kubelet on containerd, kubepool.local.realnode): what they cost and how fast they are.

A cluster of its own (`kubepool local up --real-nodes 3`, slot 4, state in /var/tmp/kubepool-bench-realnodes;
$KUBEPOOL_BENCH_REALNODE_SLOT and _STATE_DIR pick others), torn down at the end. Measures: `up` from nothing (images
imported), a node's Ready time after its kubelet starts (Node deleted first, so it registers anew), warm pod
start (create -> Ready) one at a time and 5 at once, deletion, the chart's operator (from its image) running a
trivial 3-instance job (bench.latency's, stage by stage: P3 on containers); RSS of the node
processes and disk per node. Skips, saying so, when the images are not built (needs root).

`python -m bench.realnodes [--quick]` (also a part of `make bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench import latency, stats
from bench.cluster import BenchCluster, describe_machine, machine_line
from kubepool.local import controlplane, layout, processes
from kubepool.local.layout import Layout
from kubepool.local.processes import Component
from kubepool.local.realnode import configs, images

RESULTS = Path(__file__).with_name("results")
STATE_DIR = Path(os.environ.get("KUBEPOOL_BENCH_REALNODE_STATE_DIR") or "/var/tmp/kubepool-bench-realnodes")
SLOT = int(os.environ.get("KUBEPOOL_BENCH_REALNODE_SLOT") or 4)
IMAGES = ("operator", "runtime-lean")
RUNTIME = "kubepool/runtime:dev-lean"
NODES = latency.INSTANCES  # one instance per node: P3 runs bench.latency's job, on containers
TARGET_RATIO = 1.2  # P3 payload start on real nodes ÷ on process nodes (bench.latency, the part before this one)


def _kubectl(lay: Layout, *args: str, input: str | None = None, timeout: float = 120) -> str:
    return lay.kubectl(*args, stdin=input, timeout=timeout)


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "pods"}},
            "spec": {"terminationGracePeriodSeconds": 1, "nodeSelector": {"kubernetes.io/hostname": "real-node-1"},
                     "containers": [{"name": "main", "image": RUNTIME, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"]}]}}


def _pods_ready(lay: Layout, names: list[str], ns: str) -> float:
    """Create the pods at once; seconds until all are Ready."""
    t0 = time.monotonic()
    _kubectl(lay, "apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all([_pod(n) for n in names]))
    for n in names:
        _kubectl(lay, "wait", "-n", ns, f"pod/{n}", "--for=condition=Ready", "--timeout=120s", timeout=130)
    return time.monotonic() - t0


def _delete_pods(lay: Layout, ns: str) -> float:
    t0 = time.monotonic()
    _kubectl(lay, "delete", "pods", "-n", ns, "-l", "bench=pods", "--wait=true", timeout=120)
    return time.monotonic() - t0


def node_ready_after_kubelet_start(lay: Layout, node: str) -> float:
    """Stop the node's kubelet, delete its Node, start the kubelet again: seconds until the Node is Ready."""
    name = f"kubelet-{node}"
    argv = processes.running_argv(lay, name)
    assert argv, f"{name} is not running"
    health = next(c for c in _kubelets(lay) if c.name == name).health_url
    processes.stop(lay, name)
    _kubectl(lay, "delete", "node", node, "--wait=true")
    t0 = time.monotonic()
    processes.start(lay, Component(name, argv, health))
    while not controlplane.node_readiness(lay).get(node):
        if time.monotonic() - t0 > 120:
            raise RuntimeError(f"{node} not Ready 120 s after its kubelet started; see {lay.log(name)}")
        time.sleep(0.1)
    return time.monotonic() - t0


def _kubelets(lay: Layout) -> list[Component]:
    doc = yaml.safe_load(lay.nodes_yaml.read_text())
    return [Component(f"kubelet-{n['name']}", [], configs.kubelet_health_url(n["ip"])) for n in doc["nodes"]]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def resources(lay: Layout) -> dict[str, Any]:
    rss = {}
    for name in ("kubelet-real-node-1", "containerd-real-node-1", "coredns"):
        pid = processes.read_pid(lay, name)
        rss[name.split("-real")[0]] = round(_rss_mib(pid), 1) if pid else None
    shim = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _is_shim(p, lay)]
    # -x: the running containers' overlay rootfs mounts (under containerd's state dir) are not the store.
    disk = subprocess.run(["du", "-smx", str(lay.state_dir / "realnodes" / "real-node-1" / "containerd" / "root")],
                          capture_output=True, text=True).stdout.split()
    return {"rss_mib": rss, "shims": len(shim),
            "shim_rss_mib": round(statistics.median(_rss_mib(p) for p in shim), 1) if shim else None,
            "containerd_disk_mib_per_node": int(disk[0]) if disk else None}


def _is_shim(p: Path, lay: Layout) -> bool:
    try:
        cmd = (p / "cmdline").read_bytes()
    except OSError:
        return False
    return b"containerd-shim" in cmd and str(lay.state_dir).encode() in cmd


def _pods_gone(lay: Layout, ns: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while left := _kubectl(lay, "get", "pods", "-n", ns, "-o", "name").split():
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods of {ns} not gone {timeout:.0f} s after their job's deletion: {left}")
        time.sleep(0.2)


def _millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else round(float(quantity) * 1000)


def node_share(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str:
    """The CPU each of `nodes` still offers an instance: its allocatable less what the `pods` on it request (the
    operator's, CoreDNS's), the least over the nodes, in steps of 100m. An instance of that size has its node, as
    a Snowflake instance has, and as a process node's instance has the machine (no quota at all)."""
    used: dict[str, int] = {}
    for pod in pods:
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = pod["spec"].get("nodeName") or ""
        for c in pod["spec"]["containers"]:
            used[node] = used.get(node, 0) + _millicores(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
    free = min(_millicores(n["status"]["allocatable"]["cpu"]) - used.get(n["metadata"]["name"], 0) for n in nodes)
    return f"{free // 100 * 100}m"


def _pool_node_share(lay: Layout, selector: dict[str, str]) -> str:
    labels = ",".join(f"{k}={v}" for k, v in selector.items())
    nodes = json.loads(_kubectl(lay, "get", "nodes", "-l", labels, "-o", "json"))["items"]
    return node_share(nodes, json.loads(_kubectl(lay, "get", "pods", "-A", "-o", "json"))["items"])


def _p3_summary(runs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"instances": latency.INSTANCES, "runs": runs, "target_ratio_to_process_nodes": TARGET_RATIO, **extra,
            "median": {k: stats.median([r["since_submit_s"][k] for r in runs if r["since_submit_s"][k] is not None])
                       for k, _ in latency.STAGES}}


def p3(lay: Layout, repeats: int) -> dict[str, Any]:
    """The chart's operator from its image; bench.latency's job (3 instances, one per node, a payload that prints
    the time) followed the same way, so the two P3s compare stage by stage. Two pools, their runs alternating after
    one warm-up each: instances of 1 CPU (the chart's example pool), and instances at their node's size
    (`node_share`): process nodes put no quota on an instance, so that one compares like with like."""
    helm = [lay.bin("helm"), "--kubeconfig", str(lay.kubeconfig)]
    chart = layout.REPO_ROOT / "charts" / "kubepool"
    selector = {"kubepool.dev/node-pool": "cpu"}
    spec = {"resources": {"cpu": "1", "memory": "2Gi"}, "minNodes": 0, "maxNodes": latency.INSTANCES,
            "nodeSelector": selector}
    values = {"image": {"repository": "kubepool/operator", "tag": "dev", "pullPolicy": "Never"},
              "operator": {"runtimeImage": RUNTIME, "watchNamespaces": ["bench-jobs"], "warmCapacity": False,
                           "settings": {"imagePullPolicy": "Never"}},
              "pools": [{"name": "bench-real", "spec": spec}]}
    vfile = lay.state_dir / "bench-values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    _kubectl(lay, "create", "namespace", "bench-jobs")
    subprocess.run([*helm, "install", "kp", str(chart), "-n", "kubepool-system", "--create-namespace", "--values",
                    str(vfile), "--wait", "--timeout", "180s"], check=True, capture_output=True, timeout=240)
    share = _pool_node_share(lay, selector)
    whole = {**spec, "resources": {"cpu": share, "memory": "2Gi"}}
    _kubectl(lay, "apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": "bench-real-node"}, "spec": whole}))
    bench = BenchCluster(lay, 0.0)
    runs: dict[str, list[dict[str, Any]]] = {"bench-real": [], "bench-real-node": []}
    for i in range(repeats + 1):
        for pool, prefix in (("bench-real", "p3"), ("bench-real-node", "p3n"))[:: 1 if i % 2 else -1]:
            name = f"{prefix}-{i}"
            r = asyncio.run(latency.follow(bench, "bench-jobs", latency.job(name, pool=pool)))
            b = r["since_submit_s"]
            cpu = "1" if pool == "bench-real" else share
            print(f"  P3, {cpu} CPU instances, {'warm-up' if not i else f'run {i}'}: payload start "
                  f"{stats.fmt(b['payload_start'])} s, finished {stats.fmt(b['done'])} s: {r['outcome']}", flush=True)
            if not r["outcome"].startswith("DONE"):
                raise RuntimeError(f"job {name} ended {r['outcome']}; head log tail: {r.get('head_log_tail')}")
            if i:
                runs[pool].append(r)
            _kubectl(lay, "delete", "mljob", name, "-n", "bench-jobs", "--wait=true", timeout=180)
            _pods_gone(lay, "bench-jobs")  # the next job's instances must find their nodes free
    return {**_p3_summary(runs["bench-real"], cpu="1"),
            "node_share": _p3_summary(runs["bench-real-node"], cpu=share)}


def measure(quick: bool) -> dict[str, Any]:
    def cli(*args: str) -> float:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "kubepool.local.cli", *args, "--state-dir", str(STATE_DIR)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"kubepool local {args[0]} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        return time.monotonic() - t0

    up_s = cli("up", "--slot", str(SLOT), "--real-nodes", str(NODES), "--real-node-images", ",".join(IMAGES))
    lay = Layout.load(STATE_DIR)
    assert lay is not None
    try:
        ready = [node_ready_after_kubelet_start(lay, "real-node-2") for _ in range(1 if quick else 3)]
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        _kubectl(lay, "create", "namespace", ns)
        while subprocess.run([lay.bin("kubectl"), f"--kubeconfig={lay.kubeconfig}", "get", "sa", "default", "-n", ns],
                             capture_output=True).returncode:
            time.sleep(0.2)
        first = _pods_ready(lay, ["first"], ns)
        _delete_pods(lay, ns)
        warm = []
        for i in range(3 if quick else 5):
            warm.append(_pods_ready(lay, [f"warm-{i}"], ns))
            _delete_pods(lay, ns)
        five = _pods_ready(lay, [f"five-{i}" for i in range(5)], ns)
        res = resources(lay)
        delete5 = _delete_pods(lay, ns)
        p3_report = p3(lay, 1 if quick else 3)
    finally:
        down_s = cli("down")
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": describe_machine(), "quick": quick,
        "up_cold_s": round(up_s, 1), "down_s": round(down_s, 1),
        "node_ready_after_kubelet_start_s": [round(r, 2) for r in ready],
        "first_pod_ready_s": round(first, 2), "warm_pod_ready_s": [round(w, 2) for w in warm],
        "five_pods_ready_s": round(five, 2), "delete_five_pods_s": round(delete5, 2),
        "p3": p3_report, **res,
    }


def markdown(r: dict[str, Any]) -> str:
    med = statistics.median
    rows = [
        (f"`kubepool local up --real-nodes {NODES}` from nothing (images imported)", f"{r['up_cold_s']} s"),
        ("Node Ready after its kubelet starts (Node re-registered)",
         f"{med(r['node_ready_after_kubelet_start_s']):.2f} s (median of {len(r['node_ready_after_kubelet_start_s'])})"),
        ("first pod of the runtime image Ready (create -> Ready)", f"{r['first_pod_ready_s']} s"),
        ("warm pod Ready", f"{med(r['warm_pod_ready_s']):.2f} s (median of {len(r['warm_pod_ready_s'])})"),
        ("5 pods at once, all Ready", f"{r['five_pods_ready_s']} s"),
        ("delete those 5 pods (gone from the API)", f"{r['delete_five_pods_s']} s"),
        ("RSS: kubelet / containerd / CoreDNS / one pod's shim",
         f"{r['rss_mib']['kubelet']} / {r['rss_mib']['containerd']} / {r['rss_mib']['coredns']} / {r['shim_rss_mib']} MiB"),
        ("containerd store per node (pause, operator, runtime-lean)", f"{r['containerd_disk_mib_per_node']} MiB"),
        ("`kubepool local down`", f"{r['down_s']} s"),
    ]
    return "\n".join([
        "# Real nodes (bench.realnodes)", "", f"{r['when']}. {machine_line(r['machine'])}", "",
        "| measure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), "", *_p3_lines(r["p3"]),
    ])


def _p3_lines(p3: dict[str, Any]) -> list[str]:
    """bench.latency's stage table, for the same job on real nodes (the chart's operator from its image): instances
    of 1 CPU, and (where measured) instances at their node's size."""
    series = [p3, *([p3["node_share"]] if "node_share" in p3 else [])]
    header = ["stage"]
    for s in series:
        header += [f"{s.get('cpu', '1')} CPU: since submit (s)", "since previous stage (s)"]
    rows, prev = [], [0.0] * len(series)
    for key, what in latency.STAGES:
        row = [what]
        for j, s in enumerate(series):
            v = s["median"][key]
            row += [stats.fmt(v), stats.fmt(v - prev[j] if v == v else None)]
            prev[j] = v if v == v else prev[j]
        rows.append(row)
    return [f"P3 on real nodes: bench.latency's {p3['instances']}-instance job, the chart's operator from its image; "
            f"median of {len(p3['runs'])} run(s) after one warm-up, per instance size (the runs alternate). Target: "
            f"≤ {p3['target_ratio_to_process_nodes']:g} × P3 on process nodes (summary.md), whose instances have no "
            "CPU quota: the instances at their node's size compare like with like.", "",
            stats.markdown_table(header, rows, right=tuple(range(1, len(header))))]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.realnodes")
    ap.add_argument("--quick", action="store_true")
    ns = ap.parse_args(argv)
    missing = [n for n in IMAGES if images.built_image(n) is None]
    if missing:
        print(f"bench.realnodes: skipped, images not built: {', '.join(missing)} "
              f"(make images; hack/images/build.sh runtime-lean)", flush=True)
        return 0
    if os.geteuid() != 0:
        print("bench.realnodes: needs root (containerd, kubelet, bridge, iptables)", file=sys.stderr)
        return 1
    print(f"[bench.realnodes] {NODES} real nodes in {STATE_DIR} (slot {SLOT}); up imports the images (minutes)", flush=True)
    report = measure(ns.quick)
    stem = "realnodes-quick" if ns.quick else "realnodes"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown(report))
    print(markdown(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
