"""The operations, each a thin async function: request dict + the caller's key → answer dict (or AwsError)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.session import get_session
from botocore.validate import ParamValidator

from kubepool.api import ComputePool
from kubepool.kube.errors import Conflict, Forbidden, Invalid, KubeError, NotFound
from kubepool.sagemaker.options import ANNOTATION_TAGS
from kubepool.sagemaker_api import logs, status, translate
from kubepool.sagemaker_api.errors import AwsError, access_denied, in_use, not_found, validation
from kubepool.sagemaker_api.keys import AccessKey
from kubepool.sagemaker_api.kubeaccess import KubeAccess

_JOBS_LABEL = f"{translate.LABEL_SAGEMAKER}=true"
_SORT = {"Name": lambda j: j["TrainingJobName"], "CreationTime": lambda j: j["CreationTime"],
         "Status": lambda j: j["TrainingJobStatus"]}
_SM_MODEL = get_session().get_service_model("sagemaker")
_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")  # SageMaker's TrainingJobName pattern


@dataclass
class Context:
    kube: KubeAccess
    key: AccessKey
    region: str
    data: translate.DataConfig


Handler = Callable[[Context, dict[str, Any]], Awaitable[dict[str, Any]]]


def check_shape(operation: str, req: dict[str, Any]) -> None:
    """The request against botocore's model of the operation (required members, types, lengths): the same
    ValidationException AWS gives before anything is looked at."""
    shape = _SM_MODEL.operation_model(operation).input_shape
    report = ParamValidator().validate(req, shape)
    if report.has_errors():
        raise validation(report.generate_report())


def _kube_error(err: KubeError, name: str) -> AwsError:
    if isinstance(err, NotFound):
        return not_found(f"Requested resource not found: training job {name}")
    if isinstance(err, Conflict):
        return in_use(f"Training job names must be unique within a namespace: {name} exists")
    if isinstance(err, Forbidden):
        return access_denied(str(err))
    if isinstance(err, Invalid):
        return validation(str(err))
    return AwsError("InternalFailure", str(err), status=500)


async def _job(ctx: Context, name: Any) -> dict[str, Any]:
    if not isinstance(name, str) or not _NAME.match(name):
        raise validation(f"TrainingJobName {name!r} must match {_NAME.pattern}")  # it goes into an API path
    try:
        job = await ctx.kube.get_job(ctx.key, name)
    except KubeError as err:
        raise _kube_error(err, name) from None
    if (job["metadata"].get("labels") or {}).get(translate.LABEL_SAGEMAKER) != "true":
        raise not_found(f"Requested resource not found: training job {name}")  # an MLJob made another way
    return job


async def create_training_job(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    check_shape("CreateTrainingJob", req)
    try:
        pools = [ComputePool.model_validate(p) for p in await ctx.kube.pools()]
    except KubeError as err:
        raise AwsError("InternalFailure", f"cannot read the ComputePools: {err}", status=500) from None
    body = translate.to_mljob(req, ctx.key.namespace, ctx.key.service_account, pools, ctx.data)
    try:
        await ctx.kube.create_job(ctx.key, body)
    except KubeError as err:
        raise _kube_error(err, req["TrainingJobName"]) from None
    return {"TrainingJobArn": status.job_arn(ctx.region, ctx.key.namespace, req["TrainingJobName"])}


async def describe_training_job(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    return status.describe(await _job(ctx, req.get("TrainingJobName")), ctx.region)


async def stop_training_job(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    job = await _job(ctx, req.get("TrainingJobName"))
    primary, _ = status.statuses(job)
    if primary in ("Completed", "Failed", "Stopped"):
        raise validation(f"The request was rejected because the training job is in status {primary}.")
    try:
        await ctx.kube.patch_job(ctx.key, job["metadata"]["name"], {"spec": {"cancel": True}})
    except KubeError as err:
        raise _kube_error(err, job["metadata"]["name"]) from None
    return {}


def _time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise validation(f"not a timestamp: {value!r}") from None


async def list_training_jobs(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    size = req.get("MaxResults", 10)
    if not isinstance(size, int) or not 1 <= size <= 100:
        raise validation("MaxResults must be between 1 and 100")
    if req.get("SortBy", "CreationTime") not in _SORT or req.get("SortOrder", "Ascending") not in (
            "Ascending", "Descending"):
        raise validation("SortBy must be Name, CreationTime or Status; SortOrder Ascending or Descending")
    try:
        jobs = await ctx.kube.list_jobs(ctx.key, _JOBS_LABEL)
    except KubeError as err:
        raise _kube_error(err, "*") from None
    rows = [status.summary(j, ctx.region) for j in jobs]
    if req.get("WarmPoolStatusEquals") or req.get("TrainingPlanArnEquals"):
        rows = []  # kubepool's jobs have neither warm pools nor training plans
    bounds = [("CreationTime", "CreationTimeAfter", 1), ("CreationTime", "CreationTimeBefore", -1),
              ("LastModifiedTime", "LastModifiedTimeAfter", 1), ("LastModifiedTime", "LastModifiedTimeBefore", -1)]
    for field, arg, sign in bounds:
        t = _time(req.get(arg))
        if t is not None:
            rows = [r for r in rows if (r[field] - t) * sign > 0]
    if req.get("NameContains"):
        rows = [r for r in rows if req["NameContains"] in r["TrainingJobName"]]
    if req.get("StatusEquals"):
        rows = [r for r in rows if r["TrainingJobStatus"] == req["StatusEquals"]]
    rows.sort(key=_SORT[req.get("SortBy", "CreationTime")], reverse=req.get("SortOrder") == "Descending")
    start = logs.decode_token(req["NextToken"], "j") if req.get("NextToken") else 0
    out: dict[str, Any] = {"TrainingJobSummaries": rows[start:start + size]}
    if start + size < len(rows):
        out["NextToken"] = logs.encode_token("j", start + size)
    return out


async def _tagged_job(ctx: Context, arn: Any) -> dict[str, Any]:
    parts = status.name_of_arn(arn) if isinstance(arn, str) else None
    if parts is None:
        raise validation(f"ResourceArn {arn!r}: a training job's ARN")
    if parts[0] != ctx.key.namespace:
        raise not_found(f"Requested resource not found: {arn}")
    return await _job(ctx, parts[1])


def _tags(job: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = json.loads((job["metadata"].get("annotations") or {}).get(ANNOTATION_TAGS) or "{}")
    return out


async def _set_tags(ctx: Context, job: dict[str, Any], tags: dict[str, str]) -> None:
    patch = {"metadata": {"annotations": {ANNOTATION_TAGS: json.dumps(tags, sort_keys=True) if tags else None}}}
    try:
        await ctx.kube.patch_job(ctx.key, job["metadata"]["name"], patch)
    except KubeError as err:
        raise _kube_error(err, job["metadata"]["name"]) from None


async def add_tags(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    check_shape("AddTags", req)
    job = await _tagged_job(ctx, req["ResourceArn"])
    added = {t["Key"]: t.get("Value", "") for t in req["Tags"]}
    await _set_tags(ctx, job, {**_tags(job), **added})
    return {"Tags": [{"Key": k, "Value": v} for k, v in added.items()]}


async def list_tags(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    check_shape("ListTags", req)
    job = await _tagged_job(ctx, req["ResourceArn"])
    return {"Tags": [{"Key": k, "Value": v} for k, v in sorted(_tags(job).items())]}


async def delete_tags(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    check_shape("DeleteTags", req)
    job = await _tagged_job(ctx, req["ResourceArn"])
    await _set_tags(ctx, job, {k: v for k, v in _tags(job).items() if k not in set(req["TagKeys"])})
    return {}


# -- CloudWatch Logs ---------------------------------------------------------------------------------------
async def _streams(ctx: Context, prefix: str | None) -> list[tuple[logs.Stream, dict[str, Any]]]:
    """The streams under `prefix`: of its job when the prefix names one (`<job>/...`), else of every job."""
    job_name = prefix.partition("/")[0] if prefix and "/" in prefix else None
    try:
        jobs = [await _job(ctx, job_name)] if job_name else await ctx.kube.list_jobs(ctx.key, _JOBS_LABEL)
    except AwsError:
        return []
    except KubeError as err:
        raise _kube_error(err, "*") from None
    return [(s, j) for j in jobs for s in logs.streams_of(j) if not prefix or s.name.startswith(prefix)]


async def describe_log_streams(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    logs.check_group(req.get("logGroupName"))
    if req.get("orderBy", "LogStreamName") != "LogStreamName" and req.get("logStreamNamePrefix"):
        raise logs.invalid_parameter("Cannot order by LastEventTime with a logStreamNamePrefix.")
    found = [s for s, _ in await _streams(ctx, req.get("logStreamNamePrefix"))]
    return logs.describe_streams(found, req.get("logStreamNamePrefix"), bool(req.get("descending")),
                                 req.get("limit"), req.get("nextToken"))


async def _events(ctx: Context, stream: logs.Stream) -> list[dict[str, Any]]:
    try:
        return logs.parse_log(await ctx.kube.pod_log(ctx.key, stream.pod))
    except KubeError as err:
        raise _kube_error(err, stream.job) from None


async def get_log_events(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    logs.check_group(req.get("logGroupName"))
    name = req.get("logStreamName")
    parsed = logs.parse_stream_name(name)
    streams = [s for s, _ in await _streams(ctx, f"{parsed[0]}/")] if parsed else []
    stream = next((s for s in streams if s.name == name), None)
    if stream is None:
        raise logs.resource_not_found(f"The specified log stream does not exist: {name!r}")
    return logs.get_events(await _events(ctx, stream), req)


async def filter_log_events(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    logs.check_group(req.get("logGroupName"))
    names, prefix = req.get("logStreamNames"), req.get("logStreamNamePrefix")
    if names and prefix:
        raise logs.invalid_parameter("logStreamNames and logStreamNamePrefix are mutually exclusive")
    found = [s for s, _ in await _streams(ctx, prefix)]
    if names:
        found = [s for s in found if s.name in set(names)]
    return logs.filter_events({s.name: await _events(ctx, s) for s in found}, req)


SAGEMAKER: dict[str, Handler] = {
    "CreateTrainingJob": create_training_job, "DescribeTrainingJob": describe_training_job,
    "ListTrainingJobs": list_training_jobs, "StopTrainingJob": stop_training_job,
    "AddTags": add_tags, "ListTags": list_tags, "DeleteTags": delete_tags,
}
LOGS: dict[str, Handler] = {
    "DescribeLogStreams": describe_log_streams, "GetLogEvents": get_log_events, "FilterLogEvents": filter_log_events,
}
