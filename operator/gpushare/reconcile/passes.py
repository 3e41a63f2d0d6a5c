"""One reconcile pass of one pool, as a list of named phases over a :class:`PassScope`.

observe (plan the dirty nodes) → decide (pure: batch, evictions) → confirm → write the nodes →
evict → move plugin restarts → report (status, metrics, Events) → settle (when to look again,
decided once in ``policy.decide``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from gpushare.k8s.cluster import pool_ref
from gpushare.policy import RestartRecord
from gpushare.policy.decide import (
    PassPlan,
    decide,
    look_again,
    orphan_owner,
    restart_records,
    restarts_owed,
    settle,
)
from gpushare.policy.events import restart_events, write_events
from gpushare.reconcile.apply import confirm, evict, write_nodes
from gpushare.reconcile.report import report, report_invalid
from gpushare.reconcile.restarts import move_restarts
from gpushare.reconcile.scope import PassResult, PassScope

if TYPE_CHECKING:
    from gpushare.reconcile.reconciler import Reconciler

log = structlog.stdlib.get_logger("gpushare.reconciler")


def observe(rec: Reconciler, name: str) -> PassScope | None:
    """Plan what changed; the scope of this pass (None if the pool is gone)."""
    raw = rec.state.bodies.get(name)
    if raw is None:
        return None
    now = rec.clock()
    _count, wake = rec.cache.replan(rec.state, now)
    rec.wake(wake, but=name)
    live = frozenset(rec.state.live())
    uid = str((raw.get("metadata") or {}).get("uid") or "")
    return PassScope(
        rec=rec,
        name=name,
        uid=uid,
        raw=raw,
        model=rec.state.model(name),
        now=now,
        live=live,
        orphans=name == orphan_owner(live),
        deleting=name in rec.state.pools.deleting,
        ref=pool_ref(name, uid),
        log=log.bind(pool=name),
    )


def decide_pass(s: PassScope) -> PassPlan:
    return decide(
        s.name,
        s.rec.cache.of_pool(s.name, orphans=s.orphans),
        rollouts={m.name: m.spec.rollout for m in s.rec.state.pools.models},
        live=s.live,
        orphans=s.orphans,
        busy=s.rec.writes.claimed,
    )


def owed(s: PassScope) -> list[tuple[str, RestartRecord]]:
    """Plugin restarts owed by this pool (or by vanished pools, for the orphan owner), as the nodes
    are after this pass's writes (never act on a record we just replaced)."""
    plans = s.rec.cache.of_pool(s.name, orphans=s.orphans)
    views = {p.node: s.rec.state.view(p.node) for p in plans if p.changed}
    return restarts_owed(s.name, restart_records(plans, views), s.live, orphans=s.orphans)


async def run_pass(rec: Reconciler, name: str) -> PassResult:
    """One pass of pool ``name``: the phases in order; the requeue from ``settle``/``look_again``."""
    s = observe(rec, name)
    if s is None:
        return PassResult(name, summary="pool is gone")
    if (why := rec.state.invalid().get(name)) is not None:
        await report_invalid(s, why)
        return PassResult(name, summary="invalid spec")
    decision = decide_pass(s)
    written = await write_nodes(s, await confirm(s, decision.patches))
    evicted = await evict(s, decision.evictions)
    restarts = await move_restarts(s, owed(s))
    errors = {**written.errors, **evicted, **restarts.errors}
    after = rec.cache.of_pool(name, orphans=False)
    failed = bool(errors or written.conflicts)
    settled = settle(name, after, waiting=decision.waiting, restarting=restarts.running, failed_writes=failed)
    events = [*write_events(name, s.mode, written.done), *restart_events(restarts.restarted, restarts.failed)]
    shown = await report(s, after, errors, events, moving=not settled.done)
    settled = look_again(
        settled, status_wait=shown.status_wait, awaiting_plugin=shown.awaiting_plugin, deleting=s.deleting
    )
    summary = (
        f"{len(written.done)} node(s) patched, {decision.waiting} waiting for rollout budget, "
        f"{settled.leftover} leaving or held, restarts pending: {settled.pending}"
    )
    return PassResult(
        name,
        done=settled.done,
        requeue=settled.requeue,
        resync=settled.resync,
        patched=len(written.done),
        conflicts=written.conflicts,
        errors=errors,
        summary=summary,
    )
