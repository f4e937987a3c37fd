"""kopf's watch streams decode with orjson (kubepool.controller.fastjson): installed where kopf looks it up,
and decoding exactly what the standard library decodes, for every number the API server can send (int64,
float64)."""

from __future__ import annotations

import json

from kopf._cogs.clients import api

from kubepool.controller import fastjson

EVENT = {"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {"name": "ü-0", "resourceVersion": "12"},
                                         "spec": {"priority": -10, "x": 1.5, "ok": True, "none": None}}}


def test_installs_where_kopf_decodes_watch_events() -> None:
    assert fastjson.install() is True
    assert api.json.loads is fastjson.loads  # what kopf's stream() calls for each line
    assert fastjson.install() is True  # idempotent


def test_decodes_like_the_standard_library() -> None:
    line = json.dumps(EVENT)
    assert fastjson.loads(line) == json.loads(line) == EVENT
    edges = json.dumps({"max": 2**63 - 1, "min": -(2**63), "f": 1.7976931348623157e308, "tiny": 5e-324})
    assert fastjson.loads(edges) == json.loads(edges)
    assert fastjson.loads(b'{"a": [1, 2]}') == {"a": [1, 2]}
