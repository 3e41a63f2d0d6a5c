"""GPUSharePool, gpushare.io/v1alpha1: the contract users write and the operator reports.

The CRD in ``crds/`` is generated from these models (``gpushare.api.crd``); a test fails when they
drift apart. Field names are camelCase on the wire (aliases) and snake_case in Python.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gpushare import constants as c

PERCENT_RE = re.compile(r"^([1-9][0-9]?|100)%$")

PoolMode = Literal["cgpu", "share", "core_mem"]
NodePhase = Literal["Ready", "Pending", "Restarting", "Held", "Conflict", "Failed", "Skipped", "Degraded"]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )

    def dump(self) -> dict[str, Any]:
        """The object as Kubernetes JSON (camelCase, no None values)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


#: Bound on matchLabels / matchExpressions entries (keeps the CRD's CEL rules cheap to evaluate).
MAX_SELECTOR_TERMS = 32


class LabelSelectorRequirement(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0)"
                    " : (!has(self.values) || size(self.values) == 0)",
                    "message": "In and NotIn need at least one value; Exists and DoesNotExist take none",
                }
            ]
        }
    )
    key: str = Field(min_length=1, max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(_Model):
    """A standard Kubernetes label selector (matchLabels AND matchExpressions)."""

    match_labels: dict[str, str] = Field(default_factory=dict, max_length=MAX_SELECTOR_TERMS)
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=MAX_SELECTOR_TERMS
    )

    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: dict[str, str] | None) -> bool:
        """True when ``labels`` satisfy every term. An empty selector matches everything."""
        labels = labels or {}
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and (not present or labels[req.key] not in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True

    def to_query(self) -> str:
        """The selector in the ``labelSelector=`` query syntax of the Kubernetes API."""
        terms = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for req in self.match_expressions:
            if req.operator == "In":
                terms.append(f"{req.key} in ({','.join(req.values)})")
            elif req.operator == "NotIn":
                terms.append(f"{req.key} notin ({','.join(req.values)})")
            elif req.operator == "Exists":
                terms.append(req.key)
            else:
                terms.append(f"!{req.key}")
        return ",".join(terms)


def _default_plugin_selector() -> LabelSelector:
    return LabelSelector(match_labels=dict(c.DEFAULT_PLUGIN_LABELS))


class DevicePlugin(_Model):
    """Where the gpushare device plugin runs and how it is restarted after a label change."""

    namespace: str = Field(default=c.DEFAULT_PLUGIN_NAMESPACE, min_length=1, max_length=63)
    pod_selector: LabelSelector = Field(
        default_factory=_default_plugin_selector,
        json_schema_extra={"default": {"matchLabels": dict(c.DEFAULT_PLUGIN_LABELS)}},
    )
    restart: Literal["Rolling", "Never"] = "Rolling"
    ready_timeout_seconds: int = Field(default=300, ge=10, le=3600)


class Rollout(_Model):
    """How a change reaches the nodes of a pool."""

    max_unavailable: int | str = Field(
        default=1,
        json_schema_extra={
            "x-kubernetes-int-or-string": True,
            "x-kubernetes-validations": [
                {
                    "rule": "type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",
                    "message": "maxUnavailable must be an integer >= 1 or a percentage from 1% to 100%",
                }
            ],
        },
    )
    mode_switch: Literal["Wait", "Cordon", "Evict", "Force"] = "Wait"

    @field_validator("max_unavailable")
    @classmethod
    def _check_max_unavailable(cls, v: int | str) -> int | str:
        if isinstance(v, bool):
            raise ValueError("must be an integer >= 1 or a percentage such as '25%'")
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"{v} is below 1; at least one node must be able to change at a time")
            return v
        if not PERCENT_RE.match(v):
            raise ValueError(f"{v!r} is not an integer >= 1 or a percentage from '1%' to '100%'")
        return v

    def max_unavailable_for(self, total: int) -> int:
        """How many nodes of ``total`` may restart at once (always at least 1)."""
        if isinstance(self.max_unavailable, int):
            return max(1, self.max_unavailable)
        pct = int(self.max_unavailable[:-1])
        return max(1, math.ceil(total * pct / 100))


class Admission(_Model):
    mode: Literal["Enforce", "Warn", "Off"] = "Enforce"


_OBJ_DEFAULT: dict[str, Any] = {"default": {}}
#: The managed label keys as a CEL list literal, for the CRD's selector rule.
_MANAGED_CEL = "[" + ", ".join(f"'{key}'" for key in c.MANAGED_LABELS) + "]"


class GPUSharePoolSpec(_Model):
    node_selector: LabelSelector = Field(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
                    "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
                    "message": "nodeSelector must not be empty: an empty selector would take over every node",
                },
                {
                    "rule": "(!has(self.matchLabels) || "
                    f"!self.matchLabels.exists(k, k in {_MANAGED_CEL})) && "
                    "(!has(self.matchExpressions) || "
                    f"self.matchExpressions.all(e, !(e.key in {_MANAGED_CEL})))",
                    "message": f"nodeSelector must not use labels gpushare writes itself "
                    f"({', '.join(c.MANAGED_LABELS)}): select nodes by a label gpushare does not manage, "
                    "such as alibabacloud.com/nodepool-id",
                },
            ]
        }
    )
    memory_isolation: bool = True
    compute_allocation: bool = False
    placement: Literal["binpack", "spread"] = "binpack"
    device_plugin: DevicePlugin = Field(default_factory=DevicePlugin, json_schema_extra=_OBJ_DEFAULT)
    rollout: Rollout = Field(default_factory=Rollout, json_schema_extra=_OBJ_DEFAULT)
    admission: Admission = Field(default_factory=Admission, json_schema_extra=_OBJ_DEFAULT)
    cleanup: Literal["Restore", "Retain"] = "Restore"

    @model_validator(mode="after")
    def _check(self) -> GPUSharePoolSpec:
        if self.node_selector.is_empty():
            raise ValueError("nodeSelector must not be empty: an empty selector would take over every node")
        sel = self.node_selector
        managed = sorted(
            ({*sel.match_labels} | {req.key for req in sel.match_expressions}) & set(c.MANAGED_LABELS)
        )
        if managed:
            raise ValueError(
                f"nodeSelector must not use labels gpushare writes itself ({', '.join(managed)}): "
                "applying the pool would change which nodes it selects; select nodes by a label "
                "gpushare does not manage, such as alibabacloud.com/nodepool-id"
            )
        if self.compute_allocation and not self.memory_isolation:
            raise ValueError(
                "computeAllocation: true requires memoryIsolation: true "
                "(compute isolation, ack.node.gpu.schedule=core_mem, only exists with cGPU memory isolation)"
            )
        return self

    @property
    def mode(self) -> PoolMode:
        """The ``ack.node.gpu.schedule`` value this pool puts on its nodes."""
        if self.compute_allocation:
            return "core_mem"
        return "cgpu" if self.memory_isolation else "share"


class Condition(_Model):
    """metav1.Condition."""

    type: str = Field(max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = Field(default="", max_length=32768)
    last_transition_time: str
    observed_generation: int | None = Field(default=None, ge=0)


class NodeCounts(_Model):
    matched: int = 0
    ready: int = 0
    pending: int = 0
    held: int = 0
    conflicting: int = 0
    failed: int = 0


class Resources(_Model):
    gpus: int = 0
    gpu_mem_gi_b: int = Field(default=0, alias="gpuMemGiB")
    gpu_core_percentage: int = 0


class NodeStatus(_Model):
    name: str
    phase: NodePhase
    reason: str = ""
    message: str = ""


#: The per-node list in status is bounded; nodes not Ready are listed first.
MAX_NODE_STATUSES = 100


class GPUSharePoolStatus(_Model):
    observed_generation: int | None = None
    mode: str | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    nodes: NodeCounts = Field(default_factory=NodeCounts)
    capacity: Resources = Field(default_factory=Resources)
    allocated: Resources = Field(default_factory=Resources)
    node_statuses: list[NodeStatus] = Field(default_factory=list, max_length=MAX_NODE_STATUSES)


class ObjectMeta(BaseModel):
    """The parts of metadata gpushare reads; everything else is kept but ignored."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel, frozen=True)
    name: str = Field(min_length=1, max_length=253)
    generation: int | None = None
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class GPUSharePool(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)
    api_version: Literal["gpushare.io/v1alpha1"] = Field(default="gpushare.io/v1alpha1", alias="apiVersion")
    kind: Literal["GPUSharePool"] = "GPUSharePool"
    metadata: ObjectMeta
    spec: GPUSharePoolSpec
    status: GPUSharePoolStatus = Field(default_factory=GPUSharePoolStatus)

    @property
    def name(self) -> str:
        return self.metadata.name


class PoolValidationError(ValueError):
    """A GPUSharePool that breaks the API's rules; ``str()`` names object, field, value and rule."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.name = name
        self.problems = problems
        super().__init__(f"GPUSharePool/{name}: " + "; ".join(problems))


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _is_plumbing(part: int | str) -> bool:
    """pydantic adds union members and validator names to error locations; users never wrote them."""
    return isinstance(part, str) and ("[" in part or part in ("int", "str"))


def parse_pool(obj: dict[str, Any]) -> GPUSharePool:
    """Parse a GPUSharePool object (as Kubernetes JSON), or raise PoolValidationError."""
    name = str((obj.get("metadata") or {}).get("name") or "<unnamed>")
    try:
        return GPUSharePool.model_validate(obj)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            # Drop pydantic's union/validator plumbing from the location.
            loc = tuple(
                p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p in ("int", "str")))
            )
            msg = err["msg"].removeprefix("Value error, ")
            value = err.get("input")
            shown = "" if isinstance(value, dict | list) or value is None else f" (got {value!r})"
            problems.append(f"{_loc(loc) or 'object'}: {msg}{shown}")
        raise PoolValidationError(name, problems) from None
