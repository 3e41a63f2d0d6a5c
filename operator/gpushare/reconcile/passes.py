"""One reconcile pass of one pool, as a list of named phases over a :class:`PassScope`.

observe (plan the dirty nodes) → decide (pure: batch, evictions) → keep the pool's named config
(NVIDIA: hold back labels naming a config not yet visible to the plugin) → confirm → write the
nodes → evict → move plugin restarts → report (status, metrics, Events) → settle (when to look again,
decided once in ``policy.decide``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from gpushare.backends import backend_for
from gpushare.backends.nvidia.configmap import KEEP_UNUSED
from gpushare.k8s.cluster import pool_ref
from gpushare.policy import RestartRecord
from gpushare.policy.decide import (
    PassPlan,
    Settled,
    decide,
    look_again,
    orphan_owner,
    restart_records,
    restarts_owed,
    settle,
)
from gpushare.policy.events import restart_events, write_events
from gpushare.reconcile.apply import Written, confirm, evict, record_switches, write_nodes
from gpushare.reconcile.calls import PassCalls
from gpushare.reconcile.configs import Configs, keep_configs, release_configs
from gpushare.reconcile.memory import ReportMemory, RestartMemory
from gpushare.reconcile.plans import PlanCache
from gpushare.reconcile.report import report, report_invalid
from gpushare.reconcile.restarts import Restarts, move_restarts
from gpushare.reconcile.scope import Effects, PassResult, PassScope
from gpushare.reconcile.store import ClusterState

log = structlog.stdlib.get_logger("gpushare.reconciler")

#: ``apply(pool, effects)``: the reconciler applies what a phase of ``pool``'s pass left (marks
#: nodes dirty, forgets gone nodes, wakes the other pools concerned).
Apply = Callable[[str, Effects], None]


@dataclass(frozen=True)
class Parts:
    """The long-lived parts the phases read and write (the reconciler owns them)."""

    state: ClusterState
    cache: PlanCache
    writes: PassCalls
    restarts: RestartMemory
    reports: dict[str, ReportMemory]
    #: How long a config key gpushare wrote stays in the NVIDIA plugin's ConfigMap once no pool
    #: wants it and no node names it (``--nvidia-config-retention``).
    config_retention: timedelta = KEEP_UNUSED


def observe(parts: Parts, name: str, now: datetime) -> tuple[PassScope | None, set[str]]:
    """Plan what changed; the scope of this pass (None if the pool is gone) and the pools to wake."""
    state, cache = parts.state, parts.cache
    raw = state.bodies.get(name)
    if raw is None:
        return None, set()
    _count, wake = cache.replan(state, now)
    live = frozenset(state.live())
    uid = str((raw.get("metadata") or {}).get("uid") or "")
    scope = PassScope(
        name=name,
        uid=uid,
        raw=raw,
        model=state.model(name),
        now=now,
        live=live,
        orphans=name == orphan_owner(live),
        deleting=name in state.pools.deleting,
        ref=pool_ref(name, uid),
        log=log.bind(pool=name),
    )
    return scope, set(wake)


def decide_pass(s: PassScope, parts: Parts) -> PassPlan:
    return decide(
        s.name,
        parts.cache.of_pool(s.name, orphans=s.orphans),
        rollouts={m.name: m.spec.rollout for m in parts.state.pools.models},
        live=s.live,
        orphans=s.orphans,
        busy=parts.writes.claimed,
    )


def owed(s: PassScope, state: ClusterState, cache: PlanCache) -> list[tuple[str, RestartRecord]]:
    """Plugin restarts owed by this pool (or by vanished pools, for the orphan owner), as the nodes
    are after this pass's writes (never act on a record we just replaced)."""
    plans = cache.of_pool(s.name, orphans=s.orphans)
    views = {p.node: state.view(p.node) for p in plans if p.changed}
    return restarts_owed(s.name, restart_records(plans, views), s.live, orphans=s.orphans)


@dataclass(frozen=True)
class Acted:
    """What the writing phases of a pass did (:func:`act`)."""

    configs: Configs
    #: Nodes whose label waits for the pool's config to reach the plugin (node -> why).
    held: dict[str, str]
    written: Written
    restarts: Restarts
    #: Why the cleanup of a deleted pool's ConfigMap keys is not done (None: done, or none owed).
    unreleased: str | None
    errors: dict[str, str]


async def act(s: PassScope, parts: Parts, decision: PassPlan, apply: Apply) -> Acted:
    """The writing phases, in order: keep the configs, confirm, write the nodes, release the
    configs, evict, move the restarts; each phase's effects applied after it."""
    state, cache, writes = parts.state, parts.cache, parts.writes
    configs = await keep_configs(s, state, writes, parts.config_retention)
    held = {p.node: h.why() for p in decision.patches if (h := configs.holding(p)) is not None}
    patches = [p for p in decision.patches if p.node not in held]
    confirmed = await confirm(s, patches, state, cache, writes)
    apply(s.name, s.effects.drain())
    written = await write_nodes(s, confirmed, state, cache, writes)
    apply(s.name, s.effects.drain())
    unreleased = await release_configs(s, state, writes)
    evicted = await evict(s, decision.evictions, state, writes)
    restarts = await move_restarts(s, owed(s, state, cache), state, cache, writes, parts.restarts)
    await record_switches(s, backend_for(s.model.spec if s.model else None), state, cache, writes)
    apply(s.name, s.effects.drain())
    errors = {**written.errors, **evicted, **restarts.errors}
    if configs.error is not None:
        errors.update(held)
        held = {}
    return Acted(configs, held, written, restarts, unreleased, errors)


async def run_pass(parts: Parts, name: str, now: datetime, apply: Apply) -> PassResult:
    """One pass of pool ``name``: the phases in order, each phase's effects applied after it; the
    requeue from ``settle``/``look_again``."""
    state, cache, writes = parts.state, parts.cache, parts.writes
    s, wake = observe(parts, name, now)
    if s is None:
        return PassResult(name, summary="pool is gone")
    apply(name, Effects(wake=wake))
    memory = parts.reports.setdefault(name, ReportMemory())
    if (why := state.invalid().get(name)) is not None:
        plans = cache.of_pool(name, orphans=False)
        await report_invalid(
            s, why, plans=plans, state=state, invalid_pools=cache.invalid_pools, writes=writes, memory=memory
        )
        return PassResult(name, summary="invalid spec")
    decision = decide_pass(s, parts)
    done = await act(s, parts, decision, apply)
    after = cache.of_pool(name, orphans=False)
    if done.unreleased is not None:
        s.log.warning("Cleanup not done", reason=done.unreleased)
    failed = bool(done.errors or done.written.conflicts or done.unreleased)
    settled = settle(
        name, after, waiting=decision.waiting, restarting=done.restarts.running, failed_writes=failed
    )
    backend = backend_for(s.model.spec if s.model else None)
    events = [
        *write_events(name, s.mode, done.written.done, backend),
        *restart_events(done.restarts.restarted, done.restarts.failed),
    ]
    shown = await report(
        s,
        after,
        done.errors,
        events,
        moving=not settled.done,
        state=state,
        invalid_pools=cache.invalid_pools,
        writes=writes,
        memory=memory,
        held=done.held,
    )
    collect = done.configs.collect
    settled = look_again(
        settled,
        status_wait=shown.status_wait,
        awaiting_plugin=shown.awaiting_plugin,
        deleting=s.deleting,
        config_expires=collect.total_seconds() if collect is not None else None,
    )
    return _result(name, settled, done, decision.waiting)


def _result(name: str, settled: Settled, done: Acted, waiting: int) -> PassResult:
    summary = (
        f"{len(done.written.done)} node(s) patched, {waiting} waiting for rollout budget, "
        f"{settled.leftover} leaving or held, restarts pending: {settled.pending}"
    )
    return PassResult(
        name,
        done=settled.done,
        requeue=settled.requeue,
        resync=settled.resync,
        patched=len(done.written.done),
        conflicts=done.written.conflicts,
        errors=done.errors,
        summary=summary,
    )
