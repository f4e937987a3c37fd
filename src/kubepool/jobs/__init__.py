"""kubepool's jobs SDK, with the names of Snowflake's `snowflake.ml.jobs`: submit a file, a directory or a
function to a compute pool, then follow the job through its `MLJob` handle.

    from kubepool.jobs import submit_file, remote, get_job, list_jobs

    job = submit_file("train.py", "my-pool", target_instances=3)
    job.wait()
    print(job.get_logs(instance_id=1))
"""

from kubepool.jobs.bundles import (
    MLCodeBundle,
    delete_code_bundle,
    register_code_bundle,
    register_job_from_code_bundle,
    submit_from_stage,
)
from kubepool.jobs.decorators import remote
from kubepool.jobs.definitions import ArgProtocol, MLJobDefinition
from kubepool.jobs.distributed import DistributedJobError, DistributedResult
from kubepool.jobs.job import JOB_STATUS, JobNotFound, MLJob
from kubepool.jobs.manager import (
    JobSummary,
    delete_job,
    get_job,
    list_jobs,
    submit_directory,
    submit_file,
)
from kubepool.jobs.payload import PayloadTooLarge
from kubepool.jobs.results import RemoteError
from kubepool.jobs.submission import PoolNotFound, connect

__all__ = [
    "JOB_STATUS", "ArgProtocol", "DistributedJobError", "MLCodeBundle", "MLJobDefinition", "delete_code_bundle",
    "register_code_bundle", "register_job_from_code_bundle", "submit_from_stage", "DistributedResult", "JobNotFound", "JobSummary", "MLJob", "PayloadTooLarge", "PoolNotFound", "RemoteError", "connect", "delete_job",
    "get_job", "list_jobs", "remote", "submit_directory", "submit_file",
]
