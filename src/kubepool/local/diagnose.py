"""Why a wait on the local cluster failed, in words: the pods' states, their events, the last lines of their
logs, and where each one's node agent writes its own log. `make demo` and the tests print this instead of a
bare timeout."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from kubepool.local.layout import ClusterError, Layout
from kubepool.local.processes import log_tail

Obj = dict[str, Any]
LOG_LINES = 15


def _kubectl(lay: Layout, *args: str) -> str:
    try:
        return lay.kubectl(*args, timeout=30)
    except (ClusterError, subprocess.TimeoutExpired) as e:
        return f"({e})"


def pod_state(pod: Obj) -> str:
    """One line: phase, readiness and each container's waiting/terminated reason (what `kubectl get` hides)."""
    status = pod.get("status") or {}
    parts = [status.get("phase") or "Unknown"]
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("PodScheduled", "Ready") and cond.get("status") != "True":
            parts.append(f"{cond['type']}=False ({cond.get('reason') or ''}: {cond.get('message') or ''})".strip())
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        for kind in ("waiting", "terminated"):
            if kind in state:
                detail = state[kind]
                parts.append(f"{cs['name']} {kind}: {detail.get('reason') or ''} {detail.get('message') or ''}".rstrip())
        if cs.get("restartCount"):
            parts.append(f"{cs['name']} restarted {cs['restartCount']}x")
    return "; ".join(parts)


def _ready(pod: Obj) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def pods_report(lay: Layout, namespace: str, selector: str | None = None) -> str:
    """Every pod of `namespace` (matching `selector`) that is not Ready: its state, events, log tail and the
    log of the node agent that runs it."""
    args = ["get", "pods", "-n", namespace, "-o", "json", *(["-l", selector] if selector else [])]
    raw = _kubectl(lay, *args)
    try:
        pods = json.loads(raw)["items"]
    except (ValueError, KeyError):
        return f"cannot list pods in {namespace}: {raw}"
    if not pods:
        return f"no pods in namespace {namespace}" + (f" with labels {selector}" if selector else "")
    out = []
    for pod in pods:
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName")
        out.append(f"--- pod {namespace}/{name} on {node or '(no node)'}: {pod_state(pod)}")
        if _ready(pod):
            continue
        events = _kubectl(lay, "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
                          "--sort-by=.lastTimestamp", "-o", "custom-columns=REASON:.reason,MESSAGE:.message", "--no-headers")  # fmt: skip
        if events.strip():
            out.append("  events:\n" + "\n".join(f"    {line}" for line in events.strip().splitlines()[-8:]))
        restarted = any(cs.get("restartCount") for cs in (pod.get("status") or {}).get("containerStatuses") or [])
        logs = _kubectl(lay, "logs", "-n", namespace, name, "--all-containers", f"--tail={LOG_LINES}",
                        *(["--previous"] if restarted else []))  # fmt: skip
        if logs.strip():
            which = "previous run's" if restarted else "last"
            out.append(f"  {which} log lines:\n" + "\n".join(f"    {line}" for line in logs.strip().splitlines()))
        if node and lay.log(f"agent-{node}").exists():
            out.append(f"  node agent log: {lay.log(f'agent-{node}')}; its last lines:\n"
                       + "\n".join(f"    {line}" for line in log_tail(lay, f"agent-{node}", 6).splitlines()))
    return "\n".join(out)
