"""The API tests that need the cluster use the CRDs as committed (applied once per session)."""

from __future__ import annotations

from support.operator_fixtures import crds  # noqa: F401 - shared, registered here
