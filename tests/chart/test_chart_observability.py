"""The chart's monitoring options, offline: a ServiceMonitor or a PodMonitor that scrape the port the operator
serves its metrics on, and the Grafana dashboard as a sidecar-labelled ConfigMap carrying the shipped file, whose
queries name only metrics and labels the operator exports, and plot every one of them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from chartlib import CHART, KUBE_VERSION, NAMESPACE, by_kind, run_helm
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from kubepool.api import ComputePoolStatus, MLJobStatus
from kubepool.controller import metrics
from support.factories import T0


def test_off_by_default(render: Any) -> None:
    objs = render()
    assert not by_kind(objs, "ServiceMonitor") and not by_kind(objs, "PodMonitor")
    assert not [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]


def test_service_monitor_selects_the_metrics_service(render: Any) -> None:
    objs = render("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=15s",
                  "--set", "metrics.serviceMonitor.labels.release=prom")
    [sm] = by_kind(objs, "ServiceMonitor")
    [svc] = [s for s in by_kind(objs, "Service") if s["metadata"]["name"].endswith("-metrics")]
    assert sm["metadata"]["labels"]["release"] == "prom"
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= svc["metadata"]["labels"].items()
    [endpoint] = sm["spec"]["endpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "15s"}
    assert endpoint["port"] in [p["name"] for p in svc["spec"]["ports"]]
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_pod_monitor_selects_the_operator_pods(render: Any) -> None:
    objs = render("--set", "metrics.podMonitor.enabled=true")
    [pm] = by_kind(objs, "PodMonitor")
    [deploy] = by_kind(objs, "Deployment")
    pod = deploy["spec"]["template"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [container] = pod["spec"]["containers"]
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics"}]
    assert "metrics" in [p["name"] for p in container["ports"]]


def test_dashboard_configmap_carries_the_shipped_dashboard(render: Any) -> None:
    objs = render("--set", "metrics.dashboard.enabled=true", "--set", "metrics.dashboard.namespace=monitoring")
    [cm] = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]
    assert cm["metadata"]["namespace"] == "monitoring" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "kubepool.json").read_text())
    assert json.loads(cm["data"]["kubepool.json"]) == shipped


def test_conflicting_monitoring_values_fail_with_a_message(helm: str) -> None:
    for settings, message in ((["metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true"], "enable one, not both"),
                              (["metrics.podMonitor.enabled=true", "metrics.enabled=false"], "need metrics.enabled: true"),
                              (["metrics.serviceMonitor.interval=soon"], "values don't meet the specifications")):
        args = [a for s in settings for a in ("--set", s)]
        proc = run_helm(helm, "template", "kp", str(CHART), "--kube-version", KUBE_VERSION, *args)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr


_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",)}


def exported() -> dict[str, tuple[str, set[str]]]:
    """Each kubepool_ metric family the operator exports → (type, label names): one pool's series made through
    metrics' own calls (a job that ended before RUNNING: every per-pool family gets a sample), and the declared
    names of the labelled metrics that have no sample until something goes wrong (errors by kind and reason)."""
    pool = "dashboard-labels"
    ended = MLJobStatus.model_validate({"phase": "FAILED", "reason": "InstancesUnavailable", "completionTime": T0})
    metrics.set_pool(pool, 1, ComputePoolStatus())
    metrics.observe_job(T0.isoformat(), pool, None, ended)
    try:
        out = {f.name: (f.type, {k for s in f.samples for k in s.labels} - {"le"})
               for f in REGISTRY.collect() if f.name.startswith("kubepool_")}
    finally:
        metrics.forget_pool(pool)
    for m in vars(metrics).values():
        if isinstance(m, MetricWrapperBase):
            out[m.describe()[0].name][1].update(m._labelnames)
    return out


def query_labels(expr: str, families: dict[str, tuple[str, set[str]]]) -> tuple[set[str], set[str]]:
    """(labels the query's series carry, labels it names: matchers, by/without) of one PromQL query; a metric
    the operator does not export, or a suffix its type has not (_bucket of a gauge), fails the test here."""
    carried: set[str] = set()
    named: set[str] = set()
    for name, matchers in re.findall(r"\b(kubepool_[a-z_]+)(\{[^}]*\})?", expr):
        base = next((name.removesuffix(sfx) for sfxs in _SUFFIXES.values() for sfx in sfxs
                     if name.endswith(sfx) and name.removesuffix(sfx) in families), name)
        assert base in families, f"{expr}: {name} is not a metric the operator exports ({sorted(families)})"
        kind, labels = families[base]
        assert name == base or name[len(base):] in _SUFFIXES.get(kind, ()), f"{expr}: {name}: {base} is a {kind}"
        carried |= labels | ({"le"} if name.endswith("_bucket") else set())
        named |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        named |= {n.strip() for n in clause.split(",") if n.strip()}
    return carried, named


def test_dashboard_queries_name_only_exported_metrics_and_labels_and_plot_them_all() -> None:
    families = exported()
    assert {"kubepool_mljobs_finished", "kubepool_build_info"} <= set(families)
    assert families["kubepool_mljobs_finished"][1] == {"pool", "phase", "reason"}
    assert families["kubepool_mljob_queued_seconds"][1] == families["kubepool_mljob_start_seconds"][1] == {"pool"}
    board = json.loads((CHART / "dashboards" / "kubepool.json").read_text())
    plotted: set[str] = set()
    for panel in board["panels"]:
        for t in panel["targets"]:
            expr = t["expr"]
            carried, named = query_labels(expr, families)
            assert named <= carried, f"{panel['title']!r}: {expr} names labels no series has: {named - carried}"
            grouped = [{n.strip() for n in c.split(",")} for c in re.findall(r"\bby\s*\(([^)]*)\)", expr)]
            result = set.intersection(*grouped) if grouped else carried
            result -= {"le"} if "histogram_quantile(" in expr else set()
            legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")))
            assert legend <= result, f"{panel['title']!r}: legend {t['legendFormat']!r} shows labels {expr} drops"
            plotted |= {f for f in families if re.search(rf"\b{f}(_bucket|_sum|_count|_total)?\b", expr)}
    assert plotted == set(families), f"exported metrics no panel plots: {sorted(set(families) - plotted)}"


def test_the_dashboard_check_catches_a_wrong_name_suffix_or_label() -> None:
    families = {"kubepool_x": ("gauge", {"pool"}), "kubepool_h": ("histogram", {"pool"})}
    assert query_labels('sum by (pool, le) (rate(kubepool_h_bucket{pool="a"}[1m]))', families) == (
        {"pool", "le"}, {"pool", "le"})
    assert query_labels("sum by (zone) (kubepool_x)", families) == ({"pool"}, {"zone"})
    for bad, message in (("kubepool_y", "not a metric the operator exports"), ("kubepool_x_total", "is a gauge")):
        with pytest.raises(AssertionError, match=message):
            query_labels(bad, families)
