"""Where a job's data lives, as URIs the SDKs take (SageMaker's s3_data, output_path, checkpoint_s3_uri;
Snowflake's stages): `s3://bucket/prefix`, `pvc://<claim>[/<sub/path>]`, `configmap://<name>`."""

from __future__ import annotations

from kubepool.api import ChannelSource
from kubepool.api.mljob import CheckpointLocation, ConfigMapSource, OutputLocation, PvcSource, S3Source


def output_location(uri: str, endpoint_url: str | None = None, credentials_secret: str | None = None) -> OutputLocation:
    """SageMaker's output_path as an MLJob's spec.output: s3://bucket/prefix or pvc://claim[/path]."""
    src = source_of(uri, endpoint_url, credentials_secret)
    if src.config_map is not None:
        raise ValueError(f"output_path {uri!r}: outputs go to s3://bucket/prefix or pvc://claim[/path], not a ConfigMap")
    return OutputLocation(s3=src.s3, persistent_volume_claim=src.persistent_volume_claim)


def checkpoint_location(uri: str, endpoint_url: str | None = None, credentials_secret: str | None = None) -> CheckpointLocation:
    """SageMaker's checkpoint_s3_uri as an MLJob's spec.checkpoint: s3://bucket/prefix or pvc://claim[/path]."""
    out = output_location(uri, endpoint_url, credentials_secret)
    return CheckpointLocation(s3=out.s3, persistent_volume_claim=out.persistent_volume_claim)


def source_of(uri: str, endpoint_url: str | None, credentials_secret: str | None) -> ChannelSource:
    scheme, sep, rest = uri.partition("://")
    if sep and scheme == "s3":
        return ChannelSource(s3=S3Source(uri=uri, endpoint_url=endpoint_url, credentials_secret=credentials_secret))
    if sep and scheme == "pvc" and rest:
        claim, _, sub = rest.partition("/")
        return ChannelSource(persistent_volume_claim=PvcSource(claim_name=claim, sub_path=sub or None))
    if sep and scheme == "configmap" and rest:
        return ChannelSource(config_map=ConfigMapSource(name=rest))
    raise ValueError(f"unsupported channel source {uri!r}: use s3://bucket/prefix, pvc://claim[/path] or "
                     "configmap://name")
