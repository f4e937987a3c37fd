"""`TrainingInput` (SageMaker's `sagemaker.inputs.TrainingInput`): one input channel of a training job.

`s3_data` is where the channel's files come from:

* `s3://bucket/prefix` — an S3 (or S3-compatible, with `endpoint_url`) prefix, downloaded by the runtime;
* `pvc://<claim>[/<sub/path>]` — a directory on a PersistentVolumeClaim in the job's namespace;
* `configmap://<name>` — the keys of a ConfigMap in the job's namespace, as files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kubepool.api import Channel, ChannelSource
from kubepool.contract import Distribution, InputMode
from kubepool.jobs.locations import source_of
from kubepool.sagemaker.options import INPUT_MODES

_INPUT_MODES = {None, *INPUT_MODES}
# TrainingInput arguments of SageMaker's with no meaning on kubepool: refused when set, never dropped.
REFUSED_INPUT: dict[str, str] = {
    "compression": "compressed records are Pipe mode's, which kubepool does not offer (File mode gets the files as "
                   "they are)",
    "record_wrapping": "RecordIO wrapping is Pipe mode's, which kubepool does not offer",
    "attribute_names": "augmented manifest files are not supported; use an S3Prefix",
    "target_attribute_name": "augmented manifest files are not supported; use an S3Prefix",
    "shuffle_config": "shuffling is Pipe mode's, which kubepool does not offer",
    "hub_access_config": "SageMaker JumpStart hub models are AWS's",
    "model_access_config": "SageMaker JumpStart model access (EULA acceptance) is AWS's",
}


@dataclass
class TrainingInput:
    """One input channel.

    Args:
        s3_data: Source of the channel (see the module docstring for the accepted forms).
        distribution: FullyReplicated (every instance gets all files) or ShardedByS3Key (each instance a
            disjoint share of the objects; S3 only).
        instance_groups: Groups that receive the channel (heterogeneous jobs); default all. If one channel
            names groups, every channel must.
        content_type: MIME type recorded in inputdataconfig.json.
        s3_data_type: Only `S3Prefix` is supported.
        input_mode: `File` (default) or `FastFile`; `Pipe` is not supported.
        endpoint_url: S3-compatible endpoint (kubepool extension).
        credentials_secret: Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (kubepool extension), labelled
            kubepool.dev/credentials=true.
        compression, record_wrapping, attribute_names, target_attribute_name, shuffle_config, hub_access_config,
            model_access_config: SageMaker's; refused when set (REFUSED_INPUT says why).

    Raises:
        ValueError: An unsupported option or source form.
    """

    s3_data: str
    distribution: str = "FullyReplicated"
    instance_groups: Sequence[str] | None = None
    content_type: str | None = None
    s3_data_type: str = "S3Prefix"
    input_mode: str | None = None
    endpoint_url: str | None = None
    credentials_secret: str | None = None
    compression: str | None = None
    record_wrapping: str | None = None
    attribute_names: Sequence[str] | None = None
    target_attribute_name: str | None = None
    shuffle_config: object = None
    hub_access_config: object = None
    model_access_config: object = None
    _source: ChannelSource = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for key, why in REFUSED_INPUT.items():
            value = getattr(self, key)
            if value is not None:
                raise ValueError(f"{key}={value!r} is not supported: {why}")
        if self.s3_data_type != "S3Prefix":
            raise ValueError(f"s3_data_type {self.s3_data_type!r} is not supported; use 'S3Prefix'")
        if self.input_mode not in _INPUT_MODES:
            raise ValueError(f"input_mode {self.input_mode!r} is not supported; use 'File' or 'FastFile'")
        if self.distribution not in {d.value for d in Distribution}:
            raise ValueError(f"distribution must be 'FullyReplicated' or 'ShardedByS3Key', not {self.distribution!r}")
        self._source = source_of(self.s3_data, self.endpoint_url, self.credentials_secret)

    def to_channel(self, name: str, default_mode: str | None = None) -> Channel:
        """The MLJob channel `name` fed by this input; `default_mode` (the estimator's input_mode) when it names
        none."""
        return Channel(
            name=name, source=self._source, distribution=Distribution(self.distribution),
            instance_groups=list(self.instance_groups) if self.instance_groups else None,
            content_type=self.content_type, input_mode=InputMode(self.input_mode or default_mode or "File"),
        )
