"""Other charts' conventions the chart accepts: `replicaCount` for `replicas`, `commonLabels` on every object,
a ServiceMonitor's `additionalLabels`, and a `helm test` pod that runs where the operator may run."""

from __future__ import annotations

from typing import Any

import yaml
from chartlib import CHART, KUBE_VERSION, NAMESPACE, RELEASE, by_kind, is_sagemaker_api, run_helm


def _with_tests(helm: str, *args: str) -> list[dict[str, Any]]:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION,
                    "--set", "tests.pool=cpu", *args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_replica_count_is_replicas(render: Any, helm: str) -> None:
    (default,) = by_kind(render(), "Deployment")
    assert default["spec"]["replicas"] == 1 and not by_kind(render(), "PodDisruptionBudget")
    objs = render("--set", "replicaCount=3")
    assert by_kind(objs, "Deployment")[0]["spec"]["replicas"] == 3
    assert by_kind(objs, "PodDisruptionBudget"), "more than one replica gets its PodDisruptionBudget"
    assert by_kind(render("--set", "replicas=2", "--set", "replicaCount=1"), "Deployment")[0]["spec"]["replicas"] == 1
    refused = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, "--set", "replicaCount=2",
                       "--set", "operator.leaderElection=false")
    assert refused.returncode != 0 and "replicas: 2 needs operator.leaderElection" in refused.stderr


def test_common_labels_on_every_object_but_no_selector(helm: str) -> None:
    objs = _with_tests(helm, "--set", "commonLabels.team=ml", "--set", "metrics.serviceMonitor.enabled=true",
                       "--set", "metrics.dashboard.enabled=true", "--set", "replicaCount=2",
                       "--set", "pools[0].name=cpu", "--set", "pools[0].spec.instanceFamily=CPU_X64_S",
                       "--set", "pools[0].spec.maxNodes=2")
    assert {"PodDisruptionBudget", "ComputePool", "ServiceMonitor", "Pod"} <= {o["kind"] for o in objs}
    for obj in objs:
        assert obj["metadata"].get("labels", {}).get("team") == "ml", f"{obj['kind']} {obj['metadata']['name']}"
    for deploy in by_kind(objs, "Deployment"):  # the operator's and the SageMaker API server's
        assert "team" not in deploy["spec"]["selector"]["matchLabels"]  # a Deployment's selector is immutable
        assert deploy["spec"]["template"]["metadata"]["labels"]["team"] == "ml"


def test_service_monitor_additional_labels(render: Any) -> None:
    objs = render("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.a=x",
                  "--set", "metrics.serviceMonitor.additionalLabels.release=prometheus")
    (monitor,) = by_kind(objs, "ServiceMonitor")
    assert (monitor["metadata"]["labels"]["a"], monitor["metadata"]["labels"]["release"]) == ("x", "prometheus")


def test_helm_test_pod_runs_where_the_operator_may(helm: str) -> None:
    placement = ["--set", "nodeSelector.role=system",
                 "--set", "tolerations[0].key=dedicated", "--set", "tolerations[0].operator=Exists",
                 "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                          "nodeSelectorTerms[0].matchExpressions[0].key=zone",
                 "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                          "nodeSelectorTerms[0].matchExpressions[0].operator=Exists"]
    objs = _with_tests(helm, *placement)
    (operator,) = [d for d in by_kind(objs, "Deployment") if not is_sagemaker_api(d)]
    (test_pod,) = [p for p in by_kind(objs, "Pod") if p["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert test_pod["spec"][key] == operator["spec"]["template"]["spec"][key], key
    bare = [p for p in by_kind(_with_tests(helm), "Pod") if p["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    assert not {"nodeSelector", "tolerations", "affinity"} & set(bare[0]["spec"])
