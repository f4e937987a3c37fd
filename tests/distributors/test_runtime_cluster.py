"""runtime_cluster without Ray or Kubernetes: node records, the MLJob patch, the wait and the rollback."""

from __future__ import annotations

from typing import Any

import pytest

from kubepool.runtime_cluster import (
    ScaleOptions,
    current_size,
    nodes_from_ray,
    scale,
    scale_patch,
    wait_for_size,
)

GROUPED = {
    "instanceGroups": [
        {"name": "head_group", "computePool": "cpu", "instanceCount": 2},
        {"name": "gpus", "computePool": "gpu", "instanceCount": 3},
    ],
    "minInstances": 4,
}


def test_node_records_are_snowflakes_and_skip_dead_nodes() -> None:
    ray_nodes = [
        {"Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 4.0, "GPU": 1.0}},
        {"Alive": False, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 4.0}},
        {"Alive": True, "NodeManagerAddress": "10.0.0.3", "Resources": {"CPU": 2.0}},
    ]
    assert nodes_from_ray(ray_nodes) == [
        {"name": "10.0.0.1", "cpus": 4, "gpus": 1},
        {"name": "10.0.0.3", "cpus": 2, "gpus": 0},
    ]


@pytest.mark.parametrize(
    "spec,size,ops",
    [
        ({"targetInstances": 2}, 4, [{"op": "replace", "path": "/spec/targetInstances", "value": 4}]),
        ({}, 3, [{"op": "add", "path": "/spec/targetInstances", "value": 3}]),
        (
            {"targetInstances": 4, "minInstances": 3},
            2,
            [
                {"op": "replace", "path": "/spec/targetInstances", "value": 2},
                {"op": "replace", "path": "/spec/minInstances", "value": 2},
            ],
        ),
        (
            GROUPED,
            7,
            [
                {"op": "test", "path": "/spec/instanceGroups/0/name", "value": "head_group"},
                {"op": "replace", "path": "/spec/instanceGroups/0/instanceCount", "value": 4},
            ],
        ),
        (
            GROUPED,
            4,
            [
                {"op": "test", "path": "/spec/instanceGroups/0/name", "value": "head_group"},
                {"op": "replace", "path": "/spec/instanceGroups/0/instanceCount", "value": 1},
            ],
        ),
    ],
    ids=["grow-single", "unset-target", "shrink-below-min", "grow-head-group", "shrink-head-group"],
)
def test_scale_patch(spec: dict[str, Any], size: int, ops: list[dict[str, Any]]) -> None:
    assert scale_patch(spec, "head_group", size) == ops


def test_sizes_a_job_cannot_take() -> None:
    with pytest.raises(ValueError, match="head"):
        scale_patch(GROUPED, "head_group", 3)  # the other group already holds 3
    with pytest.raises(ValueError, match=">= 1"):
        scale_patch({"targetInstances": 2}, "x", 0)
    with pytest.raises(ValueError, match="not in"):
        scale_patch(GROUPED, "missing", 6)
    with pytest.raises(ValueError, match="unknown"):
        ScaleOptions.parse({"rollback_after": 5})


def test_current_size() -> None:
    assert current_size(GROUPED) == 5 and current_size({"targetInstances": 3}) == 3 and current_size({}) == 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_wait_for_size_grows_shrinks_and_times_out() -> None:
    clock = FakeClock()
    counts = iter([1, 2, 3])
    assert wait_for_size(lambda: next(counts), target=3, grow=True, timeout=60, clock=clock, sleep=clock.sleep)
    assert wait_for_size(lambda: 2, target=2, grow=False, timeout=60, clock=clock, sleep=clock.sleep)
    clock.now = 0
    assert not wait_for_size(lambda: 1, target=3, grow=True, timeout=10, clock=clock, sleep=clock.sleep)
    assert clock.now >= 10


class FakeScaler:
    name, namespace = "job", "ns"

    def __init__(self, spec: dict[str, Any]) -> None:
        self._spec = spec
        self.patches: list[list[dict[str, Any]]] = []

    def spec(self) -> dict[str, Any]:
        return dict(self._spec)

    def patch(self, ops: list[dict[str, Any]]) -> None:
        self.patches.append(ops)
        for op in ops:
            if op["op"] != "test":
                self._spec[op["path"].rsplit("/", 1)[1]] = op["value"]


def _scale(scaler: FakeScaler, size: int, nodes: list[int], **kw: Any) -> bool:
    clock, it = FakeClock(), iter(nodes)
    last = [nodes[0]]

    def count() -> int:
        last[0] = next(it, last[0])
        return last[0]

    return scale(scaler, "g", size, count_nodes=count, clock=clock, sleep=clock.sleep, **kw)  # type: ignore[arg-type]


def test_scale_waits_for_nodes_to_join() -> None:
    s = FakeScaler({"targetInstances": 1})
    assert _scale(s, 3, [1, 2, 3], is_async=False, options=ScaleOptions())
    assert s.patches == [[{"op": "replace", "path": "/spec/targetInstances", "value": 3}]]


def test_scale_returns_at_the_minimum_size() -> None:
    s = FakeScaler({"targetInstances": 1})
    assert _scale(s, 4, [1, 2], is_async=False, options=ScaleOptions(block_until_min_cluster_size=2))


def test_scale_rolls_back_on_timeout() -> None:
    s = FakeScaler({"targetInstances": 2})
    assert not _scale(s, 5, [2], is_async=False, options=ScaleOptions(rollback_after_seconds=30))
    assert [p[-1]["value"] for p in s.patches] == [5, 2] and s.spec()["targetInstances"] == 2


def test_scale_async_and_no_op() -> None:
    s = FakeScaler({"targetInstances": 2})
    assert _scale(s, 4, [2], is_async=True, options=ScaleOptions(rollback_after_seconds=1))
    assert _scale(s, 4, [2], is_async=False, options=ScaleOptions(rollback_after_seconds=1))  # already 4
    assert len(s.patches) == 1


def test_job_scaler_uses_the_mljob_resource_and_json_patch() -> None:
    from lightkube.types import PatchType

    from kubepool.runtime_cluster import JobScaler

    calls: list[tuple[str, Any, Any, dict[str, Any]]] = []

    class Client:
        def get(self, res: Any, name: str, **kw: Any) -> dict[str, Any]:
            calls.append(("get", res, name, kw))
            return {"spec": {"targetInstances": 2}}

        def patch(self, res: Any, name: str, ops: Any, **kw: Any) -> None:
            calls.append(("patch", res, ops, kw))

    scaler = JobScaler("job-a", "team", client=Client())
    assert scaler.spec() == {"targetInstances": 2}
    scaler.patch([{"op": "replace", "path": "/spec/targetInstances", "value": 3}])
    res = calls[0][1]
    assert (res._api_info.resource.group, res._api_info.resource.version, res._api_info.plural) == (
        "kubepool.dev",
        "v1alpha1",
        "mljobs",
    )
    assert calls[0][3] == {"namespace": "team"}
    assert calls[1][3] == {"namespace": "team", "patch_type": PatchType.JSON}


# Snowflake's package -> kubepool's, for the import paths of the product's docs (#38 item 5).
PATHS = {"snowflake.ml.modeling.distributors": "kubepool.distributors", "snowflake.ml.runtime_cluster":
         "kubepool.runtime_cluster", "snowflake.ml.jobs": "kubepool.jobs"}


def _kubepool_path(module: str) -> str:
    for theirs, ours in PATHS.items():
        if module == theirs or module.startswith(theirs + "."):
            return ours + module[len(theirs):]
    raise AssertionError(f"no kubepool equivalent for {module}")


def test_every_import_path_of_the_seeds_works() -> None:
    """Each `from snowflake.ml... import names` of the product docs (/work/shared/seeds) and each documented
    `snowflake.ml.<package>.<module>.<Class or function>` imports from kubepool's equivalent module."""
    import importlib
    import re
    from pathlib import Path

    seeds = Path("/work/shared/seeds")
    text = "\n".join(p.read_text() for p in sorted(seeds.glob("*.txt"))) if seeds.is_dir() else ""
    if not text:
        pytest.skip("the product docs (/work/shared/seeds) are not on this machine")
    wanted: dict[str, set[str]] = {}
    for module, names in re.findall(r"from (snowflake\.ml[\w.]*) import \(?([\w\s,]+?)\)?\s*$", text, re.M):
        wanted.setdefault(module, set()).update(n.strip() for n in names.split(",") if n.strip())
    for module, name in re.findall(r"(?:class|Functions\s+)?\b(snowflake\.ml\.[\w.]+)\.([A-Za-z_]\w*)\(", text):
        if module.count(".") >= 3:  # snowflake.ml.<package>.<module>: a documented module path
            wanted.setdefault(module, set()).add(name)
    assert "snowflake.ml.runtime_cluster.cluster_manager" in wanted
    missing = []
    for module, names in sorted(wanted.items()):
        try:
            mod = importlib.import_module(_kubepool_path(module))
        except ImportError as e:
            missing.append(f"{module}: {e}")
            continue
        missing += [f"{module}.{n}" for n in sorted(names) if not hasattr(mod, n)]
    assert not missing, f"not importable from kubepool: {missing}"
