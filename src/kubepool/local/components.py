"""The control plane's components, in start order, and kwok's: each one's command line and health URL."""

from __future__ import annotations

from kubepool.local import kwok
from kubepool.local.flags import apiserver_args, controller_manager_args, etcd_args, etcd_url, scheduler_args
from kubepool.local.layout import Layout
from kubepool.local.processes import Component

# Start order; `down` stops in reverse. Agents and kwok come last: they need a serving apiserver.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def control_plane(lay: Layout) -> list[Component]:
    return [
        Component("etcd", etcd_args(lay), f"{etcd_url(lay)}/health"),
        Component("kube-apiserver", apiserver_args(lay), f"{lay.apiserver_url}/readyz"),
        Component(
            "kube-controller-manager",
            controller_manager_args(lay),
            f"https://127.0.0.1:{lay.ports.controller_manager}/healthz",
        ),
        Component("kube-scheduler", scheduler_args(lay), f"https://127.0.0.1:{lay.ports.scheduler}/healthz"),
    ]


def kwok_component(lay: Layout) -> Component:
    return Component(kwok.NAME, kwok.args(lay), kwok.health_url(lay))

