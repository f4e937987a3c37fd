"""Fixtures of the operator's cluster tests: the CRDs applied once, the operator (see support.operator_cluster),
and ComputePools created and removed per test (support.operator_fixtures, registered by tests/conftest.py)."""

from __future__ import annotations
