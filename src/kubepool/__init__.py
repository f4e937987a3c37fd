"""kubepool: multi-instance ML jobs on Kubernetes compute pools (Snowflake ML jobs, SageMaker heterogeneous clusters)."""

from importlib import metadata as _metadata

# The one version is pyproject's; the installed package's metadata carries it (tests/release checks the rest).
__version__ = _metadata.version("kubepool")
