"""Types shared by both kinds: metav1.Condition, tolerations, quantities. Pure pydantic, no client."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Structural-schema limits: every string and list is bounded so CEL cost estimates pass and hostile specs
# ("huge strings", "huge counts") are refused by the API server itself.
NAME_MAX = 63
SHORT_STR = 256
LONG_STR = 4096
MAX_INSTANCES = 1000

# No n (nano) or u (micro) suffix: no instance is sized in them, and the operator's quantity arithmetic
# (builders.common.parse_quantity) would fail on every pass of the pool's jobs. An exponent has at most two
# digits: a larger one names no size a node has, and would overflow that arithmetic.
QUANTITY_PATTERN = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,2}|[mkMGTPE]|[KMGTPE]i)?$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# A label or taint key: an optional DNS-subdomain prefix and '/', then a name (Kubernetes' qualified name).
QUALIFIED_NAME_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                          r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN, max_length=64)]


CelRule = dict[str, str]


class Model(BaseModel):
    """Base of every API model: camelCase on the wire, snake_case in Python, unknown fields ignored
    (the API server prunes them anyway, so the operator never chokes on a newer CRD)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    # Cross-field rules of this model (not of its subclasses), as CEL `x-kubernetes-validations`: the API server
    # evaluates them on every write, so `kubectl apply` refuses what they refuse. crdgen writes them (`make crds`).
    cel_rules: ClassVar[list[CelRule]] = []

    @classmethod
    def own_cel_rules(cls) -> list[CelRule]:
        """The rules this class declares itself: a subclass validates its own fields, not its base's rules."""
        rules: list[CelRule] = cls.__dict__.get("cel_rules", [])
        return rules

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def merge_patch(self) -> dict[str, Any]:
        """A JSON merge patch that makes an object `self` whatever the API server holds: every field `self`
        lacks is removed (what was last written may be older than the writer's own view)."""
        doc = self.wire()
        for name, f in type(self).model_fields.items():
            doc.setdefault(f.alias or name, None)
        return doc


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(Model):
    """A Kubernetes-style condition (metav1.Condition), so `kubectl wait --for=condition=X` works."""

    type: str = Field(max_length=NAME_MAX, description="Condition type, e.g. Admitted, InstancesReady, Complete, Failed.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field("", max_length=SHORT_STR, description="CamelCase machine-readable reason.")
    message: str = Field("", max_length=LONG_STR, description="Human-readable details.")
    last_transition_time: datetime | None = Field(None, description="When the status last changed.")
    observed_generation: int | None = Field(None, ge=0, description="The spec generation the condition was computed from.")


class Toleration(Model):
    """A pod toleration, copied onto every instance pod of the pool."""

    key: str | None = Field(None, max_length=SHORT_STR, pattern=QUALIFIED_NAME_PATTERN.replace("^", "^(", 1)[:-1] + ")?$",
                            description="Taint key to tolerate; empty with Exists tolerates all.")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal (default Equal).")
    value: str | None = Field(None, max_length=NAME_MAX, pattern=LABEL_VALUE_PATTERN, description="Taint value for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(None, description="Taint effect; empty matches all.")
    toleration_seconds: int | None = Field(None, description="For NoExecute: how long the pod stays bound after the taint appears.")

    # What the API server refuses in a pod's tolerations, refused at the ComputePool already (else every instance
    # pod of the pool would be refused at creation, long after the pool was accepted).
    cel_rules = [
        {"rule": "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')", "message": "a toleration without key needs operator Exists",
         "fieldPath": ".key"},
        {"rule": "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
         "message": "a toleration with operator Exists takes no value", "fieldPath": ".value"},
        {"rule": "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
         "message": "tolerationSeconds needs effect NoExecute", "fieldPath": ".tolerationSeconds"},
    ]
