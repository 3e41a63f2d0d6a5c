"""The demand daemon of each pool: ``status.demand``, its gauges, lending (``gpushare.demand_loop``).

One Kopf daemon per pool (paused with the others under peering), woken when a Node or GPU pod the
demand loop reads changed, once those changes pause (``DemandTracker.settle``: at most
``SETTLE_MAX`` seconds into a rollout); every ``RESYNC`` seconds of quiet it looks again (a loan
may be due back). It writes only when the demand or a loan changed.
"""

from __future__ import annotations

from typing import Any

import kopf
import structlog

from gpushare import constants as c
from gpushare.demand_loop import RESYNC
from gpushare.handlers.pools import PoolIndex, _values
from gpushare.handlers.state import OperatorState
from gpushare.reconcile.loop import wait_woken

log = structlog.stdlib.get_logger("gpushare.handlers")


@kopf.daemon(c.GROUP, c.VERSION, c.PLURAL, id="demand", cancellation_timeout=5.0)  # type: ignore[arg-type]
async def demand_loop(
    name: str, memo: OperatorState, stopped: kopf.DaemonStopped, gpushare_pools: PoolIndex, **_: Any
) -> None:
    tracker = memo.demand
    if tracker is None:
        return
    wake = tracker.wakeup(name)
    if memo.watches is not None:
        await memo.watches.wait_listed()
    try:
        while not stopped:
            wake.clear()
            try:
                delay = await tracker.run(name, _values(gpushare_pools))
            except Exception as exc:
                delay = 2.0
                log.exception("Demand step failed", pool=name, retry_in=delay, error=str(exc))
            if await wait_woken(wake, stopped, min(delay, RESYNC)):
                await tracker.settle()
    finally:
        if stopped:
            tracker.forget(name)


@kopf.on.update(c.GROUP, c.VERSION, c.PLURAL, field="spec", id="demand-spec")
async def demand_spec_changed(memo: OperatorState, **_: Any) -> None:
    """A pool's spec (its lending, its selector) changes every pool's demand and loans: look again."""
    if memo.demand is not None:
        memo.demand.wake_all()
