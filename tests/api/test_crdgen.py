"""The committed CRDs are generated from the pydantic models and are structural schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool.api import crdgen
from kubepool.api.common import Model

ROOT = Path(__file__).resolve().parents[2]
RENDERED = crdgen.render_all()


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_committed_crds_match_models(name: str) -> None:
    committed = (ROOT / "crds" / name).read_text()
    assert committed == RENDERED[name], f"crds/{name} drifted from src/kubepool/api: run `make crds`"


def _walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}/{i}")


def _schema(name: str) -> dict[str, Any]:
    return yaml.safe_load(RENDERED[name])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_schema_is_structural(name: str) -> None:
    for path, node in _walk(_schema(name)):
        for banned in ("$ref", "anyOf", "oneOf", "title", "uniqueItems", "$defs"):
            assert banned not in node, f"{banned} at {path}"
        assert node.get("additionalProperties") is not False, path
        if "properties" in node and not path.endswith("/properties"):
            assert node.get("type") == "object", f"object without type at {path}"
        if node.get("default", 0) is None:
            pytest.fail(f"null default at {path}")


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_every_field_is_documented(name: str) -> None:
    """`kubectl explain` shows descriptions: every spec field has one."""
    spec = _schema(name)["properties"]["spec"]
    for path, node in _walk(spec):
        if path.endswith("/properties"):
            for field, sub in node.items():
                assert sub.get("description"), f"{name}: spec{path}/{field} has no description"


def test_strings_and_lists_are_bounded() -> None:
    """Unbounded strings or lists make CEL cost estimates fail and let hostile specs through."""
    spec = _schema("kubepool.dev_mljobs.yaml")["properties"]["spec"]
    for path, node in _walk(spec):
        if node.get("type") == "string" and "enum" not in node and "format" not in node:
            assert "maxLength" in node, f"unbounded string at spec{path}"
        if node.get("type") == "array":
            assert "maxItems" in node, f"unbounded list at spec{path}"


def test_cel_rules_attached() -> None:
    spec = _schema("kubepool.dev_mljobs.yaml")["properties"]["spec"]
    messages = [r.get("message") or r["messageExpression"] for r in spec["x-kubernetes-validations"]]
    assert "set exactly one of computePool or instanceGroups" in messages
    entry = spec["properties"]["entrypoint"]
    assert entry["x-kubernetes-validations"][0]["message"] == "set exactly one of file, module or command"
    conditions = _schema("kubepool.dev_mljobs.yaml")["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"


def _rules_model(rule: str) -> type[Model]:
    class Inner(Model):
        x: int = 0
        cel_rules = [{"rule": rule, "message": "m"}]

    return Inner


def test_a_models_rules_are_written_where_its_schema_is() -> None:
    inner = _rules_model("self.x > 0")

    class Outer(Model):
        a: inner  # type: ignore[valid-type]
        b: list[inner] = []  # type: ignore[valid-type]

    schema = crdgen.structural_schema(Outer)
    assert schema["properties"]["a"]["x-kubernetes-validations"] == inner.cel_rules
    assert schema["properties"]["b"]["items"]["x-kubernetes-validations"] == inner.cel_rules
    assert "x-kubernetes-validations" not in schema  # Outer declares none: a base's or a field's never climb up


def test_two_models_of_one_name_are_refused() -> None:
    # pydantic would write one definition for both, and the rules of one onto the other's fields.
    a, b = _rules_model("self.x > 0"), _rules_model("self.x < 9")

    class Outer(Model):
        a: a  # type: ignore[valid-type]
        b: b  # type: ignore[valid-type]

    with pytest.raises(ValueError, match="two models named Inner"):
        crdgen.structural_schema(Outer)

