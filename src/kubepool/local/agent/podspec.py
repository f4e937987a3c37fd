"""Pure translation of a Pod (a plain dict as the API returns it) into what the agent runs: environment
(`resolve_env`), `$(VAR)` expansion, the command line, the mount plan, the user to run as, the pod's
/etc/hosts, and the status the agent reports (container statuses, conditions, phase). No I/O."""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from lightkube.utils.quantity import parse_quantity as _parse_quantity

Obj = dict[str, Any]


class ConfigError(Exception):
    """A container's configuration references something missing: the kubelet's CreateContainerConfigError."""


def parse_quantity(q: str | int | float) -> Decimal:
    """A quantity as the kubelet reads it (lightkube's parser; ValueError if invalid)."""
    parsed = _parse_quantity(str(q).strip())
    if parsed is None:
        raise ValueError(f"invalid quantity {q!r}")
    return parsed


# --- environment ---------------------------------------------------------------------------------------
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: unknown references stay as written, `$$` escapes a `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR_REF.sub(sub, text)


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: Obj, path: str) -> str:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    m = _SUBSCRIPT.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    if path not in simple:
        raise ConfigError(f"unsupported fieldRef {path!r}")
    return str(simple[path] or "")


def resource_field_ref(container: Obj, ref: Obj, node_allocatable: Mapping[str, str]) -> str:
    """`limits.cpu` etc. with the divisor, rounded up as the kubelet does; a missing limit is the node's
    allocatable."""
    resource = str(ref["resource"])
    kind, _, name = resource.partition(".")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(name)
    if raw is None:
        raw = node_allocatable.get(name, "0")
    divisor = parse_quantity(ref.get("divisor") or "1")
    if divisor == 0:
        raise ConfigError(f"divisor of {resource} is zero")
    return str(max(math.ceil(parse_quantity(raw) / divisor), 1 if name == "cpu" else 0))


@dataclass(frozen=True)
class EnvSources:
    """The ConfigMaps and Secrets of the namespace the pod references, already fetched: name → data
    (Secret values base64-decoded) or absent when the object does not exist."""

    configmaps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def decode_secret(data: Mapping[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (data or {}).items()}


def env_references(containers: Iterable[Obj]) -> tuple[set[str], set[str]]:
    """(ConfigMap names, Secret names) the env of these containers reads."""
    cms: set[str] = set()
    secrets: set[str] = set()
    for c in containers:
        for src in c.get("envFrom") or []:
            if "configMapRef" in src:
                cms.add(src["configMapRef"]["name"])
            if "secretRef" in src:
                secrets.add(src["secretRef"]["name"])
        for e in c.get("env") or []:
            vf = e.get("valueFrom") or {}
            if "configMapKeyRef" in vf:
                cms.add(vf["configMapKeyRef"]["name"])
            if "secretKeyRef" in vf:
                secrets.add(vf["secretKeyRef"]["name"])
    return cms, secrets


def _lookup(kind: str, store: Mapping[str, Mapping[str, str]], ref: Obj) -> str | None:
    name, key, optional = ref.get("name", ""), ref["key"], bool(ref.get("optional"))
    data = store.get(name)
    if data is None:
        if optional:
            return None
        raise ConfigError(f'{kind} "{name}" not found')
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {name}")
    return data[key]


@dataclass(frozen=True)
class Defaults:
    """Env every container gets before its own: PATH, HOME, HOSTNAME and the apiserver address."""

    path: str
    home: str
    hostname: str
    apiserver_host: str
    apiserver_port: int

    def env(self) -> dict[str, str]:
        port = str(self.apiserver_port)
        return {
            "PATH": self.path,
            "HOME": self.home,
            "HOSTNAME": self.hostname,
            "KUBERNETES_SERVICE_HOST": self.apiserver_host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{self.apiserver_host}:{port}",
            "KUBERNETES_PORT_443_TCP": f"tcp://{self.apiserver_host}:{port}",
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
            "KUBERNETES_PORT_443_TCP_ADDR": self.apiserver_host,
            "KUBERNETES_PORT_443_TCP_PORT": port,
        }


def resolve_env(
    pod: Obj, container: Obj, sources: EnvSources, defaults: Defaults, node_allocatable: Mapping[str, str]
) -> dict[str, str]:
    """The container's environment in kubelet order: defaults, envFrom, then env (later wins; `$(VAR)` in
    values sees everything defined before it)."""
    env = defaults.env()
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        if "configMapRef" in src:
            ref, store, kind = src["configMapRef"], sources.configmaps, "configmap"
        else:
            ref, store, kind = src["secretRef"], sources.secrets, "secret"
        data = store.get(ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind} "{ref.get("name")}" not found')
        env.update({prefix + k: v for k, v in data.items()})
    for e in container.get("env") or []:
        name = e["name"]
        vf = e.get("valueFrom")
        if vf is None:
            env[name] = expand(str(e.get("value", "")), env)
            continue
        value: str | None
        if "fieldRef" in vf:
            value = field_ref(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            value = resource_field_ref(_container_named(pod, vf["resourceFieldRef"].get("containerName")) or container,
                                       vf["resourceFieldRef"], node_allocatable)  # fmt: skip
        elif "configMapKeyRef" in vf:
            value = _lookup("configmap", sources.configmaps, vf["configMapKeyRef"])
        elif "secretKeyRef" in vf:
            value = _lookup("secret", sources.secrets, vf["secretKeyRef"])
        else:
            raise ConfigError(f"unsupported valueFrom in env {name}")
        if value is not None:
            env[name] = value
    return env


def _container_named(pod: Obj, name: str | None) -> Obj | None:
    if not name:
        return None
    spec = pod.get("spec") or {}
    return next(
        (c for c in (spec.get("initContainers") or []) + spec["containers"] if c["name"] == name), None
    )


def command_line(container: Obj, env: Mapping[str, str]) -> list[str]:
    """argv from command/args. Without a command there is no image entrypoint to fall back to, so the
    args alone are the command."""
    argv = [expand(str(a), env) for a in (container.get("command") or []) + (container.get("args") or [])]
    if not argv:
        raise ConfigError("container has neither command nor args (images are not pulled on local nodes)")
    return argv


# --- users --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunAs:
    uid: int | None
    gid: int | None
    groups: tuple[int, ...]


def run_as(pod: Obj, container: Obj) -> RunAs:
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    csc = container.get("securityContext") or {}
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup"))
    if gid is None and uid is not None:
        gid = 0  # runtimes use the image's group for the user, which is root's for users unknown to the image
    # Like container runtimes, the primary group is also a supplementary one.
    groups = [g for g in [gid, psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])] if g is not None]
    return RunAs(uid=uid, gid=gid, groups=tuple(dict.fromkeys(int(g) for g in groups)))


# --- mounts ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False
    optional: bool = False  # skipped where the mount point cannot be created (an unprivileged agent)


def plan_mounts(container: Obj, volume_sources: Mapping[str, str]) -> list[Mount]:
    """The container's volumeMounts as bind mounts from the materialised volume dirs (subPath included).
    Sorted so a parent mount comes before mounts inside it."""
    mounts: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        name = vm["name"]
        if name not in volume_sources:
            raise ConfigError(f"volumeMount {name!r} names no volume of the pod")
        source = volume_sources[name]
        sub = vm.get("subPath") or ""
        if sub:
            if sub.startswith("/") or ".." in sub.split("/"):
                raise ConfigError(f"invalid subPath {sub!r}")
            source = f"{source.rstrip('/')}/{sub}"
        mounts.append(Mount(source=source, target=vm["mountPath"], read_only=bool(vm.get("readOnly"))))
    return sorted(mounts, key=lambda m: m.target.rstrip("/").count("/"))


# --- names ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Peer:
    """A pod of the namespace, as far as names go."""

    ip: str
    hostname: str
    subdomain: str


def peer_of(pod: Obj) -> Peer | None:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ip = status.get("podIP")
    if not ip or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    return Peer(
        ip=ip, hostname=spec.get("hostname") or pod["metadata"]["name"], subdomain=spec.get("subdomain") or ""
    )


def hosts_file(
    pod: Obj,
    ip: str,
    peers: Iterable[Peer],
    headless_services: set[str],
    domain: str,
    apiserver_host: str,
) -> str:
    """/etc/hosts of a pod: what cluster DNS would answer for it. `h.sub(.ns(.svc(.domain)))` of every pod
    whose subdomain is a headless Service of the namespace, the short forms its dnsConfig.searches allow,
    the pod's own names, `kubernetes.default...` for the apiserver, and hostAliases."""
    spec = pod.get("spec") or {}
    ns = pod["metadata"]["namespace"]
    searches = [
        f"{ns}.svc.{domain}",
        f"svc.{domain}",
        domain,
        *((spec.get("dnsConfig") or {}).get("searches") or []),
    ]
    lines = ["# Kubernetes-managed hosts file (kubepool local node).", "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]  # fmt: skip
    me = Peer(
        ip=ip, hostname=spec.get("hostname") or pod["metadata"]["name"], subdomain=spec.get("subdomain") or ""
    )
    own = [me.hostname]
    if me.subdomain:
        own.insert(0, f"{me.hostname}.{me.subdomain}.{ns}.svc.{domain}")
    lines.append(f"{ip}\t{' '.join(own)}")
    seen = {me.ip}
    for peer in sorted(peers, key=lambda p: (p.hostname, p.ip)):
        if not peer.subdomain or peer.subdomain not in headless_services or peer.ip in seen:
            continue
        seen.add(peer.ip)
        fqdn = f"{peer.hostname}.{peer.subdomain}.{ns}.svc.{domain}"
        names = [fqdn, f"{peer.hostname}.{peer.subdomain}.{ns}.svc", f"{peer.hostname}.{peer.subdomain}.{ns}",
                 f"{peer.hostname}.{peer.subdomain}"]  # fmt: skip
        names += [fqdn[: -len(s) - 1] for s in searches if fqdn.endswith("." + s)]
        lines.append(f"{peer.ip}\t{' '.join(dict.fromkeys(names))}")
    lines.append(
        f"{apiserver_host}\tkubernetes kubernetes.default kubernetes.default.svc kubernetes.default.svc.{domain}"
    )
    for alias in spec.get("hostAliases") or []:
        lines.append(f"{alias['ip']}\t{' '.join(alias.get('hostnames') or [])}")
    return "\n".join(lines) + "\n"


# --- status ---------------------------------------------------------------------------------------------
@dataclass
class ContainerState:
    """What the agent knows of one container; `to_status` renders the API's ContainerStatus."""

    name: str
    image: str
    restart_count: int = 0
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    ready: bool = False

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def terminated(self) -> Obj | None:
        t: Obj | None = self.state.get("terminated")
        return t

    def to_status(self) -> Obj:
        return {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "containerID": f"kubepool://{self.name}-{self.restart_count}"
            if "waiting" not in self.state
            else None,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
            "ready": self.ready,
            "started": self.running,
        }


def will_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def pod_phase(policy: str, init_failed: bool, containers: list[ContainerState]) -> str:
    """The kubelet's phase rule: Pending until every container started once, terminal when every container
    is terminated and none will restart, Running otherwise."""
    if init_failed:
        return "Failed"
    if any("waiting" in c.state and c.restart_count == 0 and not c.last_state for c in containers):
        return "Pending"
    ended = [c.terminated for c in containers]
    if all(t is not None for t in ended) and not any(
        will_restart(policy, int(t["exitCode"])) for t in ended if t
    ):
        return "Succeeded" if all(t and int(t["exitCode"]) == 0 for t in ended) else "Failed"
    return "Running"


def conditions(
    initialized: bool, containers: list[ContainerState], now: str, previous: list[Obj]
) -> list[Obj]:
    """PodScheduled, Initialized, ContainersReady, Ready; a condition keeps its lastTransitionTime while its
    status does not change."""
    ready = all(c.ready for c in containers)
    wanted = {"PodScheduled": True, "Initialized": initialized, "ContainersReady": ready, "Ready": ready}
    before = {c["type"]: c for c in previous}
    out: list[Obj] = []
    for kind, ok in wanted.items():
        status = "True" if ok else "False"
        old = before.get(kind)
        since = (
            old["lastTransitionTime"]
            if old and old.get("status") == status and old.get("lastTransitionTime")
            else now
        )
        cond: Obj = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
        if not ok and kind in ("ContainersReady", "Ready"):
            cond["reason"] = "ContainersNotReady"
            names = ", ".join(c.name for c in containers if not c.ready)
            cond["message"] = f"containers with unready status: [{names}]"
        elif not ok and kind == "Initialized":
            cond["reason"] = "ContainersNotInitialized"
        out.append(cond)
    return out
