"""Snowflake ML Jobs compatibility: the log banners and the env a payload sees (research notes B.4).

Head mode exports what Snowflake's launcher reads (`MLRS_MIN_INSTANCES`, `SNOWFLAKE_JOBS_COUNT`) plus the
driver's way to the cluster (`RAY_ADDRESS`, and `NODE_IP_ADDRESS`/`DASHBOARD_PORT` for `JobSubmissionClient`).
Per-instance (`parallel`) mode exports the static topology Snowflake documents for direct execution.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubepool import naming
from kubepool.contract import LOG_END_MSG, LOG_START_MSG, InstanceIdentity, JobContract

__all__ = ["LOG_END_MSG", "LOG_START_MSG", "head_env", "parallel_env"]


def head_env(contract: JobContract, me: InstanceIdentity, pod_ip: str) -> dict[str, str]:
    return {
        "RAY_ADDRESS": f"{pod_ip}:{contract.ray.gcs_port}",  # ray.init(address="auto") reads it first
        "NODE_IP_ADDRESS": pod_ip,
        "DASHBOARD_PORT": str(contract.ray.dashboard_port),
        "MLRS_MIN_INSTANCES": str(contract.min_instances),
        "SNOWFLAKE_JOBS_COUNT": str(contract.target_instances),
        "SNOWFLAKE_JOB_INDEX": str(me.instance_id),
    }


def parallel_env(me: InstanceIdentity, node_ips: Sequence[str]) -> dict[str, str]:
    """`node_ips` in instance order; instance 0 is the rendezvous host."""
    return {
        "SNOWFLAKE_JOB_INDEX": str(me.instance_id),
        "SNOWFLAKE_JOBS_COUNT": str(len(node_ips)),
        "MLRS_HEAD_IP": node_ips[0],
        "MLRS_NODE_IPS": ",".join(node_ips),
        "MLRS_RDZV_PORT": str(naming.TORCH_MASTER_PORT),
    }
