"""`kubepool local up|down|status`: the local Kubernetes control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler on loopback), its nodes and kwok, started, repaired, reported, stopped.

Owns the state dir (`kubepool.local.layout`) and every process started from it: node agents
(`kubepool.local.agent`, one process per node), real nodes (`kubepool.local.realnode`) and kwok
(`kubepool.local.kwok`) are started here too so that one `down` stops everything `up` started. The command lines
are `flags`, the components `components`, the process handling `processes`.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import yaml

from kubepool.local import kwok
from kubepool.local.buildscript import run_build_script
from kubepool.local.components import CONTROL_PLANE, control_plane, kwok_component
from kubepool.local.flags import AGENT_MODULE, agent_args, kubeconfig, scheduler_config
from kubepool.local.layout import BUILD_SCRIPT, DEFAULT_STATE_DIR, ClusterError, Layout, Log, Ports
from kubepool.local.nodeconfig import SLOT_PORT_STRIDE, load_node_names, node_process, slot_nodes_config
from kubepool.local.pki import ensure_pki
from kubepool.local.processes import Component, alive, ensure, healthy, log_tail, read_pid, stop
from kubepool.local.realnode import nodes as realnodes
from kubepool.local.realnode.dns import DnsError
from kubepool.local.realnode.host import HostError
from kubepool.local.realnode.images import DEFAULT_IMAGES, ImageError
from kubepool.local.realnode.network import NetworkError, real_nodes_config

REAL_NODE_ERRORS = (realnodes.RealNodeError, HostError, ImageError, DnsError, NetworkError)


def ensure_binaries(say: Log) -> Path:
    """Build (or find cached) the pinned binaries, relaying the build's progress; return their bin dir."""
    say(f"binaries: {BUILD_SCRIPT} (a no-op when cached; a cold build takes 10+ minutes)")
    return run_build_script(BUILD_SCRIPT, say, ClusterError)


def agent_available() -> bool:
    spec = importlib.util.find_spec(AGENT_MODULE)
    if spec is None:
        return False
    if spec.submodule_search_locations is None:
        return True
    return importlib.util.find_spec(f"{AGENT_MODULE}.__main__") is not None



def _write_if_changed(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != data:
        path.write_text(data)


def prepare(lay: Layout, nodes_yaml: str) -> None:
    """Write PKI, kubeconfigs, scheduler config, cluster.json and nodes.yaml (existing PKI is kept)."""
    for sub in ("logs", "pids", "kubeconfigs"):
        (lay.state_dir / sub).mkdir(parents=True, exist_ok=True)
    pki = ensure_pki(lay.pki.dir)
    ca = pki.ca_cert.read_bytes()
    for name, path in (
        ("admin", lay.kubeconfig),
        ("controller-manager", lay.component_kubeconfig("controller-manager")),
        ("scheduler", lay.component_kubeconfig("scheduler")),
    ):
        cfg = kubeconfig(lay.apiserver_url, ca, pki.cert(name).read_bytes(), pki.key(name).read_bytes(), name)
        _write_if_changed(path, yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)
    _write_if_changed(lay.scheduler_config, yaml.safe_dump(scheduler_config(lay), sort_keys=False))
    _write_if_changed(lay.cluster_json, json.dumps(lay.to_json(), indent=2) + "\n")
    _write_if_changed(lay.nodes_yaml, nodes_yaml)
    _write_if_changed(kwok.config_path(lay), kwok.stages_config(lay))


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """Serialise `up`/`down` on one state dir: two concurrent `up`s would start every component twice."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / ".lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _agent_pid_names(lay: Layout) -> list[str]:
    return sorted(p.stem for p in (lay.state_dir / "pids").glob("agent-*.pid"))


def up(
    state_dir: Path = DEFAULT_STATE_DIR,
    *,
    nodes_config: Path | None = None,
    fake_nodes: int = 0,
    real_nodes: int = 0,
    real_node_images: tuple[str, ...] = DEFAULT_IMAGES,
    port_offset: int = 0,
    slot: int = 0,
    say: Log = print,
) -> Layout:
    """Start (or reuse, or repair) the cluster in `state_dir`; return its layout once the API is ready and
    its local nodes are Ready.

    Without `nodes_config` an existing cluster keeps its node config and a new one gets `DEFAULT_NODES_CONFIG`
    on the addresses of `slot` (see `slot_nodes_config`); the ports move by `port_offset`, by default
    `SLOT_PORT_STRIDE`·slot. `real_nodes` N replaces the node config by N real nodes (`kind: kubelet`,
    kubepool.local.realnode), into whose containerd `real_node_images` of `make images` are imported.
    """
    t0 = time.monotonic()
    state_dir = state_dir.resolve()
    if real_nodes and nodes_config is not None:
        raise ClusterError("--real-nodes and --nodes-config exclusive: put `kind: kubelet` entries in the file")
    bin_dir = ensure_binaries(say)
    with _locked(state_dir):
        lay = _up_locked(state_dir, bin_dir, nodes_config, real_nodes, fake_nodes,
                         port_offset or SLOT_PORT_STRIDE * slot, slot, real_node_images, say)
    wait_nodes_ready(lay, say)
    say(f"ready in {time.monotonic() - t0:.1f}s")
    say(f"export KUBECONFIG={lay.kubeconfig}")
    return lay


def _up_locked(
    state_dir: Path, bin_dir: Path, nodes_config: Path | None, real_nodes: int, fake_nodes: int,
    port_offset: int, slot: int, real_node_images: tuple[str, ...], say: Log,
) -> Layout:
    existing = Layout.load(state_dir)
    # An existing cluster keeps its ports and slot: its running processes and kubeconfig already use them.
    lay = (replace(existing, bin_dir=bin_dir) if existing
           else Layout(state_dir, bin_dir, Ports().shifted(port_offset), slot=slot))
    say(f"state: {state_dir} (apiserver {lay.apiserver_url})")
    if real_nodes:
        nodes_text = real_nodes_config(real_nodes, lay.slot)  # an existing cluster's slot: its addresses
    elif nodes_config is not None:
        nodes_text = nodes_config.resolve().read_text()
    elif lay.nodes_yaml.exists():
        nodes_text = lay.nodes_yaml.read_text()
    else:
        nodes_text = slot_nodes_config(slot)
    prepare(lay, nodes_text)

    comps = control_plane(lay)
    ensure(lay, comps[:1], say)  # etcd
    ensure(lay, comps[1:2], say)  # apiserver, /readyz
    ensure(lay, comps[2:], say)  # controller-manager + scheduler start in parallel
    ensure(lay, [kwok_component(lay)], say)

    procs = node_process(lay.nodes_yaml)
    nodes = [n for n, p in procs.items() if p.startswith("agent-")]
    wanted = {f"agent-{n}" for n in nodes}
    for stale in set(_agent_pid_names(lay)) - wanted:  # nodes removed from the config
        stop(lay, stale)
        say(f"  {stale}: stopped (node no longer configured)")
    if not procs:
        say("nodes: none configured")
    elif not nodes:
        pass  # real nodes only
    elif agent_available():
        ensure(lay, [Component(f"agent-{n}", agent_args(lay, n), None, restart_on_change=False) for n in nodes], say)
    else:
        say(f"node agents: {AGENT_MODULE} is not importable yet, skipping {len(nodes)} local node(s)")
    try:
        realnodes.up(lay, lay.slot, real_node_images, say)
    except REAL_NODE_ERRORS as e:
        raise ClusterError(f"real nodes: {e}") from e

    if fake_nodes:
        created = kwok.ensure_fake_nodes(lay, fake_nodes)
        say(f"fake nodes: {fake_nodes} (kwok-node-0..{fake_nodes - 1}, {created} created)")
    return lay


def node_readiness(lay: Layout) -> dict[str, bool]:
    """Every registered Node and whether its Ready condition is True."""
    items = json.loads(lay.kubectl("get", "nodes", "-o", "json"))["items"]
    return {
        n["metadata"]["name"]: any(
            c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", [])
        )
        for n in items
    }


NODE_READY_TIMEOUT_S = 180.0


def wait_nodes_ready(lay: Layout, say: Log, timeout_s: float = NODE_READY_TIMEOUT_S) -> None:
    """Wait for every local node of the config to be Ready; a failure names each node that is not, with its
    agent's state and the last lines of its log."""
    procs = node_process(lay.nodes_yaml)
    if not agent_available():
        procs = {n: p for n, p in procs.items() if not p.startswith("agent-")}
    names = list(procs)
    if not names:
        return
    t0 = time.monotonic()
    waiting: set[str] = set(names)
    while True:
        ready = node_readiness(lay)
        waiting = {n for n in names if not ready.get(n)}
        dead = {n for n in waiting if not alive(lay, procs[n])}
        if not waiting:
            say(f"nodes: {len(names)} Ready in {time.monotonic() - t0:.1f}s")
            return
        if dead or time.monotonic() - t0 > timeout_s:
            break
        time.sleep(0.5)
    why = []
    for n in sorted(waiting):
        state = "not registered" if n not in ready else "NotReady"
        proc = procs[n]
        agent = "running" if alive(lay, proc) else "NOT RUNNING"
        tail = "\n".join(f"    {line}" for line in log_tail(lay, proc).splitlines())
        why.append(f"  node {n}: {state}, {proc.split('-')[0]} {agent}; last lines of {lay.log(proc)}:\n{tail}")
    raise ClusterError(
        f"local nodes not Ready after {time.monotonic() - t0:.0f}s: {', '.join(sorted(waiting))}\n" + "\n".join(why)
    )


def _say_nodes(lay: Layout, say: Log) -> None:
    ready = node_readiness(lay)
    for name in load_node_names(lay.nodes_yaml):
        state = "not registered" if name not in ready else "Ready" if ready[name] else "NotReady"
        say(f"  node {name:<21} {state}")
    fake = [r for n, r in ready.items() if n.startswith("kwok-node-")]
    if fake:
        say(f"  fake nodes                 {sum(fake)}/{len(fake)} Ready")


def _realnode_pid_names(lay: Layout) -> list[str]:
    pids = lay.state_dir / "pids"
    return sorted(p.stem for pat in ("coredns.pid", "netpol.pid", "containerd-*.pid", "kubelet-*.pid") for p in pids.glob(pat))


def _all_component_names(lay: Layout) -> list[str]:
    return [*CONTROL_PLANE, kwok.NAME, *_agent_pid_names(lay), *_realnode_pid_names(lay)]


def down(state_dir: Path = DEFAULT_STATE_DIR, *, say: Log = print) -> None:
    """Stop every process `up` started from `state_dir` (agents first) and remove the state dir."""
    state_dir = state_dir.resolve()
    if not state_dir.exists():
        say(f"no local cluster at {state_dir}: nothing to stop")
        return
    # Without cluster.json (a crashed first `up`) the bin dir is irrelevant: stopping only needs pid files.
    lay = Layout.load(state_dir) or Layout(state_dir, Path("/nonexistent"))
    with _locked(state_dir):
        try:
            realnodes.down(lay, say)  # while the apiserver still answers: its kubelets stop their pods
        except REAL_NODE_ERRORS as e:
            raise ClusterError(f"real nodes: {e} (state kept in {state_dir}; fix it and run down again)") from e
        for name in reversed(_all_component_names(lay)):
            # Agents get longer: they stop their pods' processes before exiting.
            if stop(lay, name, timeout=20.0 if name.startswith("agent-") else 10.0):
                say(f"  {name}: stopped")
        shutil.rmtree(state_dir, ignore_errors=True)
    say(f"removed {state_dir}")


def status(state_dir: Path = DEFAULT_STATE_DIR, *, say: Log = print) -> int:
    """Print each component's state; 0 when all are healthy, 1 otherwise (crashed ones with their log tail)."""
    state_dir = state_dir.resolve()
    lay = Layout.load(state_dir)
    if lay is None:
        say(f"no local cluster at {state_dir} (start one with `kubepool local up`)")
        return 1
    say(f"cluster {lay.apiserver_url} (state {state_dir})")
    comps = [*control_plane(lay), kwok_component(lay)]
    comps += [Component(n, [], None) for n in (*_agent_pid_names(lay), *_realnode_pid_names(lay))]
    bad = 0
    for c in comps:
        pid = read_pid(lay, c.name)
        if pid is None:
            state = "not started"
            bad += 1
        elif not alive(lay, c.name):
            bad += 1
            tail = "\n".join(f"      {line}" for line in log_tail(lay, c.name).splitlines())
            state = f"CRASHED (pid {pid}); last lines of {lay.log(c.name)}:\n{tail}"
        elif healthy(lay, c):
            state = f"healthy (pid {pid})"
        else:
            bad += 1
            state = f"running but not healthy (pid {pid}), see {lay.log(c.name)}"
        say(f"  {c.name:<26} {state}")
    if healthy(lay, comps[1]):  # the apiserver answers: show what the nodes look like
        _say_nodes(lay, say)
    return 1 if bad else 0
