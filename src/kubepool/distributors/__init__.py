"""Distributed training inside a running kubepool job, with Snowflake's class and method names.

- `kubepool.distributors.pytorch`: PyTorchDistributor, PyTorchScalingConfig, WorkerResourceConfig, get_context
  (Snowflake: `snowflake.ml.modeling.distributors.pytorch`).
- `kubepool.distributors.xgboost`: XGBEstimator, XGBScalingConfig
  (Snowflake: `snowflake.ml.modeling.distributors.xgboost`).

Both run their workers as Ray tasks on the job's Ray cluster; the submodules are imported on demand so
that importing one framework does not import the other.
"""
