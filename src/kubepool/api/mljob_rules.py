"""The MLJob spec's cross-field rules, as CEL `x-kubernetes-validations` (MLJobSpec declares them, crdgen writes
them): what `kubectl apply` refuses, naming the field, and what may change after creation."""

from __future__ import annotations

from kubepool.api.common import MAX_INSTANCES
from kubepool.api.podsettings import POD_FIELDS

_GROUP_KEY = "{v}.lowerAscii().replace('_', '-')"
MLJOB_SPEC_RULES = [
    {"rule": "has(self.computePool) != has(self.instanceGroups)", "message": "set exactly one of computePool or instanceGroups"},
    {"rule": "!has(self.instanceGroups) || !has(self.instanceType)", "message": "with instanceGroups, set instanceType per group",
     "fieldPath": ".instanceType"},
    {"rule": "!has(self.instanceGroups) || !has(self.targetInstances)", "message": "targetInstances is the sum of instanceGroups[].instanceCount; do not set it with instanceGroups"},
    {"rule": "!has(self.minInstances) || (has(self.instanceGroups) ? self.minInstances <= self.instanceGroups.map(g, g.instanceCount).sum() : self.minInstances <= (has(self.targetInstances) ? self.targetInstances : 1))",
     "message": "minInstances must not exceed targetInstances"},
    {"rule": "!has(self.instanceGroups) || self.instanceGroups.all(g, self.instanceGroups.exists_one(h, "
             + _GROUP_KEY.format(v="h.name") + " == " + _GROUP_KEY.format(v="g.name") + "))",
     "message": "instanceGroups names must be unique (case and '_'/'-' are ignored)"},
    {"rule": "!has(self.instanceGroups) || self.instanceGroups.map(g, g.instanceCount).sum() <= " + str(MAX_INSTANCES),
     "message": f"instanceGroups[].instanceCount must sum to at most {MAX_INSTANCES}", "fieldPath": ".instanceGroups"},
    {"rule": "!has(self.channels) || self.channels.all(c, self.channels.exists_one(d, d.name.lowerAscii() == c.name.lowerAscii()))",
     "message": "channel names must be unique (case is ignored: each is SM_CHANNEL_<NAME>)", "fieldPath": ".channels"},
    {"rule": "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && self.volumes.exists(v, v.name == m.name))",
     "message": "volumeMounts must name volumes of spec.volumes", "fieldPath": ".volumeMounts"},
    {"rule": "!has(self.instanceGroups) || self.instanceGroups.all(g, !has(g.volumeMounts) || g.volumeMounts.all(m, "
             "(has(g.volumes) && g.volumes.exists(v, v.name == m.name)) || (has(self.volumes) && self.volumes.exists(v, v.name == m.name))))",
     "message": "instanceGroups[].volumeMounts must name volumes of the group or of spec.volumes", "fieldPath": ".instanceGroups"},
    {"rule": "!has(self.distributionInstanceGroups) || size(self.distributionInstanceGroups) == 0 || self.mode == 'sagemaker'",
     "message": "distributionInstanceGroups takes effect only with mode sagemaker", "fieldPath": ".distributionInstanceGroups"},
    {"rule": "!has(self.channels) || self.channels.all(c, has(c.instanceGroups) && size(c.instanceGroups) > 0) || self.channels.all(c, !has(c.instanceGroups) || size(c.instanceGroups) == 0)",
     "message": "if one channel names instanceGroups, every channel must"},
    {"rule": "!has(self.channels) || self.channels.all(c, !has(c.instanceGroups) || c.instanceGroups.all(n, has(self.instanceGroups) && self.instanceGroups.exists(g, g.name == n)))",
     "message": "channels[].instanceGroups must name groups of spec.instanceGroups"},
    {"rule": "!has(self.distributionInstanceGroups) || self.distributionInstanceGroups.all(n, has(self.instanceGroups) && self.instanceGroups.exists(g, g.name == n))",
     "message": "distributionInstanceGroups must name groups of spec.instanceGroups"},
    {"rule": "!has(self.channels) || self.channels.all(c, c.distribution != 'ShardedByS3Key' || has(c.source.s3))",
     "message": "ShardedByS3Key needs an s3 source"},
    {"rule": "!has(self.channels) || !self.channels.exists(c, c.distribution == 'ShardedByS3Key') || !has(self.minInstances) || "
             "self.minInstances == (has(self.instanceGroups) ? self.instanceGroups.map(g, g.instanceCount).sum() "
             ": (has(self.targetInstances) ? self.targetInstances : 1))",
     "message": "a ShardedByS3Key channel needs every instance: minInstances must equal the instance count "
                "(the shards of instances that never start would go unread)", "fieldPath": ".minInstances"},
]
# What may change after creation, as in Job and JobSet: suspend, cancel, the instance counts (scale_cluster,
# `kubectl scale`), minInstances, and the time limits. Anything else would be silently ignored by a job that
# already runs: refused at apply instead, naming the field.
MUTABLE_SPEC = ("suspend", "cancel", "targetInstances", "minInstances", "ttlSecondsAfterFinished", "activeDeadlineSeconds")
IMMUTABLE_SPEC = ("computePool", "instancesTimeoutSeconds", "channels", "image", "entrypoint", "args", "workingDir", "env",
                  "code", "pipRequirements", "pipOptions", "output", "checkpoint", "instanceType", "hyperParameters", "mode", "distributionInstanceGroups", "backend", "ray",
                  "backoffLimit", *POD_FIELDS[1:])
_AFTER = "cannot change after the job is created (delete and re-create the job)"


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Each change a created job refuses: (what must hold between oldSelf and self, the message naming the field).
SPEC_TRANSITIONS: list[tuple[str, str]] = [
    (f"has(self.{f}) == has(oldSelf.{f}) && (!has(self.{f}) || self.{f} == oldSelf.{f})", f"{f} {_AFTER}")
    for f in IMMUTABLE_SPEC
] + [
    ("has(self.instanceGroups) == has(oldSelf.instanceGroups) && (!has(self.instanceGroups) || "
     "self.instanceGroups.map(g, g.name + '/' + g.computePool) == oldSelf.instanceGroups.map(g, g.name + '/' + g.computePool))",
     f"instanceGroups (their names, pools and order; instanceCount may change) {_AFTER}"),
    # Each instance reads the shard of its place among the instances when it starts: another count would
    # leave keys unread or read twice (SageMaker's jobs never change size).
    ("!has(self.channels) || !self.channels.exists(c, c.distribution == 'ShardedByS3Key') || ("
     "(has(self.targetInstances) ? self.targetInstances : 1) == (has(oldSelf.targetInstances) ? oldSelf.targetInstances : 1) && "
     "(!has(self.instanceGroups) || !has(oldSelf.instanceGroups) || "
     "self.instanceGroups.map(g, g.instanceCount) == oldSelf.instanceGroups.map(g, g.instanceCount)))",
     "the instance count of a job with a ShardedByS3Key channel cannot change: each instance's shard of its keys is "
     "fixed when it starts, so a resize would leave keys unread or read twice (delete and re-create the job)"),
    ("!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",
     "cancel cannot be undone: a cancelled job stays CANCELLED (suspend pauses a job instead)"),
] + [
    (f"!has(self.instanceGroups) || !has(oldSelf.instanceGroups) || self.instanceGroups.all(g, oldSelf.instanceGroups.exists(o, "
     f"o.name == g.name && has(o.{f}) == has(g.{f}) && (!has(g.{f}) || o.{f} == g.{f})))",
     f"instanceGroups[].{f} {_AFTER}")
    for f in POD_FIELDS
]
# One rule for all of them, tried only when the spec changed: the API server evaluates a CRD's transition rules on
# every update, status writes included, and each field access on the spec costs it a walk of the spec's whole
# schema (bench/NOTES.md, "The MLJob's transition rules"). The message names the first field that changed.
MLJOB_SPEC_RULES += [{
    "rule": "self == oldSelf || (" + " && ".join(f"({cond})" for cond, _ in SPEC_TRANSITIONS) + ")",
    "messageExpression": "".join(f"!({cond}) ? {_cel_string(msg)} : " for cond, msg in SPEC_TRANSITIONS)
                         + _cel_string("the spec changed in a way a created job cannot follow"),
    "reason": "FieldValueForbidden",
}]
