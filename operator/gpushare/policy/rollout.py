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
    """Nodes of ``pool`` still unavailable from earlier passes: restart owed, or held cordoned."""
    out = []
    for p in plans:
        if p.pool != pool:
            continue
        owed = p.plugin_restart is not None and p.plugin_restart.pending and p.plugin_restart.pool == pool
        cordoned = p.action is Action.HOLD and p.hold in ("Cordon", "Evict") and not p.cordon
        if (owed and not p.restart_plugin) or cordoned:
            out.append(p.node)
    return out


def select_batch(pool: str, rollout: Rollout, plans: Sequence[NodePlan]) -> list[NodePlan]:
    """The plans of ``pool`` to execute in this pass.

    Changes that disrupt nothing (labels the plugin does not read, ownership, uncordon) all go.
    Disrupting ones go while fewer than ``maxUnavailable`` nodes of the pool are unavailable,
    counting those still restarting or held cordoned from earlier passes; in name order.
    """
    mine = [p for p in plans if p.pool == pool]
    total = sum(1 for p in mine if p.action in _MEMBERS)
    budget = rollout.max_unavailable_for(max(total, 1)) - len(in_flight(pool, mine))
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
