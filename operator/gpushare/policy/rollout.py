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
    """Nodes still unavailable for ``pool`` from earlier passes: a restart it owes (also on nodes
    that already left it, e.g. restored ones), or its nodes held cordoned."""
    out = []
    for p in plans:
        record = p.plugin_restart
        owed = record is not None and record.pending and record.pool == pool and not p.restart_plugin
        cordoned = (
            p.pool == pool and p.action is Action.HOLD and p.hold in ("Cordon", "Evict") and not p.cordon
        )
        if owed or cordoned:
            out.append(p.node)
    return out


def select_batch(pool: str, rollout: Rollout, plans: Sequence[NodePlan]) -> list[NodePlan]:
    """The plans of ``pool`` to execute in this pass (``plans``: the whole cluster's, or more).

    Changes that disrupt nothing (labels the plugin does not read, ownership, uncordon) all go.
    Disrupting ones go while fewer than ``maxUnavailable`` nodes of the pool are unavailable,
    counting those still restarting or held cordoned from earlier passes; in name order.
    """
    mine = [p for p in plans if p.pool == pool]
    total = sum(1 for p in mine if p.action in _MEMBERS)
    budget = rollout.max_unavailable_for(max(total, 1)) - len(in_flight(pool, plans))
    out = []
    for p in sorted(mine, key=lambda p: p.node):
        if not p.changed:
            continue
        if disrupts(p):
            if budget <= 0:
                continue
            budget -= 1
        out.append(p)
    return out
