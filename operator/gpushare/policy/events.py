"""The Events of a reconcile pass (pure): what to post about the pool and its nodes, and when.

Write Events are aggregated per pass (one per kind, listing the nodes); hold, conflict and
invalid-spec Events go out once per change of what they report (:class:`Reported` is that
memory, passed in and returned). The reconciler only posts what these functions return.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpushare.backends import DEFAULT, SharingBackend
from gpushare.policy import conditions as reasons
from gpushare.policy.planner import Action, NodePlan

#: Nodes named in one Event message (then "and N more").
LIST_MAX = 8


@dataclass(frozen=True)
class Event:
    """A core/v1 Event about the pool (``node`` None) or about one node."""

    reason: str
    message: str
    type: str = "Normal"
    node: str | None = None


@dataclass(frozen=True)
class Reported:
    """What a pool's Events last reported: held nodes, conflicting nodes, the invalid-spec reason."""

    held: frozenset[str] = frozenset()
    conflicts: frozenset[str] = frozenset()
    invalid: str | None = None
    #: (node, reason) of the nodes named with a failed switch (``SharingBackend.switch_reasons``).
    switches: frozenset[tuple[str, str]] = frozenset()


def names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:LIST_MAX])
    return shown + (f" and {len(items) - LIST_MAX} more" if len(items) > LIST_MAX else "")


def label_changes(patch: Mapping[str, str | None]) -> str:
    """A label patch as a person reads it, by key: ``key=value`` for a label set, ``removed key``
    for one removed (``a=1, removed b``)."""
    return ", ".join(
        f"removed {key}" if value is None else f"{key}={value}" for key, value in sorted(patch.items())
    )


def write_events(
    pool: str, mode: str, done: Sequence[NodePlan], backend: SharingBackend = DEFAULT
) -> list[Event]:
    """The Events of the node patches a pass made (``done``, in rollout order) in a pool of
    ``backend``."""
    out: list[Event] = []
    labelled = [p.node for p in done if p.label_patch and p.action is Action.APPLY and not p.drift]
    if labelled:
        out.append(
            Event("LabelsApplied", f"Applied {mode} labels to {len(labelled)} node(s): {names(labelled)}")
        )
    restored = [p.node for p in done if p.action in (Action.RESTORE, Action.RETAIN)]
    if restored:
        out.append(
            Event("LabelsRestored", f"Restored the labels of {len(restored)} node(s): {names(restored)}")
        )
    drift = [p for p in done if p.drift]
    if drift:
        detail = "; ".join(f"{p.node}: {label_changes(p.label_patch)}" for p in drift[:LIST_MAX])
        more = f" and {len(drift) - LIST_MAX} more" if len(drift) > LIST_MAX else ""
        msg = f"Put back managed labels edited by hand on {len(drift)} node(s): {detail}{more}"
        out.append(Event("DriftCorrected", msg, "Warning"))
        if len(drift) == 1:
            out.append(Event("DriftCorrected", msg, "Warning", node=drift[0].node))
    forced = [p for p in done if p.force]
    if forced:
        msg = (
            f"Forced {backend.mode_label} switch on {len(forced)} node(s) with GPU pods running: "
            + "; ".join(f"{p.node}: {p.message}" for p in forced[:3])
        )
        out.append(Event("ModeSwitchForced", msg, "Warning"))
    for verb, picked in (
        ("Cordoned", [p.node for p in done if p.cordon]),
        ("Uncordoned", [p.node for p in done if p.uncordon]),
    ):
        if not picked:
            continue
        why = " for a GPU mode switch" if verb == "Cordoned" else ""
        if len(picked) == 1:
            out.append(Event(verb, f"{verb} by GPUSharePool {pool}{why}", node=picked[0]))
        out.append(Event(verb, f"{verb} {len(picked)} node(s){why}: {names(picked)}"))
    return out


def restart_events(restarted: Sequence[str], failed: Sequence[str]) -> list[Event]:
    """The Events of the plugin restarts a pass recorded (Done, Failed)."""
    out: list[Event] = []
    if restarted:
        shown = names(sorted(restarted))
        out.append(
            Event("DevicePluginRestarted", f"Device plugin restarted on {len(restarted)} node(s): {shown}")
        )
    if failed:
        out.append(
            Event(
                reasons.NODE_PLUGIN_NOT_READY,
                f"No Ready device plugin pod on {names(sorted(failed))}",
                "Warning",
            )
        )
    return out


def transition_events(pool: str, plans: Sequence[NodePlan], before: Reported) -> tuple[list[Event], Reported]:
    """Events for nodes newly held or newly in conflict (once per change of the set, not every pass)."""
    out: list[Event] = []
    held = {p.node: p for p in plans if p.pool == pool and p.action is Action.HOLD}
    new_held = sorted(set(held) - before.held)
    if new_held:
        detail = "; ".join(f"{n}: {held[n].message}" for n in new_held[:3])
        more = f" and {len(new_held) - 3} more" if len(new_held) > 3 else ""
        out.append(Event("NodeHeld", f"{len(new_held)} node(s) held: {detail}{more}", "Warning"))
    conflicts = {p.node: p for p in plans if pool in p.conflict_pools}
    new_conflicts = sorted(set(conflicts) - before.conflicts)
    if new_conflicts:
        detail = "; ".join(
            f"{n} (also {', '.join(x for x in conflicts[n].conflict_pools if x != pool)})"
            for n in new_conflicts[:LIST_MAX]
        )
        out.append(
            Event(
                "ConflictDetected",
                f"Nodes selected by more than one pool are left unchanged: {detail}",
                "Warning",
            )
        )
    after = replace(before, held=frozenset(held), conflicts=frozenset(conflicts))
    return out, after


def invalid_events(why: str, before: Reported, *, conditions_changed: bool) -> tuple[list[Event], Reported]:
    """The InvalidSpec Warning: once per reason, when the pool's conditions change with it."""
    if not conditions_changed or before.invalid == why:
        return [], before
    after = replace(before, invalid=why)
    return [Event(reasons.REASON_INVALID_SPEC, why, "Warning")], after


def switch_events(
    statuses: Sequence[Mapping[str, Any]], reasons: Collection[str], before: Reported
) -> tuple[list[Event], Reported]:
    """A Warning Event per reason for the nodes newly named Failed with one of the backend's
    failed-switch ``reasons`` (``status.nodeStatuses``; once per node and reason, not every pass),
    and one about each such node."""
    named = {
        (str(s.get("name")), str(s.get("reason"))): str(s.get("message") or "")
        for s in statuses
        if s.get("phase") == "Failed" and s.get("reason") in reasons
    }
    new = sorted(set(named) - before.switches)
    out: list[Event] = []
    for reason in sorted({r for _, r in new}):
        nodes = [n for n, r in new if r == reason]
        detail = "; ".join(f"{n}: {named[(n, reason)]}" for n in nodes[:3])
        more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
        out.append(Event(reason, f"{len(nodes)} node(s): {detail}{more}", "Warning"))
        out.extend(Event(reason, named[(n, reason)], "Warning", node=n) for n in nodes[:LIST_MAX])
    return out, replace(before, switches=frozenset(named))
