"""What real nodes change on the host, and how `down` puts it back.

`setup` records the host's state first (`<state>/realnodes/host.json`: the sysctls the kubelet and the bridge
plugin set, which host paths existed), then creates: the pods' bridge with the gateway address, one /32 per
node IP on `lo`, iptables chains KUBEPOOL-RN<slot> (nat: the `kubernetes` Service to the apiserver) and
KUBEPOOL-RN<slot>-FWD (filter: nothing forwarded off the bridge), one cgroup per node in every v1 hierarchy.
`teardown` removes all of it and every mount, network namespace and process the nodes left. Any command the
kernel refuses raises HostError naming the command and what it said.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from kubepool.local.realnode import netpol
from kubepool.local.realnode.network import RealNet

Log = Callable[[str], None]
CGROUP_FS = Path("/sys/fs/cgroup")
# Set by the kubelet (setupKernelTunables) and the CNI bridge plugin (isGateway), restored by `teardown`.
SYSCTLS = ("net/ipv4/ip_forward", "vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops",
           "net/bridge/bridge-nf-call-iptables")
# Paths outside the state dir that the kubelet, containerd and CNI write whatever they are told: removed by
# `teardown` only when `setup` found them absent.
OUTSIDE_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns")


class HostError(RuntimeError):
    """The kernel or a host tool refused a change; the message names the command and its error."""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    except FileNotFoundError as e:
        raise HostError(f"{argv[0]} is not installed (hack/realnode/deps.sh installs it)") from e
    if check and proc.returncode != 0:
        raise HostError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def nat_chain(net: RealNet) -> str:
    return f"KUBEPOOL-RN{net.slot}"


def forward_chain(net: RealNet) -> str:
    return f"KUBEPOOL-RN{net.slot}-FWD"


def iptables_rules(net: RealNet, service_ip: str, apiserver_port: int) -> list[tuple[str, str, list[str]]]:
    """(table, chain, rule) of the cluster's own chains (pure). The jumps into them are `jumps`."""
    return [
        # Pods reach the apiserver as in a cluster, through the `kubernetes` Service (KUBERNETES_SERVICE_HOST):
        # its ClusterIP is DNATed to the apiserver on loopback (route_localnet on the bridge allows that).
        ("nat", nat_chain(net), ["-d", f"{service_ip}/32", "-p", "tcp", "--dport", "443", "-j", "DNAT",
                                 "--to-destination", f"127.0.0.1:{apiserver_port}"]),
        # The bridge plugin turns on ip_forward: nothing from or to the pods' bridge is forwarded elsewhere.
        ("filter", forward_chain(net), ["-i", net.bridge, "!", "-o", net.bridge, "-j", "DROP"]),
        ("filter", forward_chain(net), ["!", "-i", net.bridge, "-o", net.bridge, "-j", "DROP"]),
    ]


def jumps(net: RealNet) -> list[tuple[str, str, list[str]]]:
    """Inserted first in their chains, in this order (so the NetworkPolicy chain comes before the FWD one)."""
    return [
        ("nat", "PREROUTING", ["-i", net.bridge, "-j", nat_chain(net)]),
        ("filter", "FORWARD", ["-j", forward_chain(net)]),
        ("filter", "FORWARD", netpol.jump(net)),  # filled by the netpol process
    ]


def own_chains(net: RealNet) -> list[tuple[str, str]]:
    return [("nat", nat_chain(net)), ("filter", forward_chain(net)), ("filter", netpol.chain(net))]


def _record_path(rn_dir: Path) -> Path:
    return rn_dir / "host.json"


def _read_sysctl(name: str) -> str:
    return (Path("/proc/sys") / name).read_text().strip()


def _write_sysctl(name: str, value: str) -> None:
    try:
        (Path("/proc/sys") / name).write_text(value + "\n")
    except OSError as e:
        raise HostError(f"the kernel refused sysctl {name.replace('/', '.')}={value}: {e}") from e


def _cgroup_dirs(cgroup: str, *, unified: bool = False) -> list[Path]:
    """The node's cgroup in every mounted v1 hierarchy, and with `unified` in the v2 one of a hybrid host too
    (the kubelet does not need it there, runc creates it)."""
    return [h / cgroup.lstrip("/") for h in sorted(CGROUP_FS.iterdir())
            if h.is_dir() and (unified or h.name != "unified")]


def setup(rn_dir: Path, net: RealNet, node_ips: list[str], cgroups: list[str], *, service_ip: str,
          apiserver_port: int, say: Log) -> None:
    """Create the host side of the real nodes (idempotent: `up` on a running cluster changes nothing)."""
    if os.geteuid() != 0:
        raise HostError("real nodes need root (containerd, the kubelet, the bridge and iptables)")
    rn_dir.mkdir(parents=True, exist_ok=True)
    record = _record_path(rn_dir)
    saved = json.loads(record.read_text()) if record.exists() else {
        "sysctls": {s: _read_sysctl(s) for s in SYSCTLS if (Path("/proc/sys") / s).exists()},
        "absentPaths": [p for p in OUTSIDE_PATHS if not os.path.lexists(p)],
        "nodeIPs": [], "cgroups": [],
    }
    # What `teardown` must remove even if the nodes config changes meanwhile.
    saved["nodeIPs"] = sorted(set(saved["nodeIPs"]) | set(node_ips))
    saved["cgroups"] = sorted(set(saved["cgroups"]) | set(cgroups))
    record.write_text(json.dumps(saved, indent=2) + "\n")
    gw = f"{net.gateway}/{net.pod_network.prefixlen}"
    if sh("ip", "link", "show", net.bridge, check=False).returncode != 0:
        sh("ip", "link", "add", "name", net.bridge, "type", "bridge")
    if gw not in sh("ip", "-4", "-o", "addr", "show", "dev", net.bridge).stdout:
        sh("ip", "addr", "add", gw, "dev", net.bridge)
    sh("ip", "link", "set", net.bridge, "up")
    _write_sysctl(f"net/ipv4/conf/{net.bridge}/route_localnet", "1")
    lo = sh("ip", "-4", "-o", "addr", "show", "dev", "lo").stdout
    for ip in node_ips:
        if f" {ip}/32 " not in lo:
            sh("ip", "addr", "add", f"{ip}/32", "dev", "lo")
    # NetworkPolicy sees pod-to-pod traffic only if bridged frames go through iptables (br_netfilter).
    bridge_nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
    if not bridge_nf.exists():
        raise HostError("NetworkPolicy on real nodes needs br_netfilter (no /proc/sys/net/bridge): "
                        "the kernel lacks CONFIG_BRIDGE_NETFILTER or the module is not loaded")
    _write_sysctl("net/bridge/bridge-nf-call-iptables", "1")
    for table, chain in own_chains(net):
        if sh("iptables", "-w", "-t", table, "-L", chain, "-n", check=False).returncode != 0:
            sh("iptables", "-w", "-t", table, "-N", chain)
        if chain != netpol.chain(net):  # the netpol process owns that one's rules
            sh("iptables", "-w", "-t", table, "-F", chain)
    for table, chain, rule in iptables_rules(net, service_ip, apiserver_port):
        sh("iptables", "-w", "-t", table, "-A", chain, *rule)
    for table, chain, rule in jumps(net):
        if sh("iptables", "-w", "-t", table, "-C", chain, *rule, check=False).returncode != 0:
            sh("iptables", "-w", "-t", table, "-I", chain, "1", *rule)
    for cgroup in cgroups:
        for d in _cgroup_dirs(cgroup):
            try:
                d.mkdir(exist_ok=True)
                if d.parent.name == "cpuset":  # a new v1 cpuset has no CPUs or memory nodes until given
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        (d / f).write_text((d.parent / f).read_text())
            except OSError as e:
                raise HostError(f"the kernel refused cgroup {d}: {e}") from e
    say(f"  host: bridge {net.bridge} {gw}, node IPs {', '.join(node_ips)} on lo, iptables "
        f"{', '.join(c for _, c in own_chains(net))}")


def _mount_points() -> list[Path]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        raw = line.split()[4]
        points.append(Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), raw)))
    return points


def unmount_under(root: Path) -> int:
    """Lazily unmount every mount at or below `root`, deepest first; return how many."""
    n = 0
    for p in sorted({p for p in _mount_points() if p == root or root in p.parents}, key=lambda p: -len(p.parts)):
        if sh("umount", "-l", str(p), check=False).returncode == 0:
            n += 1
    return n


def kill_matching(pattern: str) -> int:
    """SIGKILL processes whose command line contains `pattern` (a path of this cluster's own)."""
    n = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern in cmd:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(d.name), signal.SIGKILL)
                n += 1
    return n


def _kill_cgroup(d: Path) -> None:
    for procs in d.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def remove_cgroups(cgroup: str) -> None:
    for d in _cgroup_dirs(cgroup, unified=True):
        if not d.exists():
            continue
        _kill_cgroup(d)
        subdirs = sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [d]
        for sub in subdirs:
            for _ in range(50):  # a killed process leaves its cgroup a moment later
                try:
                    sub.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                raise HostError(f"cgroup {sub} cannot be removed (processes left: {(sub / 'cgroup.procs').read_text().split()})")


def remove_pod_netns(net: RealNet) -> int:
    """Delete the network namespaces (from containerd's CNI setup) that hold an address of our pod network."""
    n = 0
    netns = Path("/run/netns")
    for ns in sorted(netns.iterdir()) if netns.is_dir() else []:
        out = sh("ip", "-n", ns.name, "-4", "-o", "addr", "show", check=False).stdout
        addrs = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
        if any(ipaddress.ip_address(a) in net.pod_network for a in addrs):
            sh("ip", "netns", "delete", ns.name, check=False)
            n += 1
    return n


def teardown(rn_dir: Path, net: RealNet, say: Log) -> None:
    """Undo `setup` and whatever the nodes left (call after their kubelets and containerds stopped)."""
    record = _record_path(rn_dir)
    saved = json.loads(record.read_text()) if record.exists() else {}
    node_ips: list[str] = saved.get("nodeIPs", [])
    cgroups: list[str] = saved.get("cgroups", [])
    killed = kill_matching(str(rn_dir / ""))  # containerd shims (-address <our socket>), strays
    mounts = unmount_under(rn_dir)
    netns = remove_pod_netns(net)
    for cgroup in cgroups:
        remove_cgroups(cgroup)
    for table, chain, rule in jumps(net):
        while sh("iptables", "-w", "-t", table, "-D", chain, *rule, check=False).returncode == 0:
            pass
    for table, chain in own_chains(net):
        sh("iptables", "-w", "-t", table, "-F", chain, check=False)
        sh("iptables", "-w", "-t", table, "-X", chain, check=False)
    sh("ip", "link", "del", net.bridge, check=False)
    for ip in node_ips:
        sh("ip", "addr", "del", f"{ip}/32", "dev", "lo", check=False)
    restored = []
    for name, value in saved.get("sysctls", {}).items():
        if _read_sysctl(name) != value:
            _write_sysctl(name, value)
            restored.append(f"{name.replace('/', '.')}={value}")
    for p in saved.get("absentPaths", []):
        if os.path.lexists(p):
            unmount_under(Path(p))
            shutil.rmtree(p, ignore_errors=True)
    record.unlink(missing_ok=True)
    say(f"  host: {killed} stray process(es) killed, {mounts} mount(s), {netns} netns, bridge {net.bridge}, "
        f"iptables chains and node IPs removed; sysctls restored: {', '.join(restored) or 'none changed'}")
