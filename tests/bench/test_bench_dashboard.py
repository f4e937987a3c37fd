"""The dashboard renderer's pure parts (bench/dashboard/panels.py, workload.py) against the chart's real
dashboard: every panel yields queries with no variable left, legends and grid places as Grafana draws them.
A dashboard edit the renderer cannot follow fails here; the render itself needs a cluster and Prometheus
(`make dashboard-picture`)."""

from __future__ import annotations

import re

import pytest
import yaml
from bench.dashboard import panels, workload
from bench.dashboard.prometheus import Series

DASHBOARD = panels.load()
VALUES = panels.variables(DASHBOARD, interval_s=5, rate_interval_s=60, range_s=600)


def test_every_panel_of_the_chart_yields_queries_with_no_variable_left() -> None:
    ps = panels.panels(DASHBOARD, VALUES)
    titles = [p["title"] for p in DASHBOARD["panels"]]
    assert [p.title for p in ps] == titles and len(ps) >= 10
    for p in ps:
        assert p.targets, p.title
        for t in p.targets:
            assert "$" not in t.expr and "[[" not in t.expr, (p.title, t.expr)
            assert "kubepool_" in t.expr, (p.title, t.expr)
    rated = [t.expr for p in ps for t in p.targets if "rate(" in t.expr]
    assert rated and all("[60s]" in e for e in rated)


def test_the_panels_tile_the_grid_without_overlap() -> None:
    ps = panels.panels(DASHBOARD, VALUES)
    height = panels.grid_height(ps)
    cells = [(x, y) for p in ps for x in range(p.grid.x, p.grid.x + p.grid.w) for y in range(p.grid.y, p.grid.y + p.grid.h)]
    assert len(cells) == len(set(cells)), "two panels share a grid cell"
    for p in ps:
        left, bottom, w, h = panels.rect(p.grid, height)
        assert 0 <= left < left + w <= 1 and 0 <= bottom < bottom + h <= 1, p.title


def test_variables_cover_grafanas_forms_and_refuse_unknown_ones() -> None:
    values = {"__rate_interval": "60s", "pool": "train"}
    expr = 'rate(x{pool="$pool"}[$__rate_interval]) + rate(x{pool="${pool}"}[${__rate_interval}]) + y{p="[[pool]]"}'
    assert panels.substitute(expr, values) == 'rate(x{pool="train"}[60s]) + rate(x{pool="train"}[60s]) + y{p="train"}'
    with pytest.raises(ValueError, match=r"unknown variable \$namespace"):
        panels.substitute('x{ns="$namespace"}', values)


def test_dashboard_variables_resolve_to_their_current_value_or_fail_by_name() -> None:
    board = {"templating": {"list": [{"name": "datasource", "type": "datasource"},
                                     {"name": "pool", "type": "custom", "current": {"value": ["a", "b"]}}]}}
    values = panels.variables(board, interval_s=5, rate_interval_s=60, range_s=600)
    assert values["datasource"] == "prometheus" and values["pool"] == "a|b" and values["__range"] == "600s"
    board["templating"]["list"].append({"name": "ns", "type": "query"})
    with pytest.raises(ValueError, match=r"\$ns"):
        panels.variables(board, interval_s=5, rate_interval_s=60, range_s=600)
    with pytest.raises(ValueError, match="at least 1s"):
        panels.duration(0.5)


def test_a_panel_without_a_query_or_off_the_grid_is_named() -> None:
    with pytest.raises(ValueError, match="'Empty' has no PromQL query"):
        panels.panels({"panels": [{"title": "Empty", "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8}, "targets": []}]}, {})
    with pytest.raises(ValueError, match="'Wide'.*24-column"):
        panels.panels({"panels": [{"title": "Wide", "gridPos": {"x": 12, "y": 0, "w": 16, "h": 8},
                                   "targets": [{"expr": "up"}]}]}, {})
    row = {"type": "row", "panels": [{"title": "In a row", "gridPos": {"x": 0, "y": 1, "w": 24, "h": 4},
                                      "targets": [{"expr": "up"}, {"expr": "down", "hide": True}]}]}
    (p,) = panels.panels({"panels": [row]}, {})
    assert p.title == "In a row" and [t.expr for t in p.targets] == ["up"]


def test_legends_follow_legend_format() -> None:
    labels = {"__name__": "kubepool_pool_ready_nodes", "pool": "train", "job": "op"}
    assert panels.legend("p95 {{pool}}", labels) == "p95 train"
    assert panels.legend("{{ kind }} {{reason}}", {"kind": "job", "reason": "403"}) == "job 403"
    assert panels.legend("queued", labels) == "queued"
    assert panels.legend("", labels) == 'kubepool_pool_ready_nodes{job="op", pool="train"}'


def test_the_workload_queues_fails_and_is_refused_on_its_own_nodes() -> None:
    pools = {p.name: p for p in workload.POOLS}
    asked = {n: sum(j.instances for j in workload.JOBS if j.at_s == 0 and j.pool == n) for n in pools}
    assert any(asked[n] > pools[n].max_nodes for n in pools)  # the first wave asks more than a pool holds
    failing = [j for j in workload.JOBS if j.fails]  # two in one pool, in different waves: rate() sees the second
    assert len(failing) == 2 and failing[0].pool == failing[1].pool and failing[0].at_s < failing[1].at_s
    unplaceable = [j for j in workload.JOBS if j.unplaceable]
    assert len(unplaceable) == 2 and unplaceable[0].pool == unplaceable[1].pool and unplaceable[0].at_s < unplaceable[1].at_s
    cancelled = [j for j in workload.JOBS if j.cancel_at_s is not None]
    assert len(cancelled) == 2 and cancelled[0].pool == cancelled[1].pool and cancelled[0].at_s < cancelled[1].at_s
    for j in cancelled:  # queued when cancelled: behind an earlier job of a one-instance pool, whose head runs ≥ 8 s
        ahead = [a for a in workload.JOBS[:workload.JOBS.index(j)] if a.pool == j.pool and a.at_s == j.at_s]
        assert ahead and pools[j.pool].max_nodes == 1 and j.cancel_at_s is not None and j.cancel_at_s - j.at_s < 8
    assert any(p.min_nodes for p in workload.POOLS)  # warm placeholders
    refused = [j for j in workload.JOBS if j.namespace == workload.QUOTA_NAMESPACE]
    assert refused and all(j.instances > int(workload.quota(1)["spec"]["hard"]["pods"]) for j in refused)
    labels = workload.node_labels()
    assert sorted(labels.values()) == sorted(f"dash-{p.name}" for p in workload.POOLS for _ in range(p.nodes))
    for p in workload.POOLS:
        assert workload.pool(p)["spec"]["nodeSelector"] == {workload.NODE_LABEL: f"dash-{p.name}"}
    for j in unplaceable:  # the pool's nodes carry its own value of NODE_LABEL; the job asks for one none has
        spec = workload.mljob(j)["spec"]
        [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchExpressions"] == [{"key": workload.NODE_LABEL, "operator": "In", "values": [workload.NOWHERE]}]
        assert workload.NOWHERE not in labels.values() and spec["instancesTimeoutSeconds"] == workload.UNPLACEABLE_TIMEOUT_S
    assert all("affinity" not in workload.mljob(j)["spec"] for j in workload.JOBS if not j.unplaceable)
    env = {j.name: workload.mljob(j)["spec"]["env"][0]["name"] for j in workload.JOBS}
    assert sorted(env.values()).count(workload.FAIL_ENV) == len(failing)
    for name, stage in workload.STAGES.items():  # the env each stage selects on is the jobs' env
        doc = yaml.safe_load(stage)
        assert doc["metadata"]["name"] == name
        selected = re.search(r'"(\w+)"', doc["spec"]["selector"]["matchExpressions"][2]["key"])
        assert selected and selected.group(1) in env.values()


def test_a_target_with_no_number_is_named_with_its_panel() -> None:
    from bench.dashboard.__main__ import query
    from bench.dashboard.prometheus import has_data

    nan = float("nan")
    assert not has_data([]) and not has_data([({}, [(1.0, nan)])]) and has_data([({}, [(1.0, nan), (2.0, 0.0)])])
    ps = panels.panels(DASHBOARD, VALUES)
    missing = ps[1].targets[1].expr

    class Answers:  # Prometheus's answers: one series per query, none for one target, all NaN for another
        def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
            if expr == missing:
                return []
            return [({}, [(start, nan)])] if "histogram_quantile(0.95" in expr else [({}, [(start, 1.0)])]

    results, empty = query(Answers(), ps, 0.0, 60.0, 5.0)  # type: ignore[arg-type]
    assert len(results) == len(ps)
    assert f"{ps[1].title!r}: {missing}" in empty
    assert all("0.95" in e for e in empty if missing not in e) and len(empty) == 3


def test_the_finished_panel_must_show_the_ends_before_running() -> None:
    from bench.dashboard.__main__ import ends_missing

    ps = panels.panels(DASHBOARD, VALUES)
    [finished] = [i for i, p in enumerate(ps) if any("kubepool_mljobs_finished_total" in t.expr for t in p.targets)]
    shown = [({"phase": "DONE", "reason": "Completed"}, [(1.0, 0.5)]),
             ({"phase": "FAILED", "reason": "InstancesUnavailable"}, [(1.0, 0.0), (2.0, 1.0)]),
             ({"phase": "CANCELLED", "reason": "Cancelled"}, [(1.0, 0.0)])]  # a series at 0: drawn flat, not shown
    results = [[[] for _ in p.targets] for p in ps]
    results[finished] = [shown]
    assert ends_missing(ps, results) == [f"{ps[finished].title!r}: no CANCELLED Cancelled (a job that ended before RUNNING)"]
    assert workload.missing_ends(shown[:2] + [({"phase": "CANCELLED", "reason": "Cancelled"}, [(3.0, 2.0)])]) == []
