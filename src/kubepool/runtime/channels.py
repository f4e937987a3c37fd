"""Channel data: puts each input channel's objects under `<base>/input/data/<channel>` for this instance.

FullyReplicated channels get everything; ShardedByS3Key channels get this instance's share
(`contract.shard` over the instances of the groups the channel is assigned to). Sources are an S3 prefix
(boto3, endpoint from the channel or `AWS_ENDPOINT_URL`) or a mounted directory (files are symlinked).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from kubepool.contract import Channel, Distribution, InstanceIdentity, JobContract, shard

ENV_S3_ENDPOINT = "AWS_ENDPOINT_URL"


def shard_position(contract: JobContract, channel: Channel, me: InstanceIdentity) -> tuple[int, int]:
    """(number of shards, this instance's index) for a channel: one shard per instance of its groups."""
    members = [i.instance_id for i in contract.instances if not channel.instance_groups or i.group in channel.instance_groups]
    return len(members), members.index(me.instance_id)


def select(keys: list[str], contract: JobContract, channel: Channel, me: InstanceIdentity) -> list[str]:
    if channel.distribution is Distribution.FULLY_REPLICATED:
        return sorted(keys)
    n, index = shard_position(contract, channel, me)
    return shard(keys, n, index)


def parse_s3_uri(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an s3:// URI: {uri}")
    return parsed.netloc, parsed.path.lstrip("/")


def s3_client(endpoint_url: str | None, env: Mapping[str, str]) -> Any:
    """An S3 client for a channel, the output or the checkpoints: their own endpoint, else AWS_ENDPOINT_URL (MinIO
    and friends), else AWS's; credentials from the environment (a credentials Secret's keys)."""
    import boto3  # the runtime image has it; the operator never imports this module

    return boto3.client("s3", endpoint_url=endpoint_url or env.get(ENV_S3_ENDPOINT) or None)


def list_s3(client: Any, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents", []) if not o["Key"].endswith("/"))
    return keys


def relative_name(key: str, prefix: str) -> str:
    """Where an object lands inside the channel dir: its path below the prefix (its name if the URI is the object).
    A key that would land outside the channel dir (a `..` part: `data/../../code/train.py`) is refused: whoever
    can write to the bucket must not be able to overwrite the job's code or another channel's data."""
    rel = key[len(prefix) :].lstrip("/") if key.startswith(prefix) else key
    rel = rel or PurePosixPath(key).name
    if not rel or ".." in PurePosixPath(rel).parts:
        raise ValueError(f"object key {key!r} would be written outside the channel directory; rename or remove it")
    return rel


def fetch_s3(channel: Channel, dest: Path, contract: JobContract, me: InstanceIdentity, env: Mapping[str, str]) -> list[str]:
    bucket, prefix = parse_s3_uri(channel.source.s3_uri or "")
    client = s3_client(channel.source.s3_endpoint_url, env)
    chosen = select(list_s3(client, bucket, prefix), contract, channel, me)
    targets = [(key, dest / relative_name(key, prefix)) for key in chosen]  # every key checked before any fetch
    for key, target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(target))
    return chosen


def link_local(channel: Channel, dest: Path, contract: JobContract, me: InstanceIdentity) -> list[str]:
    root = Path(channel.source.local_path or "")
    if not root.is_dir():
        raise FileNotFoundError(f"channel {channel.name}: local path {root} is not a directory")
    rels = [p.relative_to(root) for p in root.rglob("*") if p.is_file()]
    # A ConfigMap/Secret mount also holds its atomic-writer dirs (`..data`, `..<timestamp>`): not data.
    keys = [r.as_posix() for r in rels if not any(part.startswith("..") for part in r.parts)]
    chosen = select(keys, contract, channel, me)
    for key in chosen:
        target = dest / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to((root / key).resolve())
    return chosen


def materialize(
    contract: JobContract, me: InstanceIdentity, data_dir: Path, env: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """Fill every channel of this instance's group; returns the keys placed per channel."""
    env = os.environ if env is None else env
    placed: dict[str, list[str]] = {}
    for channel in contract.channels_for(me.group):
        dest = data_dir / channel.name
        dest.mkdir(parents=True, exist_ok=True)
        if channel.source.s3_uri:
            placed[channel.name] = fetch_s3(channel, dest, contract, me, env)
        elif channel.source.local_path:
            placed[channel.name] = link_local(channel, dest, contract, me)
        else:
            raise ValueError(f"channel {channel.name} has no source")
    return placed
