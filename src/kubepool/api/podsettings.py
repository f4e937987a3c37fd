"""What a job sets on its instance pods beyond the runtime contract: env (literal or from Secrets, ConfigMaps and
the pod's fields), envFrom, volumes and mounts, the ServiceAccount, labels, annotations, affinity, tolerations and
priority class. Set on the job (every instance) and on an instance group (its instances); the group's settings
merge over the job's as documented on each field. Kubernetes' own types come from the API server's schemas
(k8stypes). What would break the operator's own wiring is refused at apply by the rules below."""

from __future__ import annotations

from typing import Any

from pydantic import Field, JsonValue

from kubepool.api.common import LONG_STR, QUALIFIED_NAME_PATTERN, SHORT_STR, Model
from kubepool.api.k8stypes import k8s
from kubepool.contract import OPERATOR_ENV, OPERATOR_MOUNT_DIRS, OPERATOR_VOLUME_PREFIXES, OPERATOR_VOLUMES

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MAX_VOLUMES = 32
# Label keys the operator (and KubeRay, for the kuberay backend) finds its pods by.
RESERVED_LABEL_PREFIXES = ("kubepool.dev/", "ray.io/")
RESERVED_LABELS = ("app.kubernetes.io/managed-by",)
RESERVED_ANNOTATION_PREFIXES = ("kubepool.dev/",)
# Pod annotations that still loosen a container's confinement (AppArmor's is copied into the pod's security
# context by the API server): the operator's restricted security context is the pods' whole say.
CONFINEMENT_ANNOTATION_PREFIXES = ("container.apparmor.security.beta.kubernetes.io/", "seccomp.security.alpha.kubernetes.io/")


def _key_rules(what: str, prefixes: tuple[str, ...], exact: tuple[str, ...] = (),
               confinement: tuple[str, ...] = ()) -> list[JsonValue]:
    taken = " || ".join([f"k.startsWith('{p}')" for p in prefixes] + [f"k == '{e}'" for e in exact])
    rules: list[JsonValue] = [
        {"rule": "self.all(k, size(k) <= 317 && k.matches(" + repr(QUALIFIED_NAME_PATTERN) + "))",
         "message": f"{what} keys must be label keys ([prefix/]name)"},
        {"rule": f"!self.exists(k, {taken})",
         "message": f"{what} must not set the operator's keys (" + ", ".join([p + "..." for p in prefixes] + list(exact)) + ")"},
    ]
    if confinement:
        loosen = " || ".join(f"k.startsWith('{p}')" for p in confinement)
        rules.append({"rule": f"!self.exists(k, {loosen})", "message": f"{what} must not set AppArmor or seccomp "
                      "profiles (" + ", ".join(p + "..." for p in confinement) + "): the operator confines the pods"})
    return rules


_OURS = "v.name in " + repr(list(OPERATOR_VOLUMES)) + "".join(f" || v.name.startsWith('{p}')" for p in OPERATOR_VOLUME_PREFIXES)
VOLUME_RULES: list[JsonValue] = [
    {"rule": "self.all(v, self.exists_one(w, w.name == v.name))", "message": "volumes names must be unique"},
    # The operator creates the pods, so a hostPath here would give any MLJob author the node's files.
    {"rule": "!self.exists(v, has(v.hostPath))", "message": "volumes must not be hostPath: it reaches the node's files"},
    {"rule": f"!self.exists(v, {_OURS})",
     "message": "volumes must not use the operator's volume names (" + ", ".join([*OPERATOR_VOLUMES, *(p + "*" for p in OPERATOR_VOLUME_PREFIXES)]) + ")"},
]
_UNDER = " || ".join(f"m.mountPath == '{d}' || m.mountPath.startsWith('{d}/')" for d in OPERATOR_MOUNT_DIRS)
MOUNT_RULES: list[JsonValue] = [
    {"rule": "self.all(m, self.exists_one(n, n.mountPath == m.mountPath))", "message": "volumeMounts mountPaths must be unique"},
    {"rule": f"!self.exists(m, {_UNDER})",
     "message": "volumeMounts must not mount at or under the operator's directories (" + ", ".join(OPERATOR_MOUNT_DIRS) + ")"},
]
ENV_RULES: list[JsonValue] = [
    {"rule": "!self.exists(e, e.name in " + repr(list(OPERATOR_ENV)) + ")",
     "message": "env must not set a variable the operator sets (" + ", ".join(OPERATOR_ENV) + ")"},
    {"rule": "self.all(e, self.exists_one(f, f.name == e.name))", "message": "env names must be unique"},
]


class EnvVar(Model):
    """An environment variable of the instances: a literal value, or one taken from a Secret, a ConfigMap or the pod."""

    name: str = Field(pattern=ENV_NAME_PATTERN, max_length=SHORT_STR, description="Variable name.")
    value: str = Field("", max_length=32768, description="Literal value (never interpreted by a shell).")
    value_from: dict[str, Any] | None = k8s("EnvVarSource", description="The value from a Secret's or ConfigMap's key "
                                            "(secretKeyRef, configMapKeyRef), a field of the pod (fieldRef) or its "
                                            "resources (resourceFieldRef), as in a pod; excludes value.")

    cel_rules = [
        {"rule": "!has(self.valueFrom) || !has(self.value) || self.value == ''", "message": "set value or valueFrom, not both",
         "fieldPath": ".valueFrom"},
    ]


class PodSettings(Model):
    """Pod settings of the job's instances (on MLJobSpec) or of one group's (on an instance group, merged over the
    job's: see each field)."""

    env: list[EnvVar] = Field(default_factory=list, max_length=128, json_schema_extra={"x-kubernetes-validations": ENV_RULES},
                              description="Environment variables. A group's are added to the job's; a group's "
                                          "variable replaces the job's of the same name.")
    env_from: list[dict[str, Any]] = k8s("EnvFromSource", many=True, max_items=16, description=(
        "Variables from every key of a Secret or ConfigMap (secretRef, configMapRef, optional prefix), as in a pod. "
        "A group's come after the job's (a key in both: the group's wins); env wins over both."))
    volumes: list[dict[str, Any]] = Field(
        default_factory=list, max_length=MAX_VOLUMES, description=(
            "Volumes of the pods (a Kubernetes volume: configMap, secret, persistentVolumeClaim, emptyDir, ...; never "
            "hostPath, and the chart's admission policy allows only its allowedVolumeTypes). "
            "A group's are added to the job's; a group's volume replaces the job's of the same name. Names must "
            "not be the operator's own."),
        json_schema_extra={"items": {"x-kubepool-k8s-type": "Volume"}, "x-kubernetes-validations": VOLUME_RULES})
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list, max_length=MAX_VOLUMES, description=(
            "Where the runtime container mounts volumes. Each names a volume of the same level (a group's may also "
            "name the job's). A group's are added to the job's; a group's mount replaces the job's at the same "
            "mountPath. Never at or under the operator's directories (/opt/ml, /opt/kubepool, /etc/kubepool, "
            "/tmp, /dev/shm): use channels for data under /opt/ml/input/data."),
        json_schema_extra={"items": {"x-kubepool-k8s-type": "VolumeMount"}, "x-kubernetes-validations": MOUNT_RULES})
    service_account_name: str | None = Field(
        None, pattern=SUBDOMAIN_PATTERN, max_length=253, description=(
            "ServiceAccount the pods run as (the SageMaker SDK's role), with its token mounted, instead of the "
            "operator's runtime account; it must exist (else the job stays PENDING, reason ApiRefused, saying so). "
            "In-job scale_cluster needs it to get and patch the job. A group's replaces the job's."))
    pod_labels: dict[str, str] = Field(default_factory=dict, description=(
        "Labels of the pods (kubepool.dev/, ray.io/ and app.kubernetes.io/managed-by are the operator's). "
        "Merged key by key; a group's value wins."), json_schema_extra={
            "maxProperties": 32, "additionalProperties": {"type": "string", "maxLength": 63,
                                                          "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"},
            "x-kubernetes-validations": _key_rules("podLabels", RESERVED_LABEL_PREFIXES, RESERVED_LABELS)})
    pod_annotations: dict[str, str] = Field(default_factory=dict, description=(
        "Annotations of the pods (kubepool.dev/ is the operator's). Merged key by key; a group's value wins."),
        json_schema_extra={"maxProperties": 32, "additionalProperties": {"type": "string", "maxLength": LONG_STR},
                           "x-kubernetes-validations": _key_rules("podAnnotations", RESERVED_ANNOTATION_PREFIXES,
                                                                         confinement=CONFINEMENT_ANNOTATION_PREFIXES)})
    affinity: dict[str, Any] | None = k8s("Affinity", description=(
        "Node and pod affinity of the pods, as in a pod. The operator's one-instance-per-node anti-affinity and "
        "the pool's nodeSelector always apply too (its podAntiAffinity terms are added to the operator's). A "
        "group's nodeAffinity, podAffinity and podAntiAffinity each replace the job's."))
    tolerations: list[dict[str, Any]] = k8s("Toleration", many=True, description=(
        "Tolerations of the pods, as in a pod, added to the pool's. A group's are added to the job's."))
    priority_class_name: str | None = Field(None, pattern=SUBDOMAIN_PATTERN, max_length=253, description=(
        "PriorityClass of the pods (it must exist). A group's replaces the job's."))


POD_FIELDS = ("env", "envFrom", "volumes", "volumeMounts", "serviceAccountName", "podLabels", "podAnnotations",
              "affinity", "tolerations", "priorityClassName")
