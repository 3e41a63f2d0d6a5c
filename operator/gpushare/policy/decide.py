"""The decide step of a reconcile pass: from the pool's node plans to what to do now (pure).

``gpushare.reconciler`` observes (indexes → node plans, replanning only the nodes that
changed), calls :func:`decide` for one pool, applies the :class:`PassPlan` (node patches,
evictions, plugin restarts) and reports the status. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpushare.api.v1alpha1 import Rollout
from gpushare.policy.planner import Action, NodePlan, RestartRecord
from gpushare.policy.rollout import select_batch

#: Seconds between passes while something is moving, while waiting, and when all is quiet.
FAST_REQUEUE = 1.0
WAIT_REQUEUE = 5.0
RESYNC = 60.0

_OWED = ("Pending", "Failed")
#: Membership key of nodes whose (restoring or restart-owing) pool no longer exists; the first
#: live pool (by name) acts on them.
ORPHANS = ""


def related_pools(p: NodePlan, live: Collection[str]) -> frozenset[str]:
    """The pools that act on or report ``p``'s node (``ORPHANS`` for pools that are gone)."""
    out: set[str] = set()
    if p.pool is not None:
        out.add(p.pool if p.pool in live else ORPHANS)
    out.update(p.conflict_pools)
    record = p.plugin_restart
    if record is not None and record.state in _OWED:
        out.add(record.pool if record.pool in live else ORPHANS)
    return frozenset(out)


def acts_on(pool: str, p: NodePlan, live: Collection[str], *, orphans: bool) -> bool:
    """Whether ``pool`` writes ``p``'s patch: its own nodes, and vanished pools' for the first pool."""
    return p.pool == pool or (orphans and p.pool is not None and p.pool not in live)


@dataclass(frozen=True)
class PassPlan:
    """What one pass of a pool does: patches (in rollout order), evictions, and what is left."""

    pool: str
    patches: tuple[NodePlan, ...] = ()
    #: HOLD plans with ``modeSwitch: Evict`` on nodes already cordoned: evict their blocking pods.
    evictions: tuple[NodePlan, ...] = ()
    #: Changes this pool owes that wait for rollout budget (or for another pass's write).
    waiting: int = 0


def decide(
    pool: str,
    plans: Sequence[NodePlan],
    *,
    rollouts: Mapping[str, Rollout],
    live: Collection[str],
    orphans: bool,
    busy: Collection[str] = (),
) -> PassPlan:
    """The patches and evictions of one pass of ``pool``.

    ``plans``: the plans of every node related to the pool (its members, conflicts and restarts
    it owes; with ``orphans`` also those of vanished pools); ``rollouts``: each live pool's
    rollout settings; ``busy``: nodes whose write another pass has in flight (left for later).
    """
    mine = [p for p in plans if acts_on(pool, p, live, orphans=orphans)]
    patches: list[NodePlan] = []
    for owner in sorted({p.pool for p in mine if p.pool is not None}):
        patches.extend(select_batch(owner, rollouts.get(owner, Rollout()), plans))
    patches = [p for p in patches if p.node not in busy]
    waiting = sum(1 for p in mine if p.changed) - len(patches)
    evictions = tuple(p for p in mine if p.hold == "Evict" and p.blocking_pods and not p.cordon)
    return PassPlan(pool=pool, patches=tuple(patches), evictions=evictions, waiting=waiting)


def restarts_owed(
    pool: str, records: Iterable[tuple[str, RestartRecord | None]], live: Collection[str], *, orphans: bool
) -> list[tuple[str, RestartRecord]]:
    """(node, record) of plugin restarts ``pool`` still has to move on (Pending or Failed)."""
    out = []
    for node, record in records:
        if record is None or record.state not in _OWED:
            continue
        if record.pool == pool or (orphans and record.pool not in live):
            out.append((node, record))
    return sorted(out, key=lambda x: x[0])


@dataclass(frozen=True)
class Settled:
    done: bool
    requeue: float
    leftover: int
    pending: bool


def settle(
    pool: str,
    plans: Sequence[NodePlan],
    *,
    waiting: int,
    restarting: bool,
    failed_writes: bool,
) -> Settled:
    """Whether ``pool`` has nothing left to do after a pass, and when to look again."""
    leftover = [
        p for p in plans if p.pool == pool and p.action in (Action.RESTORE, Action.RETAIN, Action.HOLD)
    ]
    pending = restarting or any(
        p.plugin_restart_pending and p.plugin_restart is not None and p.plugin_restart.pool == pool
        for p in plans
    )
    held = any(p.action is Action.HOLD for p in leftover)
    done = not leftover and not pending and not failed_writes
    if pending or waiting > 0 or failed_writes:
        requeue = FAST_REQUEUE
    elif held or any(p.changed for p in plans if p.pool == pool):
        requeue = WAIT_REQUEUE
    else:
        requeue = RESYNC
    return Settled(done=done, requeue=requeue, leftover=len(leftover), pending=pending)
