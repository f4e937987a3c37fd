"""Snowflake's `snowflake.ml.runtime_cluster.cluster_manager` path: the cluster's resources, as
`kubepool.runtime_cluster` has them."""

from kubepool.runtime_cluster import get_available_cpu, get_available_gpu, get_nodes, get_num_cpus_per_node

__all__ = ["get_available_cpu", "get_available_gpu", "get_nodes", "get_num_cpus_per_node"]
