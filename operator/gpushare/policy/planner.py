"""The planner: from pools, nodes and pods to the label patch and actions for every node.

What labels a pool wants, what a mode switch is and which pods it disrupts are the pool's sharing
backend's (``gpushare.backends``); the rules here hold for every backend (docs/concepts/ack-labels.md
has ACK's table and examples):

* A node in exactly one pool gets ``desired_labels(pool)``; the patch holds only keys that change.
* The first write to a node also writes ``ANNOTATION_OWNED`` = ``{"pool", "prior"}``: the value of
  every owned label before gpushare touched it. Moving a node to another pool keeps that prior.
* A node we own that no longer belongs to its pool (selector or labels changed, pool gone or
  deleted with ``cleanup: Restore``) gets the backend's reading of its prior values back
  (``SharingBackend.restored``). ``cleanup: Retain`` leaves the backend's labels and removes only
  ``gpushare.io/pool`` and the ownership annotation.
* ``gpushare.io/skip=true`` → untouched (Skip). Two or more pools → untouched (Conflict).
* A mode change the backend says disrupts running GPU pods (``SharingBackend.disrupts``), while
  pods holding a shared GPU run on the node, is a blocked mode switch: ``rollout.modeSwitch``
  decides (Wait/Cordon/Evict hold it, Force applies).
* A change of a label the device plugin reads writes ``ANNOTATION_PLUGIN_RESTART`` (state Pending)
  in the same patch, so a restarted operator resumes the restart instead of repeating it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from gpushare import constants as c
from gpushare.api.loan import LoanRecord
from gpushare.api.rules import SELECTOR_RULES
from gpushare.api.v1alpha1 import GPUSharePool, GPUSharePoolSpec, Rollout
from gpushare.backends import BACKENDS, DEFAULT, OWNED_LABELS, SharingBackend, backend_for
from gpushare.policy import conditions as cond
from gpushare.policy.views import NodeView, PodView, pods_by_node

ModeSwitchPolicy = Literal["Wait", "Cordon", "Evict", "Force"]
RestartState = Literal["Pending", "Done", "Failed", "Skipped"]

_OWED = ("Pending", "Failed")


class Action(StrEnum):
    APPLY = "Apply"
    RESTORE = "Restore"
    RETAIN = "Retain"
    NOOP = "Noop"
    SKIP = "Skip"
    CONFLICT = "Conflict"
    HOLD = "Hold"


def _iso(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.lru_cache(maxsize=16)
def restart_since(now: datetime) -> str:
    """``since`` for a restart owed from ``now``: the next full second.

    Pod ``creationTimestamp`` has one-second resolution, so a plugin pod created in the same
    second as the label write could have started before or after it. Rounding up makes every such
    pod "old" (it is replaced); the operator deletes old pods only once the clock has passed
    ``since``, so the replacements it causes are always "new" and never deleted twice.
    """
    return _iso(now.replace(microsecond=0) + timedelta(seconds=1))


def _dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Ownership:
    """``ANNOTATION_OWNED``: the pool that owns the node and the managed labels it replaced."""

    pool: str
    prior: Mapping[str, str | None]
    readable: bool = True

    @classmethod
    def capture(cls, pool: str, labels: Mapping[str, str]) -> Ownership:
        return cls(pool=pool, prior={key: labels.get(key) for key in OWNED_LABELS})

    @classmethod
    def parse(cls, raw: str | None) -> Ownership | None:
        """None when absent; an unreadable annotation still means "ours", with no known prior."""
        return None if raw is None else _parse_owned(raw)

    @classmethod
    def _parse(cls, raw: str) -> Ownership:
        try:
            data = json.loads(raw)
            pool = data["pool"]
            prior_raw = data.get("prior") or {}
            if not isinstance(pool, str) or not isinstance(prior_raw, dict):
                raise TypeError("bad shape")
            prior = {
                key: (str(prior_raw[key]) if prior_raw.get(key) is not None else None) for key in OWNED_LABELS
            }
        except (ValueError, KeyError, TypeError):
            return cls(pool="", prior=dict.fromkeys(OWNED_LABELS), readable=False)
        return cls(pool=pool, prior=prior)

    def dump(self) -> str:
        return _dump_owned(self.pool, tuple(self.prior.get(key) for key in OWNED_LABELS))


# The planner reads each node's annotations on every plan; a fleet's nodes share a handful of
# values (one per pool and prior labels), so each is parsed and written once, not once per plan.
# The results are frozen dataclasses and read-only by convention.
@functools.lru_cache(maxsize=4096)
def _parse_owned(raw: str) -> Ownership:
    return Ownership._parse(raw)


@functools.lru_cache(maxsize=4096)
def _dump_owned(pool: str, prior: tuple[str | None, ...]) -> str:
    return _dump({"pool": pool, "prior": dict(zip(OWNED_LABELS, prior, strict=True))})


@dataclass(frozen=True)
class RestartRecord:
    """``ANNOTATION_PLUGIN_RESTART``: which plugin-relevant labels the device plugin has (to) see(n).

    ``hash`` identifies the 4 plugin label values; ``since`` is when they were written: plugin pods
    created before it must be replaced. ``state``: Pending (restart owed), Done (a plugin pod
    created after ``since`` is Ready, or there was none to restart), Failed (timed out),
    Skipped (the pool says ``devicePlugin.restart: Never``). ``pool`` is who owes the restart;
    ``backend`` whose plugin it is (absent for ACK's, as written before there were two), so that a
    restore owed by a pool that is gone is still done the backend's way.
    """

    hash: str
    since: str
    state: RestartState
    pool: str
    result: str = ""
    backend: str = ""

    @classmethod
    def parse(cls, raw: str | None) -> RestartRecord | None:
        return None if raw is None else _parse_restart(raw)

    @classmethod
    def _parse(cls, raw: str) -> RestartRecord | None:
        try:
            data = json.loads(raw)
            state = data["state"]
            if state not in ("Pending", "Done", "Failed", "Skipped"):
                return None
            return cls(
                hash=str(data["hash"]),
                since=str(data.get("since", "")),
                state=state,
                pool=str(data.get("pool", "")),
                result=str(data.get("result", "")),
                backend=str(data.get("backend", "")),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def dump(self) -> str:
        body: dict[str, str] = {
            "hash": self.hash,
            "since": self.since,
            "state": self.state,
            "pool": self.pool,
        }
        if self.result:
            body["result"] = self.result
        if self.backend:
            body["backend"] = self.backend
        return _dump(body)

    @property
    def pending(self) -> bool:
        return self.state == "Pending"


@functools.lru_cache(maxsize=4096)
def _parse_restart(raw: str) -> RestartRecord | None:
    return RestartRecord._parse(raw)


def plugin_labels_hash(labels: Mapping[str, str | None], backend: SharingBackend = DEFAULT) -> str:
    """A short stable hash of the label values the backend's device plugin reads."""
    return _values_hash(tuple(labels.get(key) for key in backend.plugin_labels))


@functools.lru_cache(maxsize=1024)
def _values_hash(values: tuple[str | None, ...]) -> str:
    # A fleet has a handful of label combinations: hashed once each, not once per node and plan.
    return hashlib.sha256(_dump(list(values)).encode()).hexdigest()[:16]


def desired_labels(spec: GPUSharePoolSpec, pool_name: str) -> dict[str, str]:
    """The labels of a node in the pool: its backend's owned labels and ``gpushare.io/pool``."""
    return {**backend_for(spec).labels_for(spec), c.LABEL_POOL: pool_name}


def restore_labels(
    prior: Mapping[str, str | None], backend: SharingBackend = DEFAULT
) -> dict[str, str | None]:
    """The owned labels after Restore: the backend's reading of their prior values (None = absent),
    and ``gpushare.io/pool``'s."""
    return {**backend.restored(prior), c.LABEL_POOL: prior.get(c.LABEL_POOL)}


def selector_problem(spec: GPUSharePoolSpec) -> str | None:
    """Why a pool's nodeSelector cannot be planned, or None.

    A selector on a label gpushare writes, or on one NVIDIA's GPU Feature Discovery rewrites
    because of sharing, would change membership by applying the pool (a node selected by
    ``<owned label> DoesNotExist`` would leave the pool as soon as it is labelled; one selected by
    ``nvidia.com/gpu.product`` as soon as GFD appends ``-SHARED``). parse_pool rejects such
    selectors (:data:`gpushare.api.rules.SELECTOR_RULES`); a pool built without them (stored
    before a rule existed, or constructed in code) is ignored here by the same rules.
    """
    requirements = spec.node_selector.requirements()
    for rule in SELECTOR_RULES:
        problem = rule.problem(requirements)
        if problem is not None:
            return f"spec.{rule.field}: {problem}"
    return None


def _diff(current: Mapping[str, str], target: Mapping[str, str | None]) -> dict[str, str | None]:
    return {key: value for key, value in target.items() if current.get(key) != value}


@dataclass(frozen=True)
class NodePlan:
    """What gpushare does to one node. Patches are minimal; ``None`` deletes a key."""

    node: str
    pool: str | None
    action: Action
    label_patch: Mapping[str, str | None] = field(default_factory=dict)
    annotation_patch: Mapping[str, str | None] = field(default_factory=dict)
    #: ``spec.unschedulable``: True to cordon, None to uncordon (only what gpushare cordoned).
    unschedulable_patch: bool | None = None
    uncordon: bool = False
    restart_plugin: bool = False
    mode_switch: tuple[str, str] | None = None
    blocking_pods: tuple[PodView, ...] = ()
    hold: ModeSwitchPolicy | None = None
    conflict_pools: tuple[str, ...] = ()
    reason: str = ""
    message: str = ""
    owner: str | None = None
    drift: bool = False
    #: The restart record as it is once this plan's patch is written.
    plugin_restart: RestartRecord | None = None
    #: gpushare restarted the node's device plugin for the labels it has now (record Done or
    #: Failed), and the node does not advertise the mode those labels say yet: it is still
    #: unavailable, and counts against ``rollout.maxUnavailable`` (policy.rollout).
    awaiting_mode: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.label_patch or self.annotation_patch or self.cordon or self.uncordon)

    @property
    def cordon(self) -> bool:
        return self.unschedulable_patch is True

    @property
    def plugin_restart_pending(self) -> bool:
        return self.plugin_restart is not None and self.plugin_restart.pending

    @property
    def force(self) -> bool:
        """A blocked mode switch applied anyway (``modeSwitch: Force``): warn."""
        return self.hold == "Force"

    @property
    def evict_pods(self) -> tuple[PodView, ...]:
        """Pods to evict (``modeSwitch: Evict``), once the node is cordoned."""
        return self.blocking_pods if self.hold == "Evict" else ()

    def node_patch(self) -> dict[str, Any]:
        """One merge patch with labels, annotations and cordon state together ({} = nothing)."""
        meta: dict[str, Any] = {}
        if self.label_patch:
            meta["labels"] = dict(self.label_patch)
        if self.annotation_patch:
            meta["annotations"] = dict(self.annotation_patch)
        patch: dict[str, Any] = {"metadata": meta} if meta else {}
        if self.cordon:
            patch["spec"] = {"unschedulable": True}
        elif self.uncordon:
            patch["spec"] = {"unschedulable": None}
        return patch


@dataclass(frozen=True)
class ClusterPlan:
    nodes: tuple[NodePlan, ...]
    #: Pools whose spec cannot be planned: name → why. Nodes they own are left as they are.
    invalid_pools: Mapping[str, str] = field(default_factory=dict)

    def for_pool(self, name: str) -> list[NodePlan]:
        """Plans the pool acts on or reports: its nodes, nodes leaving it, its conflicts, and nodes
        whose plugin restart it still owes (e.g. restored ones)."""
        return [
            p
            for p in self.nodes
            if p.pool == name
            or name in p.conflict_pools
            or (
                p.plugin_restart is not None
                and p.plugin_restart.pool == name
                and p.plugin_restart.state in _OWED
            )
        ]

    def changes(self) -> list[NodePlan]:
        return [p for p in self.nodes if p.changed]

    def by_node(self) -> dict[str, NodePlan]:
        return {p.node: p for p in self.nodes}


def _node_obj_uncordon(node: NodeView) -> bool:
    return c.ANNOTATION_CORDONED_BY in node.annotations


def awaiting_mode(node: NodeView, record: RestartRecord | None, backend: SharingBackend = DEFAULT) -> bool:
    """Whether the node's device plugin was restarted by gpushare for the labels it carries now
    (record Done or Failed, same label hash) and the node does not advertise their mode yet.

    A Pending record is a restart still under way (counted as such); Skipped means
    ``devicePlugin.restart: Never`` (gpushare disrupts nothing there). See
    ``SharingBackend.advertises``.
    """
    if record is None or record.state not in ("Done", "Failed"):
        return False
    if record.hash != plugin_labels_hash(node.labels, backend):
        return False
    return not backend.advertises(
        backend.mode_of(node.labels), node.allocatable, node.labels, node.annotations, node.label_times
    )


@dataclass(frozen=True)
class _Target:
    pool: str
    labels: Mapping[str, str | None]
    rollout: Rollout
    restart_policy: Literal["Rolling", "Never"]
    backend: SharingBackend
    #: The backend the node leaves for ``backend`` (a move between pools of two backends): its
    #: labels are restored in the same patch, and its pods are disrupted too.
    leaving: SharingBackend | None = None


def _blocking(pods: Iterable[PodView], backends: Iterable[SharingBackend]) -> tuple[PodView, ...]:
    """The running pods a mode switch of their node would disrupt (holding what any of
    ``backends`` shares)."""
    bs = tuple(backends)
    held = (p for p in pods if not p.terminated and any(b.holds_shared_gpu(p.requests) for b in bs))
    return tuple(sorted(held, key=lambda p: p.ref))


def changed_by(labels: Mapping[str, str], prior: Mapping[str, str | None]) -> list[SharingBackend]:
    """The backends whose labels on a node differ from what restoring ``prior`` would put back:
    those that labelled it (for a node whose pool is gone, and so cannot say). Where some owned
    labels are no longer as they were, only the backends owning one of them, first those that own
    them all (two backends may share a label: the one owning every changed one wrote them); else
    those whose mode label the node carries or carried."""
    changed = [b for b in BACKENDS.values() if any(labels.get(k) != v for k, v in b.restored(prior).items())]
    moved = {k for k in OWNED_LABELS if k != c.LABEL_POOL and labels.get(k) != prior.get(k)}
    owning = [b for b in changed if moved & set(b.owned_labels)]
    if owning:
        return sorted(owning, key=lambda b: not moved <= set(b.owned_labels))
    return [b for b in changed if labels.get(b.mode_label) is not None or prior.get(b.mode_label) is not None]


def _change(
    node: NodeView,
    action: Action,
    target: _Target,
    *,
    owned: Ownership | None,
    new_owner: Ownership | None,
    record: RestartRecord | None,
    pods: Sequence[PodView],
    now: str,
    reason: str,
    message: str,
) -> NodePlan:
    """Shared by Apply and Restore: guard mode switches, patch labels, owe a plugin restart."""
    label_patch = _diff(node.labels, target.labels)
    annotations: dict[str, str | None] = {}
    if new_owner is None:
        annotations[c.ANNOTATION_OWNED] = None
    elif owned is None or not owned.readable or owned.pool != new_owner.pool:
        annotations[c.ANNOTATION_OWNED] = new_owner.dump()

    backend = target.backend
    old_mode, new_mode = backend.mode_of(node.labels), backend.mode_of(target.labels)
    mode_switch = (old_mode, new_mode) if old_mode != new_mode else None
    disrupting = target.leaving is not None or (
        mode_switch is not None and backend.disrupts(old_mode, new_mode)
    )
    if target.leaving is not None and mode_switch is None:
        mode_switch = (f"{target.leaving.name}:{target.leaving.mode_of(node.labels)}", new_mode)
    leaving = (target.leaving,) if target.leaving is not None else ()
    blocking = _blocking(pods, (backend, *leaving)) if disrupting else ()
    hold: ModeSwitchPolicy | None = None
    common: dict[str, Any] = {
        "node": node.name,
        "pool": target.pool,
        "owner": owned.pool if owned else None,
        "mode_switch": mode_switch,
        "blocking_pods": blocking,
    }
    if blocking:
        hold = target.rollout.mode_switch
        if hold != "Force":
            cordon = hold in ("Cordon", "Evict") and not node.unschedulable
            cordon_ann: dict[str, str | None] = {c.ANNOTATION_CORDONED_BY: target.pool} if cordon else {}
            names = ", ".join(p.ref for p in blocking)
            verb = {"Wait": "waiting for", "Cordon": "cordoned, waiting for", "Evict": "evicting"}[hold]
            return NodePlan(
                action=Action.HOLD,
                hold=hold,
                annotation_patch=cordon_ann,
                unschedulable_patch=True if cordon else None,
                reason=cond.NODE_MODE_SWITCH_BLOCKED,
                message=(
                    f"{backend.mode_label} {old_mode} -> {new_mode} is blocked by {len(blocking)} pod(s) "
                    f"using {backend.shared_resource} (modeSwitch {hold}: {verb} {names})"
                ),
                plugin_restart=record,
                **common,
            )

    after = {**node.labels, **{k: v for k, v in label_patch.items() if v is not None}}
    for key, value in label_patch.items():
        if value is None:
            after.pop(key, None)
    new_hash = plugin_labels_hash(after, backend)
    plugin_changed = any(key in label_patch for key in backend.plugin_labels)
    tag = "" if backend is DEFAULT else backend.name
    restart = False
    new_record = record
    if plugin_changed:
        if target.restart_policy == "Never":
            new_record = RestartRecord(new_hash, now, "Skipped", target.pool, "RestartNever", tag)
        elif record is not None and record.hash == new_hash and record.state in ("Done", "Pending"):
            # The plugin already saw (or is about to see) exactly these values.
            new_record = record
        else:
            restart = True
            new_record = RestartRecord(new_hash, now, "Pending", target.pool, backend=tag)
    elif action is Action.APPLY and owned is None and (record is None or record.hash != new_hash):
        # Adopted with the plugin labels already right: nothing to restart.
        new_record = RestartRecord(new_hash, now, "Done", target.pool, "Adopted", tag)
    elif (
        target.restart_policy == "Rolling"
        and record is not None
        and record.state == "Skipped"
        and record.hash == new_hash
    ):
        # Labelled under `devicePlugin.restart: Never`, now Rolling: the plugin never saw these
        # labels, so the restart that was skipped is owed now.
        restart = True
        new_record = RestartRecord(new_hash, now, "Pending", target.pool, backend=tag)
        if not label_patch:
            reason, message = "PluginRestartOwed", "restarting the device plugin skipped under restart Never"
    if new_owner is None and (new_record is None or not new_record.pending):
        # Leaving gpushare (Restore) with no plugin restart to wait for: no record stays behind.
        if c.ANNOTATION_PLUGIN_RESTART in node.annotations:
            annotations[c.ANNOTATION_PLUGIN_RESTART] = None
        new_record = None
    elif new_record is not record and new_record is not None:
        annotations[c.ANNOTATION_PLUGIN_RESTART] = new_record.dump()

    for b in (backend, *leaving):
        # A backend's record of the switch, in the same patch as its labels (or dropped as it leaves).
        staying = b is backend and new_owner is not None
        annotations.update(
            b.switch_annotations(node.labels, node.annotations, label_patch, now, staying=staying)
        )

    uncordon = False
    if _node_obj_uncordon(node) and not (new_record is not None and new_record.pending):
        uncordon = True
        annotations[c.ANNOTATION_CORDONED_BY] = None
    if not label_patch and not annotations and not uncordon:
        action = Action.NOOP
        reason, message = "UpToDate", "labels are as the pool wants"
    return NodePlan(
        action=action,
        label_patch=label_patch,
        annotation_patch=annotations,
        uncordon=uncordon,
        restart_plugin=restart,
        hold="Force" if blocking else None,
        reason=reason if not blocking else "ModeSwitchForced",
        message=message
        if not blocking
        else (
            f"{backend.mode_label} {old_mode} -> {new_mode} forced with {len(blocking)} pod(s) using "
            f"{backend.shared_resource} still running ({', '.join(p.ref for p in blocking)})"
        ),
        plugin_restart=new_record,
        drift=bool(
            action is Action.APPLY
            and owned is not None
            and owned.pool == target.pool
            and label_patch
            and (
                record is None
                or record.hash != plugin_labels_hash(node.labels, backend)
                or c.LABEL_POOL in label_patch
            )
        ),
        **common,
    )


def _untouched(
    node: NodeView,
    action: Action,
    pool: str | None,
    owned: Ownership | None,
    record: RestartRecord | None,
    reason: str,
    message: str,
    conflict_pools: tuple[str, ...] = (),
) -> NodePlan:
    return NodePlan(
        node=node.name,
        pool=pool,
        action=action,
        owner=owned.pool if owned else None,
        plugin_restart=record,
        reason=reason,
        message=message,
        conflict_pools=conflict_pools,
    )


def _owner_backend(owned: Ownership, pools: Mapping[str, GPUSharePool], node: NodeView) -> SharingBackend:
    """The backend of the pool that owns the node (read from its labels when that pool is gone)."""
    owner = pools.get(owned.pool)
    if owner is not None:
        return backend_for(owner.spec)
    return next(iter(changed_by(node.labels, owned.prior)), DEFAULT)


def _plan_node(
    node: NodeView,
    active: Sequence[GPUSharePool],
    pools: Mapping[str, GPUSharePool],
    deleting: Collection[str],
    invalid: Mapping[str, str],
    pods: Sequence[PodView],
    now: str,
) -> NodePlan:
    owned = Ownership.parse(node.annotations.get(c.ANNOTATION_OWNED))
    record = RestartRecord.parse(node.annotations.get(c.ANNOTATION_PLUGIN_RESTART))
    matching = [p for p in active if p.spec.node_selector.matches(node.labels)]

    if node.labels.get(c.LABEL_SKIP) == "true":
        shown = owned.pool if owned and owned.pool else (matching[0].name if len(matching) == 1 else None)
        return _untouched(
            node, Action.SKIP, shown, owned, record, "SkipLabel", f"node is labelled {c.LABEL_SKIP}=true"
        )
    if owned is not None and owned.pool in invalid:
        return _untouched(
            node,
            Action.NOOP,
            owned.pool,
            owned,
            record,
            cond.NODE_POOL_INVALID,
            f"left as is while GPUSharePool/{owned.pool} is invalid: {invalid[owned.pool]}",
        )
    loan = LoanRecord.parse(node.annotations.get(c.ANNOTATION_LOAN))
    if loan is not None and len(matching) == 1 and matching[0].name == loan.lender:
        borrower = next((p for p in active if p.name == loan.borrower and p.name != loan.lender), None)
        if borrower is not None:
            matching = [borrower]  # lent: the borrower's node while the loan stands
    if len(matching) >= 2:
        names = tuple(sorted(p.name for p in matching))
        return _untouched(
            node,
            Action.CONFLICT,
            None,
            owned,
            record,
            "MultiplePools",
            f"selected by {len(names)} pools ({', '.join(names)}); none of them changes it",
            conflict_pools=names,
        )
    if len(matching) == 1:
        pool = matching[0]
        moving = owned is not None and owned.pool != pool.name
        new_owner = (
            Ownership(pool.name, owned.prior)
            if owned is not None
            else Ownership.capture(pool.name, node.labels)
        )
        if moving and owned is not None:
            reason, message = "MovedPool", f"moves from pool {owned.pool or '<unknown>'} to {pool.name}"
        elif owned is None:
            reason, message = "Adopted", f"joins pool {pool.name}"
        else:
            reason, message = cond.NODE_LABELS_CHANGED, f"labels differ from what pool {pool.name} wants"
        backend = backend_for(pool.spec)
        wanted: dict[str, str | None] = dict(desired_labels(pool.spec, pool.name))
        before = _owner_backend(owned, pools, node) if moving and owned is not None else backend
        if before is not backend:
            # Leaving another backend's pool: its labels go back to their prior values together.
            wanted = {**restore_labels(new_owner.prior, before), **wanted}
        plan = _change(
            node,
            Action.APPLY,
            _Target(
                pool.name,
                wanted,
                pool.spec.rollout,
                pool.spec.device_plugin.restart,
                backend,
                leaving=before if before is not backend else None,
            ),
            owned=owned,
            new_owner=new_owner,
            record=record,
            pods=pods,
            now=now,
            reason=reason,
            message=message,
        )
        if plan.drift:
            plan = replace(plan, reason="DriftCorrected", message="managed labels were edited by hand")
        if plan.action in (Action.APPLY, Action.NOOP) and awaiting_mode(node, record, backend):
            plan = replace(plan, awaiting_mode=True)
        return plan
    if owned is None:
        # Not ours and in no pool. Still give back a cordon we made (e.g. a restore finished).
        if _node_obj_uncordon(node) and not (record is not None and record.pending):
            return NodePlan(
                node=node.name,
                pool=None,
                action=Action.NOOP,
                annotation_patch={c.ANNOTATION_CORDONED_BY: None},
                uncordon=True,
                plugin_restart=record,
                reason="Uncordoned",
                message="gpushare no longer needs the cordon it made",
            )
        return _untouched(node, Action.NOOP, None, None, record, "NotSelected", "in no pool")

    owner = pools.get(owned.pool)
    if owner is not None and owned.pool in deleting and owner.spec.cleanup == "Retain":
        labels: dict[str, str | None] = {c.LABEL_POOL: None} if c.LABEL_POOL in node.labels else {}
        if owned.prior.get(c.LABEL_POOL) is not None:
            labels = _diff(node.labels, {c.LABEL_POOL: owned.prior[c.LABEL_POOL]})
        released: dict[str, str | None] = {c.ANNOTATION_OWNED: None}
        if record is not None and not record.pending:
            # The restarts this pool made are over: nothing of it stays on the node.
            released[c.ANNOTATION_PLUGIN_RESTART] = None
        return NodePlan(
            node=node.name,
            pool=owned.pool,
            action=Action.RETAIN,
            owner=owned.pool,
            label_patch=labels,
            annotation_patch=released,
            plugin_restart=record,
            reason="Retained",
            message=f"pool {owned.pool} is deleted with cleanup Retain: its sharing labels stay",
        )
    if owner is None:
        reason, message = "PoolGone", f"pool {owned.pool or '<unknown>'} no longer exists"
    elif owned.pool in deleting:
        reason, message = "PoolDeleted", f"pool {owned.pool} is being deleted (cleanup Restore)"
    else:
        reason, message = "LeftSelector", f"no longer selected by pool {owned.pool}"
    return _change(
        node,
        Action.RESTORE,
        _Target(
            owned.pool,
            restore_labels(owned.prior, _owner_backend(owned, pools, node)),
            owner.spec.rollout if owner else Rollout(),
            owner.spec.device_plugin.restart if owner else "Rolling",
            _owner_backend(owned, pools, node),
        ),
        owned=owned,
        new_owner=None,
        record=record,
        pods=pods,
        now=now,
        reason=reason,
        message=message,
    )


#: Labels that name a single node. The planner reads them only through a pool's selector, so
#: :class:`PlanMemo` leaves them out of a node's key unless a selector names them.
IDENTITY_LABELS: frozenset[str] = frozenset({c.LABEL_HOSTNAME})
#: The annotations the planner reads (a test holds this list against the code). Others, such as
#: the agent's per-node GPU inventory, stay out of :class:`PlanMemo`'s key.
PLANNED_ANNOTATIONS: tuple[str, ...] = (
    c.ANNOTATION_OWNED,
    c.ANNOTATION_PLUGIN_RESTART,
    c.ANNOTATION_CORDONED_BY,
    c.ANNOTATION_LOAN,
)


class PlanMemo:
    """The plans of nodes alike in everything the planner reads but their name.

    A fleet is made of a few kinds of node. Each kind is planned once, and every node of that kind
    gets a copy named after it, until the inputs change. The inputs are the pools, those being
    deleted and the invalid ones. A node's key holds the restart clock, its labels (but for
    :data:`IDENTITY_LABELS` that no selector names), :data:`PLANNED_ANNOTATIONS`, its cordon,
    readiness, allocatable and capacity. Pods matter to a plan only as pods that block a mode
    switch (``_blocking``), named in it: a node with such pods is always planned. Pass one memo to
    :func:`plan` call after call; the result is the same as without it (a property test checks
    this).
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._inputs: tuple[tuple[GPUSharePool, ...], frozenset[str], dict[str, str]] | None = None
        self._ignored: frozenset[str] = frozenset()
        self._plans: dict[tuple[object, ...], NodePlan] = {}

    def bind(self, pools: Sequence[GPUSharePool], deleting: Collection[str], bad: Mapping[str, str]) -> None:
        """Keep the plans made for these inputs; forget them for any other."""
        models, gone = tuple(pools), frozenset(deleting)
        last = self._inputs
        if (
            last is not None
            and len(last[0]) == len(models)
            and all(a is b or a == b for a, b in zip(last[0], models, strict=True))
            and last[1] == gone
            and last[2] == bad
        ):
            return
        self._inputs = (models, gone, dict(bad))
        self._plans = {}
        named = {k for p in models for k in p.spec.node_selector.match_labels}
        named |= {r.key for p in models for r in p.spec.node_selector.match_expressions}
        self._ignored = IDENTITY_LABELS - named

    def key(self, node: NodeView, stamp: str) -> tuple[object, ...]:
        """What the planner reads of ``node``, and the restart clock (passes that began in another
        second plan with theirs, side by side)."""
        ignored = self._ignored
        labels = node.labels
        return (
            stamp,
            frozenset(kv for kv in labels.items() if kv[0] not in ignored)
            if ignored and not ignored.isdisjoint(labels)
            else frozenset(labels.items()),
            tuple(map(node.annotations.get, PLANNED_ANNOTATIONS)),
            node.unschedulable,
            node.ready,
            frozenset(node.allocatable.items()),
            frozenset(node.capacity.items()),
        )

    def get(self, key: tuple[object, ...], node: str) -> NodePlan | None:
        found = self._plans.get(key)
        if found is None:
            return None
        return found if found.node == node else replace(found, node=node)

    def put(self, key: tuple[object, ...], p: NodePlan) -> None:
        if len(self._plans) >= self.size:
            self._plans.clear()
        self._plans[key] = p


def plan(
    pools: Sequence[GPUSharePool],
    nodes: Iterable[NodeView],
    pods: Iterable[PodView] = (),
    *,
    now: datetime,
    deleting: Collection[str] = frozenset(),
    invalid: Mapping[str, str] | None = None,
    memo: PlanMemo | None = None,
) -> ClusterPlan:
    """Plan every node. ``deleting``: pools being deleted (their nodes are restored or retained);
    ``invalid``: pools that failed validation (name → why; the nodes they own stay as they are);
    ``memo``: plans of nodes alike but for their name, kept from call to call (:class:`PlanMemo`).
    """
    bad = dict(invalid or {})
    for pool in pools:
        problem = selector_problem(pool.spec) or backend_for(pool.spec).spec_problem(pool.spec)
        if problem:
            bad[pool.name] = problem
    by_name = {p.name: p for p in pools}
    active = [p for p in pools if p.name not in deleting and p.name not in bad]
    on_node = pods_by_node(pods)
    stamp = restart_since(now)
    if memo is not None:
        memo.bind(pools, deleting, bad)
    out = []
    for node in sorted(nodes, key=lambda n: n.name):
        on = on_node.get(node.name, ())
        # Without a memo, or with pods that may hold a mode switch (named in the plan): planned.
        if memo is None or (on and _blocking(on, BACKENDS.values())):
            out.append(_plan_node(node, active, by_name, deleting, bad, on, stamp))
            continue
        key = memo.key(node, stamp)
        p = memo.get(key, node.name)
        if p is None:
            p = _plan_node(node, active, by_name, deleting, bad, (), stamp)
            memo.put(key, p)
        out.append(p)
    return ClusterPlan(nodes=tuple(out), invalid_pools=bad)


def restart_outcome_patch(node: NodeView | None, updated: RestartRecord) -> dict[str, Any]:
    """The node patch that records how an owed plugin restart ended (``updated``).

    On a node no pool owns any more (restored, or released with ``cleanup: Retain``), a restart
    that is Done is the last thing gpushare had to do there: instead of recording it, the patch
    removes ``ANNOTATION_PLUGIN_RESTART``, and a cordon gpushare made (``ANNOTATION_CORDONED_BY``)
    is given back, so that nothing gpushare wrote names the pool that is gone. A Failed restart
    stays recorded (the pool, or the first live pool for a deleted one, reports it until a plugin
    gets Ready there).
    """
    annotations: dict[str, str | None] = {c.ANNOTATION_PLUGIN_RESTART: updated.dump()}
    patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
    if node is None or updated.state != "Done" or c.ANNOTATION_OWNED in node.annotations:
        return patch
    annotations[c.ANNOTATION_PLUGIN_RESTART] = None
    if c.ANNOTATION_CORDONED_BY in node.annotations:
        annotations[c.ANNOTATION_CORDONED_BY] = None
        patch["spec"] = {"unschedulable": None}
    return patch


def apply_node_patch(node: NodeView, node_plan: NodePlan) -> NodeView:
    """The node as the apiserver would return it after ``node_plan.node_patch()`` (merge patch)."""
    labels = dict(node.labels)
    for key, value in node_plan.label_patch.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    annotations = dict(node.annotations)
    for key, value in node_plan.annotation_patch.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    unschedulable = node.unschedulable
    if node_plan.cordon:
        unschedulable = True
    elif node_plan.uncordon:
        unschedulable = False
    return replace(node, labels=labels, annotations=annotations, unschedulable=unschedulable)
