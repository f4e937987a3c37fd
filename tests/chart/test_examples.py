"""examples/*.yaml, offline: each object validates against its CRD schema and parses into the API models,
every ConfigMap a job references is in the same file, the entrypoint is one of its keys, and the payload
code compiles. (The CEL rules need an API server: test_chart_install dry-runs the examples there.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from chartlib import EXAMPLES, REPO

from kubepool.api import ComputePool, MLJob

JOB_FILES = sorted(p for p in EXAMPLES.glob("*-job.yaml"))
CRD_SCHEMAS = {
    crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for crd in (yaml.safe_load(p.read_text()) for p in sorted((REPO / "crds").glob("*.yaml")))
}


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_every_example_is_here() -> None:
    assert {p.name for p in EXAMPLES.glob("*.yaml")} == {
        "computepools.yaml", "xgboost-job.yaml", "pytorch-ddp-job.yaml", "sagemaker-hetero-job.yaml", "ray-tasks-job.yaml",
    }


@pytest.mark.parametrize("path", [EXAMPLES / "computepools.yaml", *JOB_FILES], ids=lambda p: p.name)
def test_objects_match_the_crd_schema_and_models(path: Path) -> None:
    for obj in load(path):
        if obj["kind"] in CRD_SCHEMAS:
            jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
            model = {"MLJob": MLJob, "ComputePool": ComputePool}[obj["kind"]].model_validate(obj)
            # Nothing the models do not know (a misspelt field would be pruned silently by the API server).
            assert model.wire()["spec"].keys() >= obj["spec"].keys()
        else:
            assert obj["kind"] == "ConfigMap", f"{path.name}: unexpected {obj['kind']}"


def test_pools() -> None:
    pools = {p["metadata"]["name"]: ComputePool.model_validate(p).spec for p in load(EXAMPLES / "computepools.yaml")}
    assert pools["cpu-pool"].instance_family == "CPU_X64_S" and pools["cpu-pool"].max_nodes == 3
    assert pools["cpu-pool"].node_selector == {"kubepool.dev/node-pool": "cpu"}
    assert pools["gpu-pool"].instance_family == "GPU_NV_S" and pools["gpu-pool"].max_nodes == 2
    assert pools["gpu-pool"].node_selector == {"kubepool.dev/node-pool": "gpu"}
    assert any(t.key == "nvidia.com/gpu" for t in pools["gpu-pool"].tolerations)


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.name)
def test_job_references_resolve(path: Path) -> None:
    objs = load(path)
    config_maps = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "ConfigMap"}
    pools = {p["metadata"]["name"] for p in load(EXAMPLES / "computepools.yaml")}
    [job] = [MLJob.model_validate(o) for o in objs if o["kind"] == "MLJob"]
    spec = job.spec
    assert len(job.metadata["name"]) <= 40
    assert spec.code and spec.code.config_map in config_maps, f"{path.name}: code ConfigMap not in the file"
    code = config_maps[spec.code.config_map]
    assert spec.entrypoint.file in code, f"{path.name}: entrypoint {spec.entrypoint.file} is not a key of the ConfigMap"
    for channel in spec.channels or []:
        if channel.source.config_map:
            assert channel.source.config_map.name in config_maps
    used = {spec.compute_pool} if spec.compute_pool else {g.compute_pool for g in spec.instance_groups or []}
    assert used <= pools
    for name, source in code.items():
        if name.endswith(".py"):
            compile(source, f"{path.name}:{name}", "exec")


def test_the_shapes_each_example_shows() -> None:
    jobs = {p.stem: next(MLJob.model_validate(o) for o in load(p) if o["kind"] == "MLJob").spec for p in JOB_FILES}
    assert jobs["xgboost-job"].target_instances == 3
    assert "XGBEstimator" in _code(EXAMPLES / "xgboost-job.yaml")
    assert (jobs["pytorch-ddp-job"].target_instances, jobs["pytorch-ddp-job"].min_instances) == (3, 2)
    assert "PyTorchDistributor" in _code(EXAMPLES / "pytorch-ddp-job.yaml")
    hetero = jobs["sagemaker-hetero-job"]
    assert hetero.mode == "sagemaker"
    assert [(g.name, g.compute_pool) for g in hetero.instance_groups or []] == [("data_group", "cpu-pool"), ("dnn_group", "gpu-pool")]
    assert {c.name: c.instance_groups for c in hetero.channels or []} == {"train": ["data_group"], "config": ["dnn_group"]}
    assert jobs["ray-tasks-job"].target_instances == 3 and "@ray.remote" in _code(EXAMPLES / "ray-tasks-job.yaml")


def _code(path: Path) -> str:
    return "".join(v for o in load(path) if o["kind"] == "ConfigMap" for v in o["data"].values())
