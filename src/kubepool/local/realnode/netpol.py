"""NetworkPolicy on the real nodes: ingress rules enforced with iptables on the pods' bridge.

Why our own: kube-network-policies (what kind runs) queues packets with nftables' `queue` statement, which this
kind of kernel lacks (CONFIG_NFT_QUEUE unset), and kube-router's policy controller assumes one instance per
host (it deletes every pod chain that is not its own node's), while all real nodes of a cluster share one host.

What it enforces: `policyTypes: [Ingress]` policies (the operator's per-job policy is one): a pod selected by
one is isolated, and a new connection to it is accepted only when some rule of some such policy allows its
source (`podSelector`, `namespaceSelector`, both, `ipBlock` with `except`; no `from` = anyone) and port
(numbers and named container ports, TCP/UDP/SCTP; no `ports` = all); the rest is rejected. Egress rules are not
enforced (`egress_ignored` says which policies have them). Traffic from the host (kubelet probes) is never
filtered, as on most clusters. `rules` is pure; `main` polls the API every second and replaces the chain
KUBEPOOL-RN<slot>-NP atomically (iptables-restore) when the rules change. Needs br_netfilter (bridged
traffic through iptables).

    python -m kubepool.local.realnode.netpol --state-dir DIR    (what `kubepool local up` runs)
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kubepool.local.realnode.network import RealNet

Obj = dict[str, Any]
POLL_S = 1.0


def chain(net: RealNet) -> str:
    return f"KUBEPOOL-RN{net.slot}-NP"


def jump(net: RealNet) -> list[str]:
    """The FORWARD rule that sends traffic towards the pods' bridge through the policy chain."""
    return ["-o", net.bridge, "-j", chain(net)]


def selects(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A LabelSelector against labels (pure). An empty selector selects everything."""
    sel = selector or {}
    if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for e in sel.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _labels(obj: Obj) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _ip(pod: Obj) -> str | None:
    return pod.get("status", {}).get("podIP") if not pod.get("spec", {}).get("hostNetwork") else None


def _policy_types(pol: Obj) -> list[str]:
    spec = pol.get("spec", {})
    return spec.get("policyTypes") or (["Ingress"] + (["Egress"] if spec.get("egress") else []))


def egress_ignored(policies: Iterable[Obj]) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in policies if "Egress" in _policy_types(p)]


def cidr_minus(cidr: str, excepts: Iterable[str]) -> list[str]:
    """`cidr` without the `except` ranges of an ipBlock, as CIDRs (pure)."""
    left: list[Any] = [ipaddress.ip_network(cidr, strict=False)]
    for ex in (ipaddress.ip_network(e, strict=False) for e in excepts):
        nxt: list[Any] = []
        for net in left:
            if net.version == ex.version and ex.subnet_of(net):
                nxt += list(net.address_exclude(ex))
            elif not (net.version == ex.version and net.subnet_of(ex)):
                nxt.append(net)
        left = nxt
    return [str(n) for n in sorted(left, key=lambda n: (n.version, n.network_address))]


def _sources(peer: Obj, pol_ns: str, pods: list[Obj], namespaces: dict[str, dict[str, str]]) -> list[str]:
    """The source addresses (IPs or CIDRs) a `from` peer allows."""
    if "ipBlock" in peer:
        return cidr_minus(peer["ipBlock"]["cidr"], peer["ipBlock"].get("except") or [])
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    out = []
    for pod in pods:
        ns = pod["metadata"]["namespace"]
        ip = _ip(pod)
        if ip is None:
            continue
        ns_ok = selects(ns_sel, namespaces.get(ns, {})) if ns_sel is not None else ns == pol_ns
        if ns_ok and (pod_sel is None or selects(pod_sel, _labels(pod))):
            out.append(ip)
    return out


def _ports(rule: Obj, pod: Obj) -> list[tuple[str, str]] | None:
    """(protocol, port) pairs of a rule for the destination pod; None = every port. Named ports resolve to the
    pod's container ports; a name the pod lacks allows nothing."""
    if not rule.get("ports"):
        return None
    named = {p["name"]: (p.get("protocol", "TCP"), p["containerPort"])
             for c in pod.get("spec", {}).get("containers", []) for p in c.get("ports") or [] if p.get("name")}
    out = []
    for p in rule["ports"]:
        proto, port = p.get("protocol", "TCP"), p.get("port")
        if isinstance(port, str) and not port.isdigit():
            if port not in named:
                continue
            proto, port = named[port]
        out.append((proto.lower(), "" if port is None else f"{port}" + (f":{p['endPort']}" if p.get("endPort") else "")))
    return out


def rules(net: RealNet, policies: list[Obj], pods: list[Obj], namespaces: dict[str, dict[str, str]]) -> list[list[str]]:
    """The policy chain's rules (pure): replies pass; for each isolated pod, its allowed (source, port) pairs
    return to FORWARD, anything else new towards it is rejected."""
    out: list[list[str]] = [["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"]]
    ingress = [p for p in policies if "Ingress" in _policy_types(p)]
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        ip, ns = _ip(pod), pod["metadata"]["namespace"]
        if ip is None or ipaddress.ip_address(ip) not in net.pod_network:
            continue
        mine = [p for p in ingress if p["metadata"]["namespace"] == ns and selects(p["spec"].get("podSelector"), _labels(pod))]
        if not mine:
            continue  # not isolated
        for pol in mine:
            for rule in pol["spec"].get("ingress") or []:
                peers = rule.get("from")
                srcs: list[str | None] = [None]
                if peers:
                    srcs = []
                    for peer in peers:
                        srcs += _sources(peer, ns, pods, namespaces)
                ports = _ports(rule, pod)
                for src in srcs:
                    base = ["-d", ip] + (["-s", src] if src else [])
                    if ports is None:
                        out.append([*base, "-j", "RETURN"])
                    for proto, port in ports or []:
                        out.append([*base, "-p", proto, *(["--dport", port] if port else []), "-j", "RETURN"])
        out.append(["-d", ip, "-j", "REJECT"])
    return out


def restore_input(net: RealNet, chain_rules: list[list[str]]) -> str:
    """iptables-restore --noflush input that replaces the chain's rules at once (pure)."""
    lines = ["*filter", f":{chain(net)} - [0:0]"]
    lines += [" ".join(["-A", chain(net), *r]) for r in chain_rules]
    return "\n".join([*lines, "COMMIT", ""])


def _get(kubectl: list[str], what: str) -> list[Obj]:
    out = subprocess.run([*kubectl, "get", what, "-A", "-o", "json"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    items: list[Obj] = json.loads(out.stdout)["items"]
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kubepool.local.realnode.netpol")
    ap.add_argument("--state-dir", type=Path, required=True)
    ns = ap.parse_args(argv)
    cluster = json.loads((ns.state_dir / "cluster.json").read_text())
    net = RealNet(int(cluster.get("slot", 0)))
    kubectl = [str(Path(cluster["binDir"]) / "kubectl"), f"--kubeconfig={cluster['kubeconfig']}"]
    applied: str | None = None
    warned: set[str] = set()
    while True:
        try:
            pols = _get(kubectl, "networkpolicies")
            pods = [p for p in _get(kubectl, "pods") if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
            nss = {n["metadata"]["name"]: _labels(n) for n in _get(kubectl, "namespaces")}
            for name in set(egress_ignored(pols)) - warned:
                print(f"NetworkPolicy {name}: its egress rules are not enforced (ingress only)", flush=True)
                warned.add(name)
            text = restore_input(net, rules(net, pols, pods, nss))
            if text != applied:
                proc = subprocess.run(["iptables-restore", "-w", "--noflush"], input=text, capture_output=True,
                                      text=True, timeout=30)
                if proc.returncode != 0:
                    print(f"iptables-restore refused the rules: {proc.stderr.strip()}", flush=True)
                else:
                    applied = text
                    print(f"{time.strftime('%H:%M:%S')} {text.count(chr(10)) - 3} rule(s) in {chain(net)}", flush=True)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
            print(f"cannot read the API: {e}", flush=True)
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
