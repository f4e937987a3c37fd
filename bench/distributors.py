"""Distributor benchmark: kubepool's PyTorchDistributor and XGBEstimator against Ray Train and plain tools.

On one 3-node loopback Ray cluster (127.0.6.2-4), one warm-up then the median of `--repeats` runs of:
- the same DDP train function, world size 3, gloo: PyTorchDistributor (a new distributor per run), Ray
  Train TorchTrainer, and plain torchrun (3 agents, static rendezvous);
- the same XGBoost job (3000 rows x 20 rounds, same params): XGBEstimator on 3 workers, Ray Train
  XGBoostTrainer on 3 workers, and single-process `xgboost.train`.
The warm-up run is reported too ("first run": fresh processes everywhere). Prints a table and writes
bench/results/distributors.{json,md}. `python -m bench.distributors --help`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

NODE_IPS = ("127.0.6.2", "127.0.6.3", "127.0.6.4")
RESULTS = Path(__file__).with_name("results")
WORLD = 3
XGB_ROWS, XGB_ROUNDS = 3000, 20
XGB_PARAMS = {"objective": "reg:squarederror", "tree_method": "hist", "max_depth": 6, "eta": 0.3, "nthread": 1}
TARGETS = {"PyTorchDistributor / torchrun": 1.2, "XGBEstimator / XGBoostTrainer": 0.3}


# --- the workloads: identical math for every runner -----------------------------------------------
# Heavy imports stay inside functions: torchrun's workers import this module and should pay for torch only.


def ddp_steps(rank: int) -> float:
    """A small MLP trained with DDP on this rank's synthetic shard; the process group is already up."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(1024, 32, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return float(loss.item())


def kubepool_train() -> None:
    from kubepool.distributors.pytorch import get_context

    ctx = get_context()
    ctx.get_metrics_reporter().log_metrics({"loss": ddp_steps(ctx.get_rank())})


def ray_train_loop() -> None:
    import ray.train

    ray.train.report({"loss": ddp_steps(ray.train.get_context().get_world_rank())})


def torchrun_worker() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    ddp_steps(dist.get_rank())
    dist.destroy_process_group()


def xgb_data() -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.normal(size=(XGB_ROWS, 10))
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(10)])
    df["y"] = 2 * x[:, 0] + np.sin(x[:, 1]) - x[:, 2] * x[:, 3] + rng.normal(scale=0.1, size=XGB_ROWS)
    return df


def xgb_ray_train_loop(config: dict[str, Any]) -> None:
    import ray.train
    import xgboost as xgb
    from ray.train.xgboost import RayTrainReportCallback

    df = ray.train.get_dataset_shard("train").materialize().to_pandas()
    dtrain = xgb.DMatrix(df.drop(columns="y"), df["y"])
    xgb.train(config["params"], dtrain, config["rounds"], evals=[(dtrain, "train")], callbacks=[RayTrainReportCallback()])


# --- runners: each returns when the job is done -----------------------------------------------------


def run_torchrun(master: str, port: int) -> None:
    """Three torchrun agents, one per loopback node, static rendezvous on node 0."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={WORLD}", "--nproc-per-node=1",
           "--rdzv-backend=static", f"--master-addr={master}", f"--master-port={port}"]  # fmt: skip
    procs = [
        subprocess.Popen([*cmd, f"--node-rank={i}", f"--local-addr={ip}", "-m", "bench.distributors", "--torchrun-worker"])
        for i, ip in enumerate(NODE_IPS)
    ]
    codes = [p.wait(timeout=300) for p in procs]
    if any(codes):
        raise RuntimeError(f"torchrun exit codes {codes}")


def timed_runs(fn: Callable[[], Any], repeats: int) -> list[float]:
    """Wall times of 1 + `repeats` runs; the first is the warm-up (imports, Ray worker pools, file caches)."""
    times = []
    for _ in range(1 + repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def machine() -> dict[str, Any]:
    import ray
    import torch
    import xgboost

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")), "?")
    mem = int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))) // 2**20
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "os": platform.platform(), "python": platform.python_version(),
        "ray": ray.__version__, "torch": torch.__version__, "xgboost": xgboost.__version__,
        "cluster": f"{len(NODE_IPS)} Ray nodes on loopback {', '.join(NODE_IPS)}, 2 logical CPUs each, one host",
    }  # fmt: skip


def bench(repeats: int) -> dict[str, Any]:
    import ray
    import xgboost as xgb
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.train.xgboost import XGBoostTrainer

    from kubepool.distributors.loopback import LoopbackRayCluster, free_port
    from kubepool.distributors.pytorch import PyTorchDistributor, PyTorchScalingConfig, WorkerResourceConfig
    from kubepool.distributors.xgboost import XGBEstimator, XGBScalingConfig

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every runner (Ray nodes inherit it) uses loopback
    storage = tempfile.mkdtemp(prefix="kubepool-bench-")
    scaling = ScalingConfig(num_workers=WORLD, resources_per_worker={"CPU": 1}, placement_strategy="STRICT_SPREAD")
    df = xgb_data()
    rows: dict[str, dict[str, Any]] = {}

    def record(name: str, fn: Callable[[], Any]) -> None:
        first, *times = timed_runs(fn, repeats)
        rows[name] = {"median_s": statistics.median(times), "first_run_s": first, "runs_s": times}
        runs = ", ".join(f"{t:.2f}" for t in times)
        print(f"  {name:<38} median {rows[name]['median_s']:7.2f} s  first {first:7.2f} s  ({runs})", flush=True)

    with LoopbackRayCluster(NODE_IPS, num_cpus=2):
        print(f"PyTorch DDP, world size {WORLD}, gloo (warm-up + {repeats} runs):", flush=True)
        cfg = PyTorchScalingConfig(WORLD, 1, WorkerResourceConfig(num_cpus=1))
        record("PyTorchDistributor", lambda: PyTorchDistributor(kubepool_train, cfg).run())
        record("Ray Train TorchTrainer", lambda: TorchTrainer(
            ray_train_loop, scaling_config=scaling, run_config=RunConfig(storage_path=storage)).fit())  # fmt: skip
        record("torchrun (3 agents, static)", lambda: run_torchrun(NODE_IPS[0], free_port()))

        print(f"XGBoost, {XGB_ROWS} rows x {XGB_ROUNDS} rounds:", flush=True)
        params = {k: v for k, v in XGB_PARAMS.items() if k != "objective"}
        record("XGBEstimator (3 workers)", lambda: XGBEstimator(
            XGB_ROUNDS, str(XGB_PARAMS["objective"]), params, XGBScalingConfig(WORLD, 1, False)).fit(df, label_col="y"))  # fmt: skip
        record("Ray Train XGBoostTrainer (3 workers)", lambda: XGBoostTrainer(
            xgb_ray_train_loop, train_loop_config={"params": XGB_PARAMS, "rounds": XGB_ROUNDS}, scaling_config=scaling,
            datasets={"train": ray.data.from_pandas(df)}, run_config=RunConfig(storage_path=storage)).fit())  # fmt: skip
        record("xgboost.train (1 process)", lambda: xgb.train(
            XGB_PARAMS, xgb.DMatrix(df.drop(columns="y"), df["y"]), XGB_ROUNDS))  # fmt: skip

    med = {k: v["median_s"] for k, v in rows.items()}
    ratios = {
        "PyTorchDistributor / torchrun": med["PyTorchDistributor"] / med["torchrun (3 agents, static)"],
        "PyTorchDistributor / TorchTrainer": med["PyTorchDistributor"] / med["Ray Train TorchTrainer"],
        "PyTorchDistributor / torchrun, first runs": rows["PyTorchDistributor"]["first_run_s"]
        / rows["torchrun (3 agents, static)"]["first_run_s"],
        "XGBEstimator / XGBoostTrainer": med["XGBEstimator (3 workers)"] / med["Ray Train XGBoostTrainer (3 workers)"],
        "XGBEstimator / xgboost.train": med["XGBEstimator (3 workers)"] / med["xgboost.train (1 process)"],
    }
    return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "repeats": repeats, "machine": machine(),
            "results": rows, "ratios": ratios, "targets": TARGETS}  # fmt: skip


def target_text(target: float | None) -> str:
    return f"≤ {target:.1f}" if target is not None else ""


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# Distributor benchmark", "",
        f"{report['when']}; median of {report['repeats']} runs after one warm-up (the first run).", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; Python {m['python']}, "
        f"Ray {m['ray']}, torch {m['torch']}, xgboost {m['xgboost']}. {m['cluster']}.", "",
        "| runner | median (s) | first run (s) | runs (s) |", "|---|---:|---:|---|",
    ]  # fmt: skip
    lines += [
        f"| {k} | {v['median_s']:.2f} | {v['first_run_s']:.2f} | {', '.join(f'{t:.2f}' for t in v['runs_s'])} |"
        for k, v in report["results"].items()
    ]
    lines += ["", "| ratio | value | target |", "|---|---:|---:|"]
    lines += [f"| {k} | {v:.2f} | {target_text(report['targets'].get(k))} |" for k, v in report["ratios"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.distributors", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per runner after one warm-up")
    ap.add_argument("--torchrun-worker", action="store_true", help=argparse.SUPPRESS)  # torchrun's child
    args = ap.parse_args(argv)
    if args.torchrun_worker:
        torchrun_worker()
        return 0
    report = bench(args.repeats)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "distributors.json").write_text(json.dumps(report, indent=1))
    (RESULTS / "distributors.md").write_text(markdown(report))
    print()
    for k, v in report["ratios"].items():
        target = report["targets"].get(k)
        print(f"  {k:<42} {v:5.2f}" + (f"  (target <= {target})" if target else ""))
    print(f"\nwritten: {RESULTS / 'distributors.json'}, {RESULTS / 'distributors.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
