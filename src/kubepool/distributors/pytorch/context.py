"""Snowflake's `snowflake.ml.modeling.distributors.pytorch.context` path: the worker's context."""

from kubepool.distributors.context import Context, get_context

__all__ = ["Context", "get_context"]
