"""Snowflake's `snowflake.ml.modeling.distributors.pytorch.scaling_config` path."""

from kubepool.distributors.pytorch import PyTorchScalingConfig, WorkerResourceConfig

__all__ = ["PyTorchScalingConfig", "WorkerResourceConfig"]
