"""Prometheus metrics of the operator (served on OperatorConfig.metrics_port; 0 disables the endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

JOBS = Gauge("kubepool_mljobs", "MLJobs by phase", ["phase"])
QUEUED = Gauge("kubepool_mljobs_queued", "MLJobs waiting for pool capacity")
RECONCILE_SECONDS = Histogram("kubepool_reconcile_seconds", "Time to reconcile one MLJob",
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
API_ERRORS = Counter("kubepool_api_errors_total", "Kubernetes API calls that failed", ["status"])


def serve(port: int, addr: str = "0.0.0.0") -> None:
    if port:
        start_http_server(port, addr=addr)
