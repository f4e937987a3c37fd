"""A real Prometheus (built from its Go module by hack/prometheus/build.sh, cached outside the repo) scraping
the operator's /metrics, and its HTTP API's range queries."""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.cluster import ROOT, free_port

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


@dataclass
class Prometheus:
    """`prometheus` on 127.0.0.1 with its TSDB under `work`; `stop` ends it (and only it)."""

    work: Path
    target: str  # host:port of the operator's metrics endpoint
    scrape_s: float = 1.0
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        shutil.rmtree(self.work, ignore_errors=True)  # an earlier run's samples would be drawn too
        self.work.mkdir(parents=True)
        cfg = self.work / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config(self.target, self.scrape_s)))
        with (self.work / "prometheus.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [str(binary()), f"--config.file={cfg}", f"--storage.tsdb.path={self.work / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._up():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus did not start scraping {self.target}; see {self.work / 'prometheus.log'}")
            time.sleep(0.5)

    def _up(self) -> bool:
        try:
            return any(v == 1 for _, points in self.query_range("up", time.time() - 5, time.time(), 1.0) for _, v in points)
        except httpx.HTTPError:
            return False

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        r = httpx.get(f"{self.url}/api/v1/query_range", timeout=30,
                      params={"query": expr, "start": start, "end": end, "step": step})
        body = r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus refused {expr!r}: {body.get('errorType')}: {body.get('error')}")
        return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in body["data"]["result"]]

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def has_data(series: list[Series]) -> bool:
    """At least one real number: a histogram_quantile over no observations is all NaN, which draws nothing."""
    return any(not math.isnan(v) for _, points in series for _, v in points)
