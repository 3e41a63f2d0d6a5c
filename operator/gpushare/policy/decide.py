"""The decide steps of a reconcile pass: from the pool's node plans to what to do now (pure).

``gpushare.reconcile`` observes (watches → node plans, replanning only the nodes that
changed), calls :func:`decide` for one pool, applies the :class:`PassPlan` (node patches,
evictions, plugin restarts), reports the status and asks :func:`settle` when to look again.
Nothing here does I/O or reads a clock (``now`` is passed in).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from gpushare import constants as c
from gpushare.api.v1alpha1 import Rollout
from gpushare.policy.planner import Action, NodePlan, RestartRecord
from gpushare.policy.rollout import select_batch
from gpushare.policy.views import NodeView

#: Seconds between passes while something is moving, while waiting, and when all is quiet.
FAST_REQUEUE = 1.0
WAIT_REQUEUE = 5.0
RESYNC = 60.0
#: While a pool is being deleted (its cleanup), look again at least this often.
CLEANUP_POLL = 2.0
#: Seconds between two status writes of one pool while it changes.
STATUS_INTERVAL = 1.0

_OWED = ("Pending", "Failed")
#: Membership key of nodes whose (restoring or restart-owing) pool no longer exists; the first
#: live pool (by name) acts on them.
ORPHANS = ""


def orphan_owner(live: Collection[str]) -> str | None:
    """The live pool that acts on nodes of vanished pools (restores them, moves their restarts):
    the first by name; None when there is no pool."""
    return min(live) if live else None


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


def restart_records(
    plans: Iterable[NodePlan], views: Mapping[str, NodeView | None]
) -> list[tuple[str, RestartRecord | None]]:
    """The restart record that counts for each plan's node after this pass's writes: the plan's
    own once it is written, but for a plan still unwritten (``changed``: waiting for budget or a
    failed write) the record on the node (``views``: the nodes as last seen or written), so that a
    restart is never moved on from a record the node does not carry yet."""
    out: list[tuple[str, RestartRecord | None]] = []
    for p in plans:
        if p.changed:
            view = views.get(p.node)
            raw = view.annotations.get(c.ANNOTATION_PLUGIN_RESTART) if view else None
            out.append((p.node, RestartRecord.parse(raw)))
        else:
            out.append((p.node, p.plugin_restart))
    return out


def status_wait(last_write: datetime | None, now: datetime, *, moving: bool) -> float | None:
    """Seconds to wait before writing a changed status (None: write it now). At most one write
    every ``STATUS_INTERVAL`` while the pool is ``moving``; a settled status goes out at once."""
    if not moving or last_write is None:
        return None
    wait = STATUS_INTERVAL - (now - last_write).total_seconds()
    return wait if wait > 0 else None


@dataclass(frozen=True)
class Settled:
    done: bool
    #: Seconds until the next pass unless something it concerns changes first.
    requeue: float
    leftover: int
    pending: bool
    #: Whether that next pass, if nothing woke it first, plans every node again (the periodic
    #: resync of a quiet pool).
    resync: bool = False


def settle(
    pool: str,
    plans: Sequence[NodePlan],
    *,
    waiting: int,
    restarting: bool,
    failed_writes: bool,
) -> Settled:
    """Whether ``pool`` has nothing left to do after a pass's writes, and when to look again for
    that; :func:`look_again` adds what the report leaves. The requeue is decided by these two."""
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
    return Settled(
        done=done, requeue=requeue, leftover=len(leftover), pending=pending, resync=requeue >= RESYNC
    )


def look_again(
    settled: Settled,
    *,
    status_wait: float | None = None,
    awaiting_plugin: bool = False,
    deleting: bool = False,
    config_expires: float | None = None,
) -> Settled:
    """``settled`` with what the report leaves: a changed status not written yet (rate limit, or
    a failed write) goes out ``status_wait`` seconds later; a node waiting for its device plugin to
    advertise the pool's mode is looked at again within ``WAIT_REQUEUE`` (before its timeout); a
    pool being deleted polls its cleanup at least every ``CLEANUP_POLL`` seconds; an unused NVIDIA
    config key is collected once it is old enough, ``config_expires`` seconds later. Only a pass
    that waits the full ``RESYNC`` plans every node again when nothing woke it first."""
    requeue = settled.requeue
    for delay in (
        status_wait,
        WAIT_REQUEUE if awaiting_plugin else None,
        CLEANUP_POLL if deleting else None,
        max(config_expires, 0.0) if config_expires is not None else None,
    ):
        if delay is not None:
            requeue = min(requeue, delay)
    return replace(settled, requeue=requeue, resync=requeue >= RESYNC)
