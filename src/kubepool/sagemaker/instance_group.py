"""`kubepool.sagemaker.instance_group.InstanceGroup`, where the SageMaker Python SDK v2 has
`sagemaker.instance_group.InstanceGroup`."""

from kubepool.sagemaker.estimator import InstanceGroup

__all__ = ["InstanceGroup"]
