"""Renders the chart's Grafana dashboard from real data without Grafana: `python -m bench.dashboard`."""
