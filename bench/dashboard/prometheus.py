"""A real Prometheus (built from its Go module by hack/prometheus/build.sh, cached outside the repo) scraping
the operator's /metrics, and its HTTP API's range queries."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.cluster import ROOT, free_port
from bench.controllers import Controller

BUILD = ROOT / "hack" / "prometheus" / "build.sh"
Series = tuple[dict[str, str], list[tuple[float, float]]]  # labels, (unix time, value) with NaN for gaps


def binary() -> Path:
    """The build prints its bin dir last (a no-op when cached); its progress lines reach the terminal."""
    out = subprocess.run(["bash", str(BUILD)], stdout=subprocess.PIPE, text=True, check=True).stdout
    return Path(out.strip().splitlines()[-1]) / "prometheus"


def config(target: str, scrape_s: float) -> dict[str, Any]:
    every = f"{round(scrape_s * 1000)}ms"  # a Prometheus duration has no decimal point
    return {"global": {"scrape_interval": every, "evaluation_interval": every},
            "scrape_configs": [{"job_name": "kubepool-operator", "static_configs": [{"targets": [target]}]}]}


class Prometheus(Controller):
    """`prometheus` on 127.0.0.1 with its config, log and TSDB under `work`; started and stopped as the
    benchmarks' controllers are (bench.controllers.Controller)."""

    def __init__(self, work: Path, target: str, scrape_s: float = 1.0) -> None:
        self.work, self.target, self.scrape_s = work, target, scrape_s  # target: host:port of the operator's /metrics
        self.port = free_port()
        argv = [str(binary()), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}"]
        super().__init__("prometheus", argv, dict(os.environ), work / "prometheus.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, settle: bool = True) -> None:
        shutil.rmtree(self.work, ignore_errors=True)  # an earlier run's samples would be drawn too
        self.work.mkdir(parents=True)
        (self.work / "prometheus.yml").write_text(yaml.safe_dump(config(self.target, self.scrape_s)))
        super().start(settle)

    def ready(self) -> bool:
        """Ready once it has scraped the operator: `up` is 1."""
        try:
            return any(v == 1 for _, points in self.query_range("up", time.time() - 5, time.time(), 1.0) for _, v in points)
        except httpx.HTTPError:
            return False

    def settle(self, quiet_s: float = 0.0, timeout: float = 0.0) -> None:
        """Nothing to wait for: no clock starts after it."""

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        r = httpx.get(f"{self.url}/api/v1/query_range", timeout=30,
                      params={"query": expr, "start": start, "end": end, "step": step})
        body = r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus refused {expr!r}: {body.get('errorType')}: {body.get('error')}")
        return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in body["data"]["result"]]


def has_data(series: list[Series]) -> bool:
    """At least one real number: a histogram_quantile over no observations is all NaN, which draws nothing."""
    return any(not math.isnan(v) for _, points in series for _, v in points)
