"""kubepool: multi-instance ML jobs on Kubernetes compute pools (Snowflake ML jobs, SageMaker heterogeneous clusters)."""

__version__ = "0.1.0"
