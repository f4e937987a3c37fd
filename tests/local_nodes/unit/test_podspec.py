"""Pure pod → process translation: env, `$(VAR)`, command line, users, mounts, /etc/hosts, status."""

from __future__ import annotations

from typing import Any

import pytest

from kubepool.local.agent.podspec import (
    ConfigError,
    ContainerState,
    Defaults,
    EnvSources,
    Peer,
    command_line,
    conditions,
    env_references,
    expand,
    field_ref,
    hosts_file,
    parse_quantity,
    peer_of,
    plan_mounts,
    pod_phase,
    resolve_env,
    resource_field_ref,
    run_as,
)

DEFAULTS = Defaults("/venv/bin:/usr/bin", "/pods/u/home", "algo-1", "127.0.0.1", 16443)
ALLOCATABLE = {"cpu": "4", "memory": "16Gi"}


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"app": "x"},
            "annotations": {"a": "b"},
        },
        "spec": {"nodeName": "cpu-node-1", "containers": [{"name": "main"}], **spec},
        "status": {"podIP": "127.101.0.7", "hostIP": "127.0.1.1"},
    }


def test_quantities() -> None:
    assert parse_quantity("500m") * 1000 == 500
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("2") == 2
    with pytest.raises(ValueError):
        parse_quantity("1Xi")


def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)", env) == "1-two"
    assert expand("$(MISSING)", env) == "$(MISSING)"
    assert expand("$$(A)", env) == "$(A)"


def test_field_refs() -> None:
    p = pod(serviceAccountName="runner")
    assert field_ref(p, "metadata.name") == "p"
    assert field_ref(p, "metadata.labels['app']") == "x"
    assert field_ref(p, "metadata.annotations['a']") == "b"
    assert field_ref(p, "status.podIP") == "127.101.0.7"
    assert field_ref(p, "spec.serviceAccountName") == "runner"
    with pytest.raises(ConfigError):
        field_ref(p, "spec.nope")


def test_resource_field_ref_divisor_and_node_default() -> None:
    c = {"name": "main", "resources": {"limits": {"memory": "1Gi"}, "requests": {"cpu": "250m"}}}
    assert resource_field_ref(c, {"resource": "limits.memory", "divisor": "1Mi"}, ALLOCATABLE) == "1024"
    assert resource_field_ref(c, {"resource": "requests.cpu"}, ALLOCATABLE) == "1"  # rounded up
    assert resource_field_ref(c, {"resource": "requests.cpu", "divisor": "1m"}, ALLOCATABLE) == "250"
    assert resource_field_ref(c, {"resource": "limits.cpu"}, ALLOCATABLE) == "4"  # no limit: node allocatable


def test_resolve_env_order_sources_and_expansion() -> None:
    container = {
        "name": "main",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "s"}}],
        "env": [
            {"name": "PLAIN", "value": "v"},
            {"name": "REF", "value": "$(PLAIN)/$(CM_k)"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}}},
        ],
    }
    sources = EnvSources(configmaps={"cm": {"k": "cv"}}, secrets={"s": {"pw": "hunter2"}})
    env = resolve_env(pod(), container, sources, DEFAULTS, ALLOCATABLE)
    assert env["CM_k"] == "cv" and env["pw"] == "hunter2" and env["PW"] == "hunter2"
    assert env["REF"] == "v/cv"
    assert env["IP"] == "127.101.0.7"
    assert "OPT" not in env
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and env["KUBERNETES_SERVICE_PORT"] == "16443"
    assert env["HOSTNAME"] == "algo-1" and env["PATH"].startswith("/venv/bin")
    assert env_references([container]) == ({"cm", "gone"}, {"s"})


@pytest.mark.parametrize(
    "ref",
    [
        {"configMapKeyRef": {"name": "missing", "key": "k"}},
        {"configMapKeyRef": {"name": "cm", "key": "missing"}},
        {"secretKeyRef": {"name": "missing", "key": "k"}},
    ],
)
def test_missing_references_are_config_errors(ref: dict[str, Any]) -> None:
    container = {"name": "main", "env": [{"name": "X", "valueFrom": ref}]}
    with pytest.raises(ConfigError):
        resolve_env(pod(), container, EnvSources(configmaps={"cm": {"k": "v"}}), DEFAULTS, ALLOCATABLE)


def test_command_line_expands_and_requires_a_command() -> None:
    assert command_line({"command": ["python", "-c"], "args": ["print('$(X)')"]}, {"X": "hi"}) == [
        "python",
        "-c",
        "print('hi')",
    ]
    with pytest.raises(ConfigError):
        command_line({"name": "main"}, {})


def test_run_as_container_overrides_pod() -> None:
    p = pod(securityContext={"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3000]})
    assert run_as(p, {}) == run_as(p, {"securityContext": {}})
    user = run_as(p, {"securityContext": {"runAsUser": 1001, "runAsGroup": 1002}})
    assert (user.uid, user.gid, user.groups) == (1001, 1002, (1002, 2000, 3000))
    assert run_as(pod(), {}).uid is None


def test_plan_mounts_sorted_with_sub_path() -> None:
    container = {
        "volumeMounts": [
            {"name": "data", "mountPath": "/opt/ml/input/data", "readOnly": True},
            {"name": "base", "mountPath": "/opt/ml"},
            {"name": "cfg", "mountPath": "/etc/kubepool/contract.json", "subPath": "contract.json"},
        ]
    }
    mounts = plan_mounts(container, {"data": "/v/data", "base": "/v/base", "cfg": "/v/cfg"})
    assert [m.target for m in mounts] == ["/opt/ml", "/etc/kubepool/contract.json", "/opt/ml/input/data"]
    assert mounts[1].source == "/v/cfg/contract.json" and mounts[2].read_only
    with pytest.raises(ConfigError):
        plan_mounts({"volumeMounts": [{"name": "x", "mountPath": "/x"}]}, {})
    with pytest.raises(ConfigError):
        plan_mounts({"volumeMounts": [{"name": "b", "mountPath": "/x", "subPath": "../etc"}]}, {"b": "/v/b"})


def test_hosts_file_names_peers_of_headless_services_and_search_domains() -> None:
    me = pod(
        hostname="algo-1",
        subdomain="job-svc",
        dnsConfig={"searches": ["job-svc.ns.svc.cluster.local"]},
        hostAliases=[{"ip": "10.0.0.9", "hostnames": ["s3.local"]}],
    )
    peers = [
        Peer("127.102.0.3", "algo-2", "job-svc"),
        Peer("127.102.0.4", "other", "not-headless"),
        Peer("127.101.0.7", "algo-1", "job-svc"),
    ]
    text = hosts_file(me, "127.101.0.7", peers, {"job-svc"}, "cluster.local", "127.0.0.1")
    lines = {line.split("\t")[0]: line.split("\t")[1].split() for line in text.splitlines() if "\t" in line}
    assert lines["127.102.0.3"] == [
        "algo-2.job-svc.ns.svc.cluster.local",
        "algo-2.job-svc.ns.svc",
        "algo-2.job-svc.ns",
        "algo-2.job-svc",
        "algo-2",
    ]
    assert "127.102.0.4" not in lines
    assert lines["127.101.0.7"] == ["algo-1.job-svc.ns.svc.cluster.local", "algo-1"]
    assert lines["10.0.0.9"] == ["s3.local"]
    assert "kubernetes.default.svc.cluster.local" in lines["127.0.0.1"]


def test_peer_of_skips_pods_without_ip_or_terminating() -> None:
    assert peer_of(pod(hostname="h", subdomain="s")) == Peer("127.101.0.7", "h", "s")
    no_ip = pod()
    no_ip["status"] = {}
    assert peer_of(no_ip) is None
    gone = pod()
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert peer_of(gone) is None


def _terminated(code: int) -> ContainerState:
    return ContainerState("c", "img", state={"terminated": {"exitCode": code}})


def test_pod_phase() -> None:
    waiting = ContainerState("c", "img")
    running = ContainerState("c", "img", state={"running": {}})
    assert pod_phase("Never", False, [waiting]) == "Pending"
    assert pod_phase("Never", False, [running, _terminated(0)]) == "Running"
    assert pod_phase("Never", False, [_terminated(0), _terminated(0)]) == "Succeeded"
    assert pod_phase("Never", False, [_terminated(0), _terminated(3)]) == "Failed"
    assert pod_phase("OnFailure", False, [_terminated(3)]) == "Running"  # about to restart
    assert pod_phase("OnFailure", False, [_terminated(0)]) == "Succeeded"
    assert pod_phase("Always", False, [_terminated(0)]) == "Running"
    assert pod_phase("Never", True, [waiting]) == "Failed"


def test_conditions_keep_transition_times() -> None:
    running = ContainerState("c", "img", state={"running": {}}, ready=True)
    first = conditions(True, [running], "t1", [])
    assert {c["type"]: c["status"] for c in first} == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    again = conditions(True, [running], "t2", first)
    assert all(c["lastTransitionTime"] == "t1" for c in again)
    running.ready = False
    changed = {c["type"]: c for c in conditions(True, [running], "t3", again)}
    assert (
        changed["Ready"]["lastTransitionTime"] == "t3" and changed["Ready"]["reason"] == "ContainersNotReady"
    )
    assert changed["PodScheduled"]["lastTransitionTime"] == "t1"
