"""The chart's monitoring options, offline: a ServiceMonitor or a PodMonitor that scrape the port the operator
serves its metrics on, and the Grafana dashboard as a sidecar-labelled ConfigMap carrying the shipped file."""

from __future__ import annotations

import json
from typing import Any

from chartlib import CHART, KUBE_VERSION, NAMESPACE, by_kind, run_helm


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
