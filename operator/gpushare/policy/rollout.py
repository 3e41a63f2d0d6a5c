"""Which of a pool's planned node changes may go out now (``rollout.maxUnavailable``)."""

from __future__ import annotations

from collections.abc import Sequence

from gpushare.api.v1alpha1 import Rollout
from gpushare.policy.planner import Action, NodePlan

_MEMBERS = (Action.APPLY, Action.NOOP, Action.HOLD, Action.RESTORE, Action.RETAIN)


def disrupts(p: NodePlan) -> bool:
    """A change that makes the node unavailable for a while: a plugin restart or a cordon."""
    return p.restart_plugin or p.cordon


def in_flight(pool: str, plans: Sequence[NodePlan]) -> list[str]:
    """Nodes still unavailable for ``pool`` from earlier passes, in name order:

    * a plugin restart it owes (Pending; also on nodes that already left it, e.g. restored ones),
      unless this plan starts a new one (``plugin_restart`` is then the record it writes; that
      restart is counted when it goes out);
    * its nodes whose plugin was restarted but which do not advertise the mode of their labels
      yet (:attr:`NodePlan.awaiting_mode`): Ready plugin pods are not enough, the node must show
      the pool's resources. Such a node keeps counting past ``readyTimeoutSeconds`` (it is then
      reported ``PluginModeStale``): the rollout stops at it instead of breaking more nodes;
    * its nodes held cordoned for a mode switch.
    """
    out = []
    for p in plans:
        record = p.plugin_restart
        owed = record is not None and record.pending and record.pool == pool and not p.restart_plugin
        awaiting = p.pool == pool and p.awaiting_mode
        cordoned = (
            p.pool == pool and p.action is Action.HOLD and p.hold in ("Cordon", "Evict") and not p.cordon
        )
        if owed or awaiting or cordoned:
            out.append(p.node)
    return sorted(out)


def select_batch(pool: str, rollout: Rollout, plans: Sequence[NodePlan]) -> list[NodePlan]:
    """The plans of ``pool`` to execute in this pass (``plans``: the whole cluster's, or more).

    Changes that disrupt nothing (labels the plugin does not read, ownership, uncordon) all go.
    Disrupting ones go while fewer than ``maxUnavailable`` nodes of the pool are unavailable
    (:func:`in_flight`: restarting, not yet advertising their mode, or held cordoned), in name
    order. A node already unavailable takes no more budget for a new disruption.
    """
    mine = [p for p in plans if p.pool == pool]
    total = sum(1 for p in mine if p.action in _MEMBERS)
    unavailable = set(in_flight(pool, plans))
    budget = rollout.max_unavailable_for(max(total, 1)) - len(unavailable)
    out = []
    for p in sorted(mine, key=lambda p: p.node):
        if not p.changed:
            continue
        if disrupts(p) and p.node not in unavailable:
            if budget <= 0:
                continue
            budget -= 1
        out.append(p)
    return out


def needs_confirmation(p: NodePlan) -> bool:
    """Whether ``p`` switches a node's mode on the word of the GPU-pod index alone: a pod just
    bound may not be in it yet, so such a patch is confirmed by listing the node's pods first."""
    return bool(p.mode_switch) and p.action in (Action.APPLY, Action.RESTORE) and not p.force


def confirmed(planned: NodePlan, again: NodePlan) -> bool:
    """Whether ``planned`` still goes out after planning its node again (this pass's clock, or the
    node's listed pods): the node still needs a change for the same pool. The change itself may
    differ (a pod found on a node about to switch mode turns the switch into a hold): it is the
    same pass's plan, made from fresher data."""
    return again.changed and again.pool == planned.pool


def equivalent(planned: NodePlan, again: NodePlan) -> bool:
    """Whether a patch refused with 409 (someone else changed the node) may go on as ``again``,
    the plan of the node as read now: only the same kind of change for the same pool, and never
    one that disrupts the node where ``planned`` did not (that waits for the rollout budget)."""
    same = again.pool == planned.pool and again.action is planned.action
    return again.changed and same and not (disrupts(again) and not disrupts(planned))
