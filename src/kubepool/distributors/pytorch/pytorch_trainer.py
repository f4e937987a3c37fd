"""Snowflake's `snowflake.ml.modeling.distributors.pytorch.pytorch_trainer` path."""

from kubepool.distributors.pytorch import (
    PyTorchDistributor,
    PyTorchDistributorResult,
    PyTorchScalingConfig,
    WorkerResourceConfig,
)

__all__ = ["PyTorchDistributor", "PyTorchDistributorResult", "PyTorchScalingConfig", "WorkerResourceConfig"]
