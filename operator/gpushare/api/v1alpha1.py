"""GPUSharePool, gpushare.io/v1alpha1: the contract users write and the operator reports.

The CRD in ``crds/`` is generated from these models (``gpushare.api.crd``); a test fails when they
drift apart. Field names are camelCase on the wire (aliases) and snake_case in Python.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from gpushare import constants as c
from gpushare.api import rules
from gpushare.api import selector as sel


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


PERCENT_RE = re.compile(r"^([1-9][0-9]?|100)%$")

#: The kind of a pool: ACK's ``ack.node.gpu.schedule`` value, or ``nvidia`` for a pool of NVIDIA's
#: device plugin (whose nodes carry no ACK schedule).
PoolMode = Literal["cgpu", "share", "core_mem", "nvidia"]
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
    """One term of a label selector: a label key, an operator and (for In/NotIn) a list of values."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": rules.validations("LabelSelectorRequirement")}
    )
    key: str = Field(
        min_length=1,
        max_length=317,
        description="The node (or pod) label key this term tests, e.g. alibabacloud.com/nodepool-id.",
    )
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="How the label is tested. In: its value is one of values. NotIn: it is absent or its "
        "value is none of values. Exists: the label is present (any value). DoesNotExist: it is absent."
    )
    values: list[str] = Field(
        default_factory=list,
        description="The values for In and NotIn (at least one). Must be empty for Exists and DoesNotExist.",
    )

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        rules.VALUES_FIT_OPERATOR.check(self.operator, self.values)
        return self


#: Where a LabelSelector keeps its requirements (outside the fields: not dumped, not compared).
_REQUIREMENTS = "_gpushare_requirements"


class LabelSelector(_Model):
    """A standard Kubernetes label selector: an object must satisfy every matchLabels entry AND every
    matchExpressions term."""

    match_labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_SELECTOR_TERMS,
        description="Label key/value pairs that must all be present with exactly these values "
        f"(at most {MAX_SELECTOR_TERMS} entries).",
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list,
        max_length=MAX_SELECTOR_TERMS,
        description=f"Label terms (key, operator, values) that must all hold (at most {MAX_SELECTOR_TERMS}).",
    )

    def requirements(self) -> sel.Term:
        """The selector as requirements (matchLabels, by key, first): see :mod:`gpushare.api.selector`.

        Kept on the object (planner and webhook match every node against every pool); the cache
        holds the field values it was built from, so a ``model_copy(update=...)`` rebuilds it.
        """
        cached: tuple[object, object, sel.Term] | None = self.__dict__.get(_REQUIREMENTS)
        if cached is not None and cached[0] is self.match_labels and cached[1] is self.match_expressions:
            return cached[2]
        reqs = (
            *sel.equal(dict(sorted(self.match_labels.items()))),
            *(sel.Requirement(r.key, r.operator, tuple(r.values)) for r in self.match_expressions),
        )
        self.__dict__[_REQUIREMENTS] = (self.match_labels, self.match_expressions, reqs)
        return reqs

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """True when ``labels`` satisfy every term. An empty selector matches everything."""
        return sel.matches(self.requirements(), labels)

    def to_query(self) -> str:
        """The selector in the ``labelSelector=`` query syntax of the Kubernetes API."""
        return sel.render(self.requirements())


def _no_crd_default(schema: dict[str, Any]) -> None:
    """Keep a field's default out of the CRD (it is the model's alone): the default depends on the
    pool's backend, or the field belongs to one backend and must stay absent under the other."""
    schema.pop("default", None)


def _default_plugin_selector() -> LabelSelector:
    return LabelSelector(match_labels=dict(c.DEFAULT_PLUGIN_LABELS))


class DevicePlugin(_Model):
    """Where the gpushare device plugin runs and how it is restarted after a label change. The plugin reads
    its node's labels (cgpu.disable.isolation in particular) only when it starts, so a relabelled node
    needs a fresh plugin pod."""

    namespace: str = Field(
        default=c.DEFAULT_PLUGIN_NAMESPACE,
        min_length=1,
        max_length=63,
        json_schema_extra=_no_crd_default,
        description="Namespace of the device plugin DaemonSet's pods. Default "
        f"{c.DEFAULT_PLUGIN_NAMESPACE} (ACK's gpushare device plugin), {c.NVIDIA_PLUGIN_NAMESPACE} for a "
        "pool with spec.nvidia.",
    )
    pod_selector: LabelSelector = Field(
        default_factory=_default_plugin_selector,
        json_schema_extra=_no_crd_default,
        description="Labels of the device plugin pods, matched together with the node name to find the "
        "pod on a node (to restart it, or to read its state). Default matchLabels "
        + ", ".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())
        + " (the ACK gpushare-device-plugin-ds DaemonSet), "
        + ", ".join(f"{k}={v}" for k, v in c.NVIDIA_PLUGIN_LABELS.items())
        + " for a pool with spec.nvidia (NVIDIA's Helm chart).",
    )
    restart: Literal["Rolling", "Never"] = Field(
        default="Rolling",
        description="ACK: Rolling (default): after a node's labels change, delete its device plugin pod and "
        "wait until the DaemonSet's new pod is Ready, at most rollout.maxUnavailable nodes at a time. Never: "
        "only relabel; you restart the plugin yourself (until then the node still advertises its old "
        "mode's resources and is reported PluginRestartNeeded, not Ready). Going back to Rolling "
        "restarts the plugins that were skipped. No effect on a pool with spec.nvidia: NVIDIA's "
        "config-manager sidecar reloads its plugin itself when the node's config label changes.",
    )
    ready_timeout_seconds: int = Field(
        default=300,
        ge=10,
        le=3600,
        description="How long to wait for the new device plugin pod to become Ready before the node is "
        "reported Failed (reason DevicePluginNotReady) and the pool Degraded, and, from the label change, "
        "for the node to advertise the pool's mode's resources (else Degraded, reason PluginModeStale). "
        "Seconds, 10 to 3600, default 300.",
    )
    memory_unit: Literal["GiB", "MiB"] = Field(
        default="GiB",
        json_schema_extra=_no_crd_default,
        description=(
            "The unit of aliyun.com/gpu-mem on this pool's nodes: the device plugin's --memory-unit flag"
            " (GiB by default, or MiB). Admission judges requests, inspect shows capacity and the"
            " quota helper reads ALIYUN_COM_GPU_MEM_* in this unit. gpushare does not set the flag."
            " ACK pools only."
        ),
    )


class Rollout(_Model):
    """How a change reaches the nodes of a pool."""

    max_unavailable: int | str = Field(
        default=1,
        description="Integer or percentage string (int-or-string, as a Deployment's): how many nodes of the "
        "pool may be unavailable at once, an integer >= 1 or a percentage of the pool's nodes from 1% to "
        "100% (rounded up, at least 1). Default 1. A node is unavailable from its device plugin restart "
        "until it advertises the pool's mode's resources (also past devicePlugin.readyTimeoutSeconds: "
        "the rollout then stops there and the pool says so), or while it is cordoned for a mode switch.",
        json_schema_extra={
            "x-kubernetes-int-or-string": True,
            "x-kubernetes-validations": [
                {
                    "rule": f"type(self) == int ? self >= 1 : self.matches('{PERCENT_RE.pattern}')",
                    "message": "maxUnavailable must be an integer >= 1 or a percentage from 1% to 100%",
                }
            ],
        },
    )
    mode_switch: Literal["Wait", "Cordon", "Evict", "Force"] = Field(
        default="Wait",
        description=f"What to do when a node must change {c.LABEL_SCHEDULE} while pods using "
        f"{c.RES_GPU_MEM} run on it (switching under them corrupts the scheduler's GPU ledger). "
        "Wait (default): hold the node (phase Held) until they finish. Cordon: cordon the node, wait, then "
        "uncordon. Evict: cordon and evict the pods through the Eviction API (PodDisruptionBudgets are "
        "honoured), then uncordon. Force: switch now and emit a warning Event. A node an administrator "
        "cordoned is never uncordoned.",
    )

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
    """How the gpushare admission webhook treats pods and workloads aimed at this pool."""

    mode: Literal["Enforce", "Warn", "Off"] = Field(
        default="Enforce",
        description="Enforce (default): deny GPU-sharing pods that break a pool rule (wrong request kind, "
        "gpu-mem larger than one GPU, no pool nodeSelector...). Warn: admit them with a warning. Off: skip "
        "the pool-specific rules (the rules on the request values themselves still apply).",
    )


class Lending(_Model):
    """Opt-in: lend this pool's idle nodes to other pools whose GPU pods wait
    (docs/concepts/demand-lending.md)."""

    to: list[str] = Field(
        min_length=1,
        max_length=16,
        description="The pools that may borrow this pool's idle nodes (GPUSharePool names, at least one). "
        "A borrowed node gets the borrower's labels (gpushare.io/pool among them) and a device plugin "
        "restart; pods reach it through the borrower's gpushare.io/pool label.",
    )
    keep_idle: int = Field(
        default=1,
        ge=0,
        le=10000,
        description="How many idle nodes (no GPU-sharing pod, Ready) this pool always keeps: it never "
        "lends below this. Default 1.",
    )
    return_after_seconds: int = Field(
        default=600,
        ge=30,
        le=604800,
        description="A lent node goes back once the borrower has not needed it (no GPU pod on the node "
        "and none of its pods waiting) for this long. Seconds, 30 to 604800, default 600.",
    )


_OBJ_DEFAULT: dict[str, Any] = {"default": {}}


class NvidiaConfigMap(_Model):
    """The ConfigMap of named configs that NVIDIA's device plugin pods mount (its Helm chart's
    ``config.name``)."""

    namespace: str = Field(
        default=c.NVIDIA_PLUGIN_NAMESPACE,
        min_length=1,
        max_length=63,
        description=f"Its namespace (the plugin's). Default {c.NVIDIA_PLUGIN_NAMESPACE}.",
    )
    name: str = Field(
        default=c.NVIDIA_CONFIGS_CONFIGMAP,
        min_length=1,
        max_length=253,
        description=f"Its name. Default {c.NVIDIA_CONFIGS_CONFIGMAP}. gpushare adds one key per config its "
        "pools need (named after the config's content) and never touches the others.",
    )


#: A MIG profile as NVIDIA names it: compute slices, memory, optional media extensions (1g.5gb,
#: 3g.40gb, 1g.10gb+me).
MIG_PROFILE_RE = re.compile(rules.MIG_PROFILE_PATTERN)
#: A PCI device id as mig-parted's device-filter reads it: device then vendor, 0x20B010DE.
PCI_ID_RE = re.compile(r"^0x[0-9A-Fa-f]{8}$")
#: Bounds on a MIG geometry (the CEL rules over it stay cheap).
MAX_MIG_GEOMETRIES = 8
MAX_MIG_PROFILES = 16


class MigConfigMap(_Model):
    """The ConfigMap of mig-parted configs that NVIDIA's MIG manager reads (the GPU Operator's
    ``migManager.config.name``)."""

    namespace: str = Field(
        default=c.MIG_CONFIGS_NAMESPACE,
        min_length=1,
        max_length=63,
        description=f"Its namespace (the MIG manager's). Default {c.MIG_CONFIGS_NAMESPACE}.",
    )
    name: str = Field(
        default=c.MIG_CONFIGS_CONFIGMAP,
        min_length=1,
        max_length=253,
        description=f"Its name. Default {c.MIG_CONFIGS_CONFIGMAP}. It must hold a mig-parted file under "
        "config.yaml, the one file the MIG manager reads: gpushare adds one entry of its mig-configs per "
        "geometry its pools declare (a config named after its content) and never touches the others. "
        "The GPU Operator resets its own default-mig-parted-config: point this at a ConfigMap of your "
        "own named in ClusterPolicy migManager.config.name.",
    )


class MigGeometry(_Model):
    """The MIG slices of each GPU of one model (or of every GPU): one entry of a mig-parted config."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": rules.validations("MigGeometry")}
    )
    device_filter: list[str] = Field(
        default_factory=list,
        max_length=8,
        json_schema_extra={"items": {"type": "string", "maxLength": 10, "pattern": PCI_ID_RE.pattern}},
        description="The GPU models this entry is for, as PCI device ids in mig-parted's form (device "
        "then vendor, e.g. 0x20B010DE for A100-SXM4-40GB, 0x233010DE for H100-SXM5-80GB). Empty "
        "(default): every GPU of the node, in a geometry of that one entry; with several entries, each "
        "names its models (give each model one entry).",
    )
    profiles: dict[str, Annotated[int, Field(ge=1, le=7)]] = Field(
        min_length=1,
        max_length=MAX_MIG_PROFILES,
        description="How many MIG devices of each profile every such GPU is cut into, e.g. {1g.5gb: 7} or "
        "{3g.20gb: 1, 2g.10gb: 1, 1g.5gb: 1}. A profile reads <compute slices>g.<memory>gb (+me for "
        "the media extensions); 1 to 7 of each. Whether a GPU can hold them is the MIG manager's to "
        f"say: a geometry it cannot apply leaves the node's {c.LABEL_MIG_CONFIG_STATE} at failed, "
        "and the pool names the node.",
    )

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, profiles: dict[str, int]) -> dict[str, int]:
        rules.MIG_PROFILE_NAMES.check(profiles)
        return profiles

    @field_validator("device_filter")
    @classmethod
    def _pci_ids(cls, ids: list[str]) -> list[str]:
        for pci in ids:
            if not PCI_ID_RE.match(pci):
                raise ValueError(f"{pci!r} is not a PCI device id such as 0x20B010DE (device, then vendor)")
        return ids


class MigTimeSlicing(_Model):
    """Time-slicing of one MIG profile's devices (NVIDIA's per-resource replicas)."""

    profile: str = Field(
        min_length=1,
        max_length=32,
        description="The profile whose devices are shared, one of the geometry's (e.g. 1g.5gb).",
    )
    replicas: int = Field(
        ge=2,
        le=1024,
        description="How many pods share each device of the profile, 2 to 1024: the node advertises "
        "replicas x its devices of the profile.",
    )


#: Where a Mig keeps its hash (outside the fields: not dumped, not compared).
_HASH = "_gpushare_hash"


class Mig(_Model):
    """Multi-Instance GPU: each GPU of the pool is cut into hardware slices by NVIDIA's MIG manager,
    which applies the node's nvidia.com/mig.config, and the device plugin advertises the slices."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": rules.validations("Mig")})
    strategy: Literal["single", "mixed"] = Field(
        default="mixed",
        description=f"The device plugin's MIG strategy. mixed (default): each profile is advertised as "
        f"{c.RES_NVIDIA_MIG_PREFIX}<profile> (e.g. {c.RES_NVIDIA_MIG_PREFIX}1g.5gb). single: every GPU "
        f"has one and the same profile, and its devices are advertised as {c.RES_NVIDIA_GPU}.",
    )
    geometry: list[MigGeometry] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MIG_GEOMETRIES,
        description="The slices of the pool's GPUs: gpushare writes them as a mig-parted config (version "
        "v1) as an entry of the config.yaml of the MIG manager's ConfigMap and names that config in "
        f"each node's {c.LABEL_MIG_CONFIG}. One entry, or one per GPU model (deviceFilter). Exactly one of "
        "geometry and config.",
    )
    config: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="Instead of geometry: the name of a config already in the MIG manager's ConfigMap "
        "(e.g. all-1g.5gb of NVIDIA's default one), whose profiles gpushare reads from there. Exactly "
        "one of geometry and config.",
    )
    time_slicing: list[MigTimeSlicing] = Field(
        default_factory=list,
        max_length=MAX_MIG_PROFILES,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["profile"]},
        description="Optional: share the devices of some profiles between pods by time-slicing (as "
        "NVIDIA's a100-40gb example does), one entry per profile. Empty (default): one pod per device.",
    )
    config_map: MigConfigMap = Field(
        default_factory=MigConfigMap,
        json_schema_extra=_OBJ_DEFAULT,
        description="The ConfigMap of mig-parted configs the MIG manager reads.",
    )

    @model_validator(mode="after")
    def _mig_rules(self) -> Mig:
        rules.MIG_ONE_SOURCE.check(self.geometry is not None, self.config is not None)
        rules.MIG_ONE_ENTRY_PER_MODEL.check([g.device_filter for g in self.geometry or ()])
        profiles = [sorted(g.profiles) for g in self.geometry or ()]
        rules.MIG_SINGLE_PROFILE.check(self.strategy, profiles)
        rules.MIG_SLICED_PROFILES.check(
            [t.profile for t in self.time_slicing], None if self.geometry is None else profiles
        )
        return self

    def __hash__(self) -> int:
        """By content (its lists and maps are not hashable): a pool's configs are cached by spec.
        Kept on the object, outside the fields, like :meth:`LabelSelector.requirements`."""
        cached: int | None = self.__dict__.get(_HASH)
        if cached is None:
            cached = hash(json.dumps(self.dump(), sort_keys=True))
            self.__dict__[_HASH] = cached
        return cached

    def profiles(self) -> tuple[str, ...]:
        """The profiles the geometry declares, sorted (empty: a named config, read elsewhere)."""
        return tuple(sorted({p for g in self.geometry or () for p in g.profiles}))

    def replicas_of(self, profile: str) -> int:
        """How many pods share each device of ``profile`` (1: not time-sliced)."""
        return next((t.replicas for t in self.time_slicing if t.profile == profile), 1)


class Nvidia(_Model):
    """NVIDIA's device plugin shares the pool's GPUs (time-slicing, MPS or MIG slices): one named
    config per pool, picked on each node by the nvidia.com/device-plugin.config label (and, for MIG,
    the slices' config by nvidia.com/mig.config)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": rules.validations("Nvidia")})
    strategy: Literal["TimeSlicing", "MPS", "MIG", "None"] = Field(
        description="How each GPU is shared: TimeSlicing (the plugin advertises each GPU replicas times; "
        "pods interleave in time, with no memory or fault isolation), MPS (replicas clients of one MPS "
        "daemon per GPU, each with an equal share of memory and compute; needs the MPS daemon of NVIDIA's "
        "chart), MIG (hardware slices with their own memory and compute, declared in mig; needs NVIDIA's "
        "MIG manager) or None (no sharing: one pod per GPU).",
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="How many pods may share each GPU: 2 or more for TimeSlicing and MPS, 1 for None and "
        "MIG (whose slices are time-sliced by mig.timeSlicing). "
        "The node advertises replicas x GPUs of nvidia.com/gpu (nvidia.com/gpu.shared with "
        "renameByDefault). Fewer replicas, or another strategy, is a mode switch (rollout.modeSwitch "
        "guards the pods running there); more replicas is not.",
    )
    rename_by_default: bool = Field(
        default=False,
        description="Advertise shared GPUs as nvidia.com/gpu.shared instead of nvidia.com/gpu, so that a pod "
        "asks for a shared GPU by name. Default false.",
    )
    fail_requests_greater_than_one: bool = Field(
        default=False,
        description="Make the plugin refuse a container that asks for more than one shared GPU (such a "
        "request gets no more of the GPU, only more replicas of it). Admission denies those pods at "
        "kubectl apply. Default false (MPS always refuses them).",
    )
    config_map: NvidiaConfigMap = Field(
        default_factory=NvidiaConfigMap,
        json_schema_extra=_OBJ_DEFAULT,
        description="The ConfigMap of named configs the plugin pods mount.",
    )
    mig: Mig | None = Field(
        default=None,
        description="The MIG slices of the pool's GPUs, for strategy MIG (and only for it). Any change "
        "of the slices is a mode switch on each node (rollout.modeSwitch guards the pods running there).",
    )
    config_propagation_seconds: int = Field(
        default=90,
        ge=0,
        le=900,
        description="How long after a key is added to the ConfigMap before a node's label may name it: "
        "the kubelet rewrites a pod's ConfigMap volume only at its periodic sync (syncFrequency, 1 "
        "minute, plus up to half of it in jitter), and a label naming a config the plugin's directory "
        "does not hold yet makes config-manager fail. Seconds, default 90.",
    )

    @model_validator(mode="after")
    def _replicas_fit_strategy(self) -> Nvidia:
        rules.REPLICAS_FIT_STRATEGY.check(self.strategy, self.replicas)
        rules.MIG_ONE_SHARING.check(self.strategy, self.mig is not None, self.rename_by_default)
        return self

    @property
    def resource(self) -> str:
        """The resource the node advertises the shared GPUs as."""
        return (
            c.RES_NVIDIA_GPU_SHARED
            if self.rename_by_default and self.strategy not in ("None", "MIG")
            else c.RES_NVIDIA_GPU
        )


class GPUSharePoolSpec(_Model):
    """Which nodes form the pool and how their GPUs are shared, plus how changes roll out. A pool has
    one backend: ACK's GPU sharing (memoryIsolation, computeAllocation, placement; the default) or
    NVIDIA's device plugin (spec.nvidia)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": rules.validations("spec")})
    node_selector: LabelSelector = Field(
        description="Required, non-empty: the nodes of this pool, e.g. matchLabels "
        "alibabacloud.com/nodepool-id: np-gpu. It must not use a label gpushare writes "
        f"({', '.join(c.MANAGED_LABELS)}), nor one NVIDIA's GPU Feature Discovery rewrites when a node's "
        f"GPUs are shared ({', '.join(c.NVIDIA_SHARING_LABELS)}; select by {c.LABEL_GPU_PRODUCT} "
        "instead). A node selected by two pools is a Conflict and neither pool "
        f"changes it; a node labelled {c.LABEL_SKIP}=true is left alone.",
        json_schema_extra={"x-kubernetes-validations": rules.validations("nodeSelector")},
    )
    memory_isolation: bool = Field(
        default=True,
        json_schema_extra=_no_crd_default,
        description="true (default): cGPU isolates each pod's GPU memory; nodes get "
        f"{c.LABEL_SCHEDULE}=cgpu (core_mem with computeAllocation) and {c.LABEL_DISABLE_ISOLATION}=false. "
        f"false: sharing without isolation ({c.LABEL_SCHEDULE}=share, {c.LABEL_DISABLE_ISOLATION}=true); "
        "containers see the whole GPU and must size themselves (gpushare quota).",
    )
    compute_allocation: bool = Field(
        default=False,
        json_schema_extra=_no_crd_default,
        description=f"true: compute is allocated too ({c.LABEL_SCHEDULE}=core_mem); pods request "
        f"{c.RES_GPU_CORE} (5 to 100, multiples of 5) with {c.RES_GPU_MEM}. Requires memoryIsolation: "
        "true. Default false.",
    )
    placement: Literal["binpack", "spread"] = Field(
        default="binpack",
        json_schema_extra=_no_crd_default,
        description=f"Card-level placement on multi-GPU nodes ({c.LABEL_PLACEMENT}): binpack (default) "
        "fills one GPU before the next; spread distributes pods across the GPUs.",
    )
    nvidia: Nvidia | None = Field(
        default=None,
        description="Share the pool's GPUs with NVIDIA's device plugin (time-slicing or MPS) instead of "
        "ACK's GPU sharing: gpushare writes the pool's config into the plugin's ConfigMap and sets "
        f"{c.LABEL_NVIDIA_CONFIG} on the pool's nodes. With it, the ACK fields (memoryIsolation, "
        "computeAllocation, placement) must be absent.",
    )
    device_plugin: DevicePlugin = Field(
        default_factory=DevicePlugin,
        json_schema_extra=_OBJ_DEFAULT,
        description="Where the gpushare device plugin runs and how it is restarted after a node's labels "
        "change (it reads them only at start).",
    )
    rollout: Rollout = Field(
        default_factory=Rollout,
        json_schema_extra=_OBJ_DEFAULT,
        description="How a change reaches the nodes: how many at a time, and what to do with running GPU "
        "pods when a node's mode must switch.",
    )
    admission: Admission = Field(
        default_factory=Admission,
        json_schema_extra=_OBJ_DEFAULT,
        description="How the admission webhook treats GPU-sharing pods aimed at this pool.",
    )
    lending: Lending | None = Field(
        default=None,
        description="Opt-in: lend idle nodes to the pools named in lending.to while their GPU pods wait "
        "for want of GPU resources; absent (default): never lend.",
    )
    cleanup: Literal["Restore", "Retain"] = Field(
        default="Restore",
        description="What happens to a node's labels when the pool is deleted or the node leaves the "
        f"selector. Restore (default): put back the values recorded in the {c.ANNOTATION_OWNED} annotation "
        f"({c.LABEL_SCHEDULE}=default where there was none). Retain: leave the ACK labels; only "
        f"{c.LABEL_POOL} and the annotation are removed.",
    )

    # The rules of gpushare.api.rules, as validators (field validators, so that they are reported
    # together with the other fields' errors).
    @field_validator("node_selector")
    @classmethod
    def _selector_rules(cls, selector: LabelSelector) -> LabelSelector:
        rules.EMPTY_SELECTOR.check(selector.requirements())
        for rule in rules.SELECTOR_RULES:
            rule.check(selector.requirements())
        return selector

    @model_validator(mode="before")
    @classmethod
    def _backend_defaults(cls, data: Any) -> Any:
        """An NVIDIA pool's device plugin is NVIDIA's unless it says otherwise."""
        if not isinstance(data, dict) or data.get("nvidia") is None:
            return data
        plugin = data.get("devicePlugin", data.get("device_plugin"))
        plugin = dict(plugin) if isinstance(plugin, Mapping) else {}
        if plugin.get("namespace") is None:
            plugin["namespace"] = c.NVIDIA_PLUGIN_NAMESPACE
        if plugin.get("podSelector", plugin.get("pod_selector")) is None:
            plugin["podSelector"] = {"matchLabels": dict(c.NVIDIA_PLUGIN_LABELS)}
        out = {k: v for k, v in data.items() if k != "device_plugin"}
        out["devicePlugin"] = plugin
        return out

    @model_validator(mode="after")
    def _one_backend(self) -> GPUSharePoolSpec:
        ack = [f for f in rules.ACK_FIELDS if _snake(f) in self.model_fields_set]
        rules.ONE_BACKEND.check(self.nvidia is not None, ack)
        return self

    @property
    def isolates_memory(self) -> bool:
        """Whether the pool demands cGPU memory isolation (an ACK pool with memoryIsolation)."""
        return self.nvidia is None and self.memory_isolation

    @property
    def backend(self) -> str:
        """The pool's backend: ``nvidia`` or ``ack``."""
        return "nvidia" if self.nvidia is not None else "ack"

    @field_validator("compute_allocation")
    @classmethod
    def _compute_rules(cls, compute_allocation: bool, info: ValidationInfo) -> bool:
        # memory_isolation is validated before compute_allocation (field order); absent when invalid.
        rules.COMPUTE_WITHOUT_ISOLATION.check(compute_allocation, info.data.get("memory_isolation", True))
        return compute_allocation

    @property
    def mode(self) -> PoolMode:
        """The kind of pool: the ``ack.node.gpu.schedule`` value an ACK pool puts on its nodes, or
        ``nvidia`` for a pool of NVIDIA's device plugin (whose ACK fields keep their model defaults
        but mean nothing: admission, advise and inspect must not read it as a cgpu pool)."""
        if self.nvidia is not None:
            return c.POOL_KIND_NVIDIA
        if self.compute_allocation:
            return "core_mem"
        return "cgpu" if self.memory_isolation else "share"


class Condition(_Model):
    """A standard Kubernetes condition (metav1.Condition) of the pool."""

    type: str = Field(
        max_length=316,
        description="Ready (every matched node has the pool's labels and a Ready device plugin), Progressing "
        "(a change is rolling out or held), Degraded (a node failed: plugin not Ready, isolation missing, "
        "patch rejected) or Conflict (a node is selected by another pool too).",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="One CamelCase word for the cause, e.g. NodesHeld, DevicePluginNotReady, NodeConflict.",
    )
    message: str = Field(
        default="",
        max_length=32768,
        description="Human-readable details: which nodes, pods or pools, and why.",
    )
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The metadata.generation of the spec this condition was computed from.",
    )


class NodeCounts(_Model):
    """How many of the pool's nodes are in each state."""

    matched: int = Field(
        default=0, description="Nodes that belong to the pool: selected, not skipped, not in conflict."
    )
    ready: int = Field(default=0, description="Nodes with the pool's labels and a Ready device plugin.")
    pending: int = Field(
        default=0, description="Nodes waiting for their turn, a label patch or a device plugin restart."
    )
    held: int = Field(
        default=0, description="Nodes whose mode switch waits for running GPU pods (rollout.modeSwitch)."
    )
    conflicting: int = Field(default=0, description="Nodes also selected by another pool; left unchanged.")
    failed: int = Field(
        default=0, description="Nodes that failed (device plugin not Ready in time, isolation missing...)."
    )


#: The resources a pool's ``status.capacity`` and ``status.allocated`` list (a Kubernetes resource
#: list, as a node's ``status.allocatable``): gpu-core.percentage only for core_mem pools.
STATUS_RESOURCES = (c.RES_GPU_COUNT, c.RES_GPU_MEM, c.RES_GPU_CORE)
#: The keys of ``capacity``/``allocated`` before they were resource lists (gpushare 0.1 status).
LEGACY_RESOURCE_KEYS: dict[str, str] = {
    "gpus": c.RES_GPU_COUNT,
    "gpuMemGiB": c.RES_GPU_MEM,
    "gpuCorePercentage": c.RES_GPU_CORE,
}


class NodeStatus(_Model):
    """The state of one node of the pool."""

    name: str = Field(description="The node's name.")
    phase: NodePhase = Field(
        description="Ready (done), Pending (waiting for a patch or its rollout turn), Restarting (device "
        "plugin restarting), Held (mode switch waits for GPU pods), Conflict (another pool selects it), "
        f"Failed, Skipped (labelled {c.LABEL_SKIP}=true) or Degraded (e.g. cGPU isolation unavailable)."
    )
    reason: str = Field(default="", description="One CamelCase word for the cause, e.g. NoDevicePluginPod.")
    message: str | None = Field(
        default=None,
        description="Details: the pods holding the node, the other pool... Absent when there is nothing "
        "to add (a Ready node).",
    )


#: The per-node list in status is bounded; nodes not Ready are listed first.
MAX_NODE_STATUSES = 100


class Loan(_Model):
    """A node lent by one pool to another (recorded on the node, gpushare.io/loan)."""

    node: str = Field(description="The node's name.")
    to: str | None = Field(default=None, description="The pool it is lent to (on the lender's status).")
    from_: str | None = Field(
        default=None, alias="from", description="The pool it is borrowed from (on the borrower's status)."
    )


class Demand(_Model):
    """What the pool is short of and what it has to spare (docs/concepts/demand-lending.md, "Demand")."""

    pending_pods: int = Field(
        default=0,
        description="GPU-sharing pods that target this pool and that the scheduler could not place for "
        "want of GPU resources (PodScheduled=False, reason Unschedulable).",
    )
    requests: dict[str, str] = Field(
        default_factory=dict,
        description=f"Their requests, summed, as a resource list: {c.RES_GPU_MEM} (in "
        f"devicePlugin.memoryUnit) and {c.RES_GPU_CORE}.",
    )
    oldest_pending_since: str | None = Field(
        default=None, description="Since when the oldest of them waits (RFC 3339); absent when none waits."
    )
    pods: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="The waiting pods (namespace/name), oldest first, at most 20.",
    )
    idle_nodes: int = Field(
        default=0,
        description="The pool's idle nodes: Ready, not cordoned or held, advertising the pool's mode, and "
        "running no GPU-sharing pod.",
    )
    idle_node_names: list[str] = Field(
        default_factory=list, max_length=20, description="Their names, at most 20."
    )
    loans: list[Loan] = Field(
        default_factory=list,
        max_length=20,
        description="Nodes this pool lent (to) or borrowed (from), at most 20.",
    )


class GPUSharePoolStatus(_Model):
    """What the operator observed and did; written by the operator only."""

    observed_generation: int | None = Field(
        default=None, description="The metadata.generation of the spec the operator last acted on."
    )
    backend: str | None = Field(default=None, description="The pool's GPU-sharing backend: ack or nvidia.")
    schedule: str | None = Field(
        default=None,
        description=f"The mode the pool puts on its nodes (the GPU sharing mode; spec.admission.mode is "
        f"about the admission webhook): the {c.LABEL_SCHEDULE} value, cgpu, share or core_mem, of an ACK "
        f"pool; the {c.LABEL_NVIDIA_CONFIG} config name of an NVIDIA pool.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Ready, Progressing, Degraded and Conflict, one entry per type.",
    )
    nodes: NodeCounts = Field(default_factory=NodeCounts, description="Node counts by state.")
    capacity: dict[str, str] = Field(
        default_factory=dict,
        description="GPU resources the pool's nodes advertise as allocatable, summed, as a resource list "
        f"(quantities by resource name, like a node's status.allocatable): {c.RES_GPU_COUNT} (GPUs), "
        f"{c.RES_GPU_MEM} (in devicePlugin.memoryUnit, GiB by default) and, for core_mem pools, "
        f"{c.RES_GPU_CORE} (100 per GPU); for an NVIDIA pool, {c.RES_NVIDIA_GPU} "
        f"(or {c.RES_NVIDIA_GPU_SHARED} with renameByDefault): replicas x GPUs, the pool's slots.",
    )
    allocated: dict[str, str] = Field(
        default_factory=dict,
        description="The same resources requested by the unfinished pods bound to the pool's nodes.",
    )
    node_statuses: list[NodeStatus] = Field(
        default_factory=list,
        max_length=MAX_NODE_STATUSES,
        description=f"Per-node state, at most {MAX_NODE_STATUSES} entries, nodes not Ready first.",
    )
    demand: Demand | None = Field(
        default=None,
        description="Waiting GPU pods that target the pool, its idle nodes and its loans (written by the "
        "operator's demand loop; absent until it has run).",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_older(cls, data: Any) -> Any:
        """A status an older gpushare wrote: ``mode`` (now ``schedule``), and ``capacity`` /
        ``allocated`` as ``gpus``/``gpuMemGiB``/``gpuCorePercentage`` integers."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        if "mode" in out:
            legacy = out.pop("mode")
            out.setdefault("schedule", legacy)
        for key in ("capacity", "allocated"):
            value = out.get(key)
            if isinstance(value, dict):
                out[key] = {LEGACY_RESOURCE_KEYS.get(k, k): str(v) for k, v in value.items() if v is not None}
        return out


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

    @field_validator("status", mode="wrap")
    @classmethod
    def _status_never_invalidates(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """The status is the operator's own record: one it cannot read (written by another
        version) is started afresh, never a reason to treat the user's pool as invalid."""
        try:
            return handler(value)
        except ValidationError:
            return GPUSharePoolStatus()

    @property
    def name(self) -> str:
        return self.metadata.name


@dataclass(frozen=True)
class Problem:
    """One reason a GPUSharePool is invalid: where, what, and which rule (a pydantic error type:
    a :mod:`gpushare.api.rules` id for the pool's own rules)."""

    field: str
    message: str
    rule: str
    #: The offending value as the user wrote it (None when absent).
    value: object = None

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class PoolValidationError(ValueError):
    """A GPUSharePool that breaks the API's rules; ``str()`` names object, field, value and rule."""

    def __init__(self, name: str, errors: list[Problem]) -> None:
        self.name = name
        self.errors = errors
        self.problems = [str(e) for e in errors]
        super().__init__(f"GPUSharePool/{name}: " + "; ".join(self.problems))


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if _is_plumbing(part):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "object"


def _is_plumbing(part: int | str) -> bool:
    """pydantic adds union members and validator names to error locations; users never wrote them."""
    return isinstance(part, str) and ("[" in part or part in ("int", "str"))


_OWN_RULES = frozenset(rule.id for rule in rules.SPEC_RULES)


def _problem(err: ErrorDetails) -> Problem:
    value = None if err["type"] == "missing" else err.get("input")  # a missing field's input is its parent
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] not in _OWN_RULES and not (isinstance(value, dict | list) or value is None):
        message += f" (got {value!r})"  # the pool rules' messages name the value themselves
    return Problem(_loc(err["loc"]), message, err["type"], value)


def parse_pool(obj: dict[str, Any]) -> GPUSharePool:
    """Parse a GPUSharePool object (as Kubernetes JSON), or raise PoolValidationError."""
    meta = obj.get("metadata")
    name = str((meta.get("name") if isinstance(meta, dict) else None) or "<unnamed>")
    try:
        return GPUSharePool.model_validate(obj)
    except ValidationError as exc:
        raise PoolValidationError(name, [_problem(err) for err in exc.errors()]) from None
