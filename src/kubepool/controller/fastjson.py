"""Faster decoding of kopf's watch streams. kopf decodes every watch event with the standard library's json:
in a burst of new jobs that was a fifth of the operator's CPU (bench/README.md, P1 profile), as every pod event
carries the whole pod. orjson decodes the same lines several times faster. `install` puts it where kopf looks
`json` up, and does nothing if a kopf release changed that (tests/operator/unit/test_operator_fastjson.py fails
then, so the loss is noticed)."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(text: str | bytes) -> Any:
    """orjson's decoding; the standard library's for what orjson refuses. (orjson reads integers beyond 64 bits
    as floats; the API server never sends them: it decodes every number into Go's int64 or float64.)"""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


class _Json:
    """The part of the `json` module kopf's API client uses."""

    loads = staticmethod(loads)
    dumps = staticmethod(json.dumps)
    JSONDecodeError = json.JSONDecodeError


def install() -> bool:
    """Make kopf's watch streams decode with `loads`. False (and nothing changed) if kopf no longer decodes them
    with a module-level `json` in kopf._cogs.clients.api."""
    from kopf._cogs.clients import api

    current = getattr(api, "json", None)
    if current is _Json:
        return True
    if current is not json:
        return False
    api.json = _Json  # type: ignore[assignment]
    return True
