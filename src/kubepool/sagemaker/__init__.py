"""SageMaker's training names on kubepool: `Estimator(...).fit(inputs)` with `InstanceGroup`s and
`TrainingInput`s creates a (heterogeneous) MLJob in SageMaker script mode.

    from kubepool.sagemaker import Estimator, InstanceGroup, TrainingInput

    est = Estimator("train.py", instance_groups=[InstanceGroup("cpu", "cpu-pool", 2),
                                                 InstanceGroup("gpu", "ml.g5.xlarge", 1)],
                    distribution={"torch_distributed": {"enabled": True}, "instance_groups": ["gpu"]})
    est.fit({"train": TrainingInput("s3://bucket/train", instance_groups=["gpu"]),
             "raw": TrainingInput("pvc://data/raw", instance_groups=["cpu"])})
"""

from kubepool.sagemaker.estimator import Estimator, InstanceGroup, UnexpectedStatusException
from kubepool.sagemaker.inputs import TrainingInput

__all__ = ["Estimator", "InstanceGroup", "TrainingInput", "UnexpectedStatusException"]
