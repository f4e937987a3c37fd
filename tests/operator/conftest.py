"""Fixtures of the operator's cluster tests: the CRDs applied once, the operator (see support.operator_cluster),
and ComputePools created and removed per test (support.operator_fixtures)."""

from __future__ import annotations

from support.operator_fixtures import apply, compute_pool, crds, operator  # noqa: F401 - shared, registered here
