"""CloudWatch Logs' answers from the instances' pod logs (pure): the log group SageMaker writes training logs to,
one stream per host named `<job>/algo-N-<job's creation, epoch seconds>`, events from the kubelet's timestamped
log lines, and position tokens as the SageMaker SDK's tailer and `aws logs tail` use them."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubepool.sagemaker_api.errors import AwsError

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
MAX_EVENTS = 10000  # GetLogEvents' and FilterLogEvents' page size when `limit` is not given (CloudWatch's)


def resource_not_found(message: str) -> AwsError:
    return AwsError("ResourceNotFoundException", message)


def invalid_parameter(message: str) -> AwsError:
    return AwsError("InvalidParameterException", message)


@dataclass(frozen=True)
class Stream:
    name: str
    job: str
    host: str
    pod: str
    created_ms: int


def check_group(group: Any) -> None:
    if group != LOG_GROUP:
        raise resource_not_found(f"The specified log group does not exist: {group!r} (only {LOG_GROUP})")


def _ms(iso: str | None) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000) if iso else 0


def streams_of(job: dict[str, Any]) -> list[Stream]:
    """The job's streams: one per instance that has a pod, in host order."""
    meta = job["metadata"]
    created = _ms(meta.get("creationTimestamp"))
    out = [Stream(f"{meta['name']}/{i['host']}-{created // 1000}", meta["name"], i["host"], i["pod"], created)
           for i in (job.get("status") or {}).get("instances") or [] if i.get("pod") and i.get("host")]
    return sorted(out, key=lambda s: s.name)


def parse_stream_name(name: Any) -> tuple[str, str] | None:
    """(job, host) of a stream name `<job>/algo-N-<ts>`."""
    if not isinstance(name, str) or "/" not in name:
        return None
    job, _, rest = name.partition("/")
    host, _, ts = rest.rpartition("-")
    return (job, host) if job and host.startswith("algo-") and ts.isdigit() else None


def describe_streams(streams: Sequence[Stream], prefix: str | None, descending: bool, limit: int | None,
                     token: str | None) -> dict[str, Any]:
    """DescribeLogStreams over `streams` (ordered by name)."""
    chosen = sorted((s for s in streams if not prefix or s.name.startswith(prefix)), key=lambda s: s.name,
                    reverse=descending)
    start = decode_token(token, "n") if token else 0
    size = _limit(limit, 50)
    page = chosen[start:start + size]
    out: dict[str, Any] = {"logStreams": [{"logStreamName": s.name, "creationTime": s.created_ms,
                                           "arn": f"arn:aws:logs:::log-group:{LOG_GROUP}:log-stream:{s.name}",
                                           "storedBytes": 0} for s in page]}
    if start + size < len(chosen):
        out["nextToken"] = encode_token("n", start + size)
    return out


def parse_log(text: str) -> list[dict[str, Any]]:
    """Events of a kubelet log read with timestamps=true (`<RFC3339Nano> <line>` per line)."""
    events = []
    for line in text.splitlines():
        stamp, _, message = line.partition(" ")
        try:
            when = datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00" if "." in stamp else
                                          stamp.replace("Z", "+00:00"))
        except ValueError:
            continue
        ms = int(when.timestamp() * 1000)
        events.append({"timestamp": ms, "message": message, "ingestionTime": ms})
    return events


def encode_token(kind: str, index: int) -> str:
    return f"{kind}/{index:020d}"


def decode_token(token: Any, kind: str) -> int:
    if not isinstance(token, str) or not token.startswith(kind + "/") or not token[2:].isdigit():
        raise invalid_parameter(f"The specified nextToken is invalid: {token!r}")
    return int(token[2:])


def _limit(limit: Any, default: int) -> int:
    if limit is None:
        return default
    if not isinstance(limit, int) or limit < 1:
        raise invalid_parameter(f"limit must be a positive integer, not {limit!r}")
    return min(limit, default)


def _in_window(events: list[dict[str, Any]], start: Any, end: Any) -> list[dict[str, Any]]:
    return [e for e in events if (start is None or e["timestamp"] >= start) and (end is None or e["timestamp"] < end)]


def get_events(events: list[dict[str, Any]], req: dict[str, Any]) -> dict[str, Any]:
    """GetLogEvents: the window's events from a forward (f/N) or backward (b/N) token, else from the head
    (startFromHead) or the tail. At the end the forward token stays as it is, as CloudWatch's does: the SDK's
    tailer reads until a page comes back empty."""
    chosen = _in_window(events, req.get("startTime"), req.get("endTime"))
    size = _limit(req.get("limit"), MAX_EVENTS)
    token = req.get("nextToken")
    if token and str(token).startswith("b/"):
        stop = min(decode_token(token, "b"), len(chosen))
        start = max(0, stop - size)
    elif token:
        start = min(decode_token(token, "f"), len(chosen))
        stop = min(len(chosen), start + size)
    elif req.get("startFromHead"):
        start, stop = 0, min(len(chosen), size)
    else:
        stop = len(chosen)
        start = max(0, stop - size)
    return {"events": chosen[start:stop], "nextForwardToken": encode_token("f", stop),
            "nextBackwardToken": encode_token("b", start)}


def pattern_terms(pattern: str | None) -> list[str]:
    """CloudWatch's plain filter pattern: terms and quoted phrases, every one of which must appear. Its other
    forms (JSON `{...}`, space-delimited `[...]`, `?` alternatives, `-` exclusions) are refused."""
    if not pattern:
        return []
    try:
        terms = shlex.split(pattern)
    except ValueError:
        raise invalid_parameter(f"filterPattern {pattern!r}: unbalanced quotes") from None
    if pattern.strip()[:1] in ("{", "[") or any(t[:1] in ("?", "-") for t in terms):
        raise invalid_parameter("filterPattern: only terms and quoted phrases are supported here")
    return terms


def filter_events(per_stream: dict[str, list[dict[str, Any]]], req: dict[str, Any]) -> dict[str, Any]:
    """FilterLogEvents over the given streams' events, interleaved by time; `filterPattern` as CloudWatch's
    plain terms (every term, or every quoted phrase, must appear); JSON and space-delimited patterns refused."""
    terms = pattern_terms(req.get("filterPattern"))
    merged = sorted(((e["timestamp"], name, i, e) for name, evs in per_stream.items()
                     for i, e in enumerate(_in_window(evs, req.get("startTime"), req.get("endTime")))),
                    key=lambda t: (t[0], t[1], t[2]))
    hits = [{"logStreamName": name, "timestamp": e["timestamp"], "message": e["message"],
             "ingestionTime": e["ingestionTime"], "eventId": f"{name}:{i}"}
            for _, name, i, e in merged if all(t in e["message"] for t in terms)]
    start = decode_token(req["nextToken"], "p") if req.get("nextToken") else 0
    size = _limit(req.get("limit"), MAX_EVENTS)
    out: dict[str, Any] = {"events": hits[start:start + size],
                           "searchedLogStreams": [{"logStreamName": n, "searchedCompletely": True} for n in per_stream]}
    if start + size < len(hits):
        out["nextToken"] = encode_token("p", start + size)
    return out
