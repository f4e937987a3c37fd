"""The API tests that need the cluster use the CRDs as committed (applied once per session)."""

from __future__ import annotations
