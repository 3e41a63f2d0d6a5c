"""The GPUSharePool rules that reach beyond one field's type, each defined once.

A :class:`SpecRule` is an id, the field it is reported on, a predicate, a message and a fix. It is
projected three ways, so the API server, the operator and the admission webhook say the same thing:

* the CRD's ``x-kubernetes-validations`` (:meth:`SpecRule.validation`, placed by ``v1alpha1``);
* the pydantic validators of ``v1alpha1`` (:meth:`SpecRule.check` raises a
  ``PydanticCustomError`` whose type is the rule's id);
* the admission findings (``admission.rules.evaluate_pool`` turns an error of that type into a
  finding of the rule); the planner re-checks with :meth:`SpecRule.problem`.

The id is the admission rule the problem is reported under. A selector on the labels gpushare
writes or on those NVIDIA's GPU Feature Discovery rewrites because of sharing, and a selector term
whose values do not fit its operator, have no admission rule of their own: they are part of
``GP001-pool-schema``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue
from pydantic_core import PydanticCustomError

from gpushare import constants as c
from gpushare.api.selector import Requirement, keys

#: What a predicate returns for a spec that breaks the rule: the values for the message's
#: placeholders (empty when it has none); None when the spec keeps the rule.
Broken = Mapping[str, str] | None


@dataclass(frozen=True)
class SpecRule:
    """One rule of the pool spec. ``message`` may name placeholders (``{labels}``) that the
    predicate fills; ``cel_values`` fills them for the CRD, whose messages are fixed text."""

    id: str
    #: The field (wire name, under spec) the problem is reported on.
    field: str
    #: The CRD schema node the CEL rule sits on: a spec field, ``spec`` (several fields), or a
    #: model's name (every place that model is used).
    cel_on: str
    cel: str
    message: str
    fix: str
    predicate: Callable[..., Broken]
    cel_values: Mapping[str, str] | None = None
    #: When set, the CRD holds one CEL rule per value, ``{each}`` in ``cel`` replaced by it and the
    #: message's placeholder (the one key of ``cel_values``) filled with it: each message names
    #: what broke it, at a cost the API server accepts (a ``messageExpression`` joining the keys
    #: found is refused as too costly).
    cel_each: tuple[str, ...] = ()

    def problem(self, *args: object) -> str | None:
        """The message when the arguments break the rule, else None."""
        broken = self.predicate(*args)
        return None if broken is None else self.message.format(**broken)

    def check(self, *args: object) -> None:
        """Raise the rule's pydantic error when the arguments break it."""
        broken = self.predicate(*args)
        if broken is not None:
            raise PydanticCustomError(self.id, self.message, dict(broken))

    def validations(self) -> list[dict[str, JsonValue]]:
        """The rule as CRD ``x-kubernetes-validations`` entries (one, or one per ``cel_each``)."""
        if not self.cel_each:
            return [{"rule": self.cel, "message": self.message.format(**(self.cel_values or {}))}]
        (placeholder,) = self.cel_values or {"": ""}
        return [
            {"rule": self.cel.replace("{each}", each), "message": self.message.format(**{placeholder: each})}
            for each in self.cel_each
        ]


def _empty(selector: Sequence[Requirement]) -> Broken:
    return {} if not selector else None


def _managed(selector: Sequence[Requirement]) -> Broken:
    used = sorted(keys(selector) & set(c.MANAGED_LABELS))
    return {"labels": ", ".join(used)} if used else None


def _rewritten(selector: Sequence[Requirement]) -> Broken:
    used = sorted(keys(selector) & set(c.NVIDIA_SHARING_LABELS))
    return {"labels": ", ".join(used)} if used else None


def _compute_without_isolation(compute_allocation: bool, memory_isolation: bool) -> Broken:
    return {} if compute_allocation and not memory_isolation else None


#: The ACK fields of a pool spec (wire names): an NVIDIA pool sets none of them.
ACK_FIELDS = ("memoryIsolation", "computeAllocation", "placement")


def _one_backend(nvidia: bool, ack_fields_set: Sequence[str]) -> Broken:
    return {"fields": ", ".join(ack_fields_set)} if nvidia and ack_fields_set else None


def _replicas_fit_strategy(strategy: str, replicas: int) -> Broken:
    if (strategy in ("None", "MIG")) == (replicas == 1):
        return None
    return {"got": f" (strategy {strategy} with replicas {replicas})"}


def _mig_one_sharing(strategy: str, has_mig: bool, rename_by_default: bool) -> Broken:
    if strategy != "MIG":
        return {"got": " (nvidia.mig is set with strategy " + strategy + ")"} if has_mig else None
    if not has_mig:
        return {"got": " (strategy MIG without nvidia.mig)"}
    return {"got": " (strategy MIG with renameByDefault: true)"} if rename_by_default else None


def _mig_one_source(has_geometry: bool, has_config: bool) -> Broken:
    if has_geometry != has_config:
        return None
    return {"got": " (both are set)" if has_geometry else " (neither is set)"}


def _mig_one_entry_per_model(filters: Sequence[Sequence[str]]) -> Broken:
    if len(filters) < 2 or all(filters):
        return None
    return {"got": f" (an entry without deviceFilter among {len(filters)})"}


def _mig_single_profile(strategy: str, geometries: Sequence[Sequence[str]]) -> Broken:
    if strategy != "single" or not geometries:
        return None
    if all(list(g) == list(geometries[0]) and len(g) == 1 for g in geometries):
        return None
    found = sorted({p for g in geometries for p in g})
    entries = "1 entry" if len(geometries) == 1 else f"{len(geometries)} entries"
    return {"got": f" (profiles {', '.join(found)} in {entries})"}


def _mig_sliced_profiles(sliced: Sequence[str], geometries: Sequence[Sequence[str]] | None) -> Broken:
    if geometries is None:
        return None
    declared = {p for g in geometries for p in g}
    missing = [p for p in sliced if p not in declared]
    if not missing:
        return None
    return {"got": f" ({', '.join(missing)} not in {', '.join(sorted(declared))})"}


def _mig_profile_names(profiles: Mapping[str, int]) -> Broken:
    bad = [p for p in profiles if not _MIG_PROFILE.match(p)]
    return {"got": " (" + ", ".join(repr(p) for p in bad) + ")"} if bad else None


def _values_fit_operator(operator: str, values: Sequence[str]) -> Broken:
    if (operator in ("In", "NotIn")) == bool(values):
        return None
    return {"got": f" (operator {operator} with {len(values)} value(s))"}


#: The fix of every GP001-pool-schema problem.
SCHEMA_FIX = "correct the field (see `kubectl explain gpusharepool.spec`)"


def _cel_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def _cel_no_key_in(keys_cel: str) -> str:
    """CEL on a nodeSelector (``self``): none of its keys is in the list literal ``keys_cel``."""
    return (
        f"(!has(self.matchLabels) || !self.matchLabels.exists(k, k in {keys_cel})) && "
        f"(!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.key in {keys_cel})))"
    )


#: The managed label keys as a CEL list literal.
_MANAGED_CEL = _cel_list(c.MANAGED_LABELS)

EMPTY_SELECTOR = SpecRule(
    id="GP003-pool-empty-selector",
    field="nodeSelector",
    cel_on="nodeSelector",
    cel="(has(self.matchLabels) && size(self.matchLabels) > 0) || "
    "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
    message="nodeSelector must not be empty: an empty selector would take over every node",
    fix="select the pool's nodes, e.g. matchLabels {alibabacloud.com/nodepool-id: <id>}",
    predicate=_empty,
)

MANAGED_SELECTOR = SpecRule(
    id="GP001-pool-schema",
    field="nodeSelector",
    cel_on="nodeSelector",
    cel=_cel_no_key_in(_MANAGED_CEL),
    message="nodeSelector must not use labels gpushare writes itself ({labels}): applying the pool would "
    "change which nodes it selects; select nodes by a label gpushare does not manage, such as "
    "alibabacloud.com/nodepool-id",
    fix=SCHEMA_FIX,
    predicate=_managed,
    cel_values={"labels": ", ".join(c.MANAGED_LABELS)},
)

_SHARING_MESSAGE = (
    "nodeSelector must not use labels that NVIDIA's GPU Feature Discovery rewrites when a node's GPUs "
    "are shared ({labels}): sharing appends -SHARED to nvidia.com/gpu.product and changes the "
    "replicas, strategy and MPS labels, so the pool would stop selecting the nodes it shares; select "
    "nodes by a label of your own, the node pool's (such as alibabacloud.com/nodepool-id), or "
    f"{c.LABEL_GPU_PRODUCT} (written by gpushare's node agent; sharing never changes it)"
)

#: Every pool, not only NVIDIA ones: a node moves between backends (an ACK pool selecting by
#: nvidia.com/gpu.product would lose a node whose NVIDIA pool left it -SHARED, and win it back when
#: GFD's next pass drops the suffix), and an ACK pool may become an NVIDIA one by an edit.
REWRITTEN_SELECTOR = SpecRule(
    id="GP001-pool-schema",
    field="nodeSelector",
    cel_on="nodeSelector",
    cel="!(has(self.matchLabels) && '{each}' in self.matchLabels) && "
    "!(has(self.matchExpressions) && self.matchExpressions.exists(e, e.key == '{each}'))",
    message=_SHARING_MESSAGE,
    fix=f"select the nodes by a label sharing does not change, e.g. {c.LABEL_GPU_PRODUCT}",
    predicate=_rewritten,
    cel_values={"labels": ""},
    cel_each=c.NVIDIA_SHARING_LABELS,
)

#: The rules on which labels a nodeSelector may use (the planner re-checks them).
SELECTOR_RULES: tuple[SpecRule, ...] = (MANAGED_SELECTOR, REWRITTEN_SELECTOR)

COMPUTE_WITHOUT_ISOLATION = SpecRule(
    id="GP002-pool-compute-without-isolation",
    field="computeAllocation",
    cel_on="spec",
    cel="!(has(self.computeAllocation) && self.computeAllocation) || !has(self.memoryIsolation) "
    "|| self.memoryIsolation",
    message="computeAllocation: true requires memoryIsolation: true (compute isolation, "
    f"{c.LABEL_SCHEDULE}=core_mem, only exists with cGPU memory isolation)",
    fix="set memoryIsolation: true, or computeAllocation: false",
    predicate=_compute_without_isolation,
)

ONE_BACKEND = SpecRule(
    id="GP001-pool-schema",
    field="nvidia",
    cel_on="spec",
    cel="!has(self.nvidia) || (" + " && ".join(f"!has(self.{f})" for f in ACK_FIELDS) + ")",
    message="a pool has exactly one backend: with nvidia set it takes none of ACK's fields ({fields}); "
    "remove them, or remove nvidia for an ACK pool",
    fix="remove either spec.nvidia or the ACK fields (memoryIsolation, computeAllocation, placement)",
    predicate=_one_backend,
    cel_values={"fields": ", ".join(ACK_FIELDS)},
)

REPLICAS_FIT_STRATEGY = SpecRule(
    id="GP001-pool-schema",
    field="nvidia.replicas",
    cel_on="Nvidia",
    cel="self.strategy in ['None', 'MIG'] ? self.replicas == 1 : self.replicas >= 2",
    message="TimeSlicing and MPS share each GPU between replicas >= 2; strategies None and MIG take "
    "replicas 1 (MIG time-slices its slices by mig.timeSlicing){got}",
    fix="set replicas >= 2, or strategy None (MIG: replicas 1, and mig.timeSlicing)",
    predicate=_replicas_fit_strategy,
    cel_values={"got": ""},
)

#: A MIG profile's name (``gpushare.api.v1alpha1.MIG_PROFILE_RE``; kept here for the rules).
MIG_PROFILE_PATTERN = r"^[1-7]g\.[1-9][0-9]{0,3}gb(\+me)?$"
_MIG_PROFILE = re.compile(MIG_PROFILE_PATTERN)

MIG_ONE_SHARING = SpecRule(
    id="GP001-pool-schema",
    field="nvidia.mig",
    cel_on="Nvidia",
    cel="self.strategy == 'MIG' ? (has(self.mig) && !(has(self.renameByDefault) && self.renameByDefault))"
    " : !has(self.mig)",
    message="a pool has one sharing: strategy MIG shares each GPU by the slices of nvidia.mig (and "
    "time-slices them only by mig.timeSlicing, never renamed), and nvidia.mig is for strategy MIG only{got}",
    fix="set strategy MIG with nvidia.mig (renameByDefault false), or remove nvidia.mig",
    predicate=_mig_one_sharing,
    cel_values={"got": ""},
)

MIG_ONE_SOURCE = SpecRule(
    id="GP001-pool-schema",
    field="nvidia.mig",
    cel_on="Mig",
    cel="has(self.geometry) != has(self.config)",
    message="nvidia.mig takes exactly one of geometry (the slices, which gpushare writes as a mig-parted "
    "config) and config (the name of a config already in the MIG manager's ConfigMap){got}",
    fix="keep either mig.geometry or mig.config",
    predicate=_mig_one_source,
    cel_values={"got": ""},
)

MIG_ONE_ENTRY_PER_MODEL = SpecRule(
    id="GP001-pool-schema",
    field="nvidia.mig.geometry",
    cel_on="Mig",
    cel="!has(self.geometry) || size(self.geometry) == 1 || "
    "self.geometry.all(g, has(g.deviceFilter) && size(g.deviceFilter) > 0)",
    message="an entry of mig.geometry without deviceFilter is for every GPU and stands alone; with several "
    "entries each names the GPU models it is for{got}",
    fix="give each GPU model one entry with its deviceFilter, or keep one entry without",
    predicate=_mig_one_entry_per_model,
    cel_values={"got": ""},
)

MIG_SINGLE_PROFILE = SpecRule(
    id="GP001-pool-schema",
    field="nvidia.mig",
    cel_on="Mig",
    cel="self.strategy != 'single' || !has(self.geometry) || self.geometry.all(g, size(g.profiles) == 1 "
    "&& g.profiles.all(k, k in self.geometry[0].profiles))",
    message="MIG strategy single advertises every slice as " + c.RES_NVIDIA_GPU + ", so every GPU takes "
    "one and the same profile{got}",
    fix="use strategy mixed, or one profile for every GPU",
    predicate=_mig_single_profile,
    cel_values={"got": ""},
)

MIG_SLICED_PROFILES = SpecRule(
    id="GP001-pool-schema",
    field="nvidia.mig.timeSlicing",
    cel_on="Mig",
    cel="!has(self.timeSlicing) || !has(self.geometry) || self.timeSlicing.all(t, "
    "self.geometry.exists(g, t.profile in g.profiles))",
    message="mig.timeSlicing shares only profiles the geometry declares{got}",
    fix="name a profile of mig.geometry, or add it there",
    predicate=_mig_sliced_profiles,
    cel_values={"got": ""},
)

MIG_PROFILE_NAMES = SpecRule(
    id="GP001-pool-schema",
    field="nvidia.mig.geometry[*].profiles",
    cel_on="MigGeometry",
    cel=f"self.profiles.all(k, k.matches('{MIG_PROFILE_PATTERN.replace(chr(92), chr(92) * 2)}'))",
    message="a MIG profile reads <compute slices 1-7>g.<memory>gb, optionally +me, as NVIDIA names "
    "it (1g.5gb, 3g.40gb, 1g.10gb+me){got}",
    fix="write the profile as nvidia-smi mig -lgip lists it",
    predicate=_mig_profile_names,
    cel_values={"got": ""},
)

VALUES_FIT_OPERATOR = SpecRule(
    id="GP001-pool-schema",
    field="matchExpressions[*]",
    cel_on="LabelSelectorRequirement",
    cel="self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0)"
    " : (!has(self.values) || size(self.values) == 0)",
    message="In and NotIn need at least one value; Exists and DoesNotExist take none{got}",
    fix=SCHEMA_FIX,
    predicate=_values_fit_operator,
    cel_values={"got": ""},
)

SPEC_RULES: tuple[SpecRule, ...] = (
    COMPUTE_WITHOUT_ISOLATION,
    EMPTY_SELECTOR,
    MANAGED_SELECTOR,
    REWRITTEN_SELECTOR,
    ONE_BACKEND,
    REPLICAS_FIT_STRATEGY,
    MIG_ONE_SHARING,
    MIG_ONE_SOURCE,
    MIG_ONE_ENTRY_PER_MODEL,
    MIG_SINGLE_PROFILE,
    MIG_SLICED_PROFILES,
    MIG_PROFILE_NAMES,
    VALUES_FIT_OPERATOR,
)


def validations(on: str) -> list[JsonValue]:
    """The CEL rules placed on one schema node (see :attr:`SpecRule.cel_on`)."""
    out: list[JsonValue] = []
    for rule in SPEC_RULES:
        if rule.cel_on == on:
            out.extend(rule.validations())
    return out
