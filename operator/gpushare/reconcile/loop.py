"""The wait loop of one pool: a pass now, then again when woken or requeued.

The same loop runs a pool's reconcile daemon (until it is stopped) and its cleanup on deletion
(until a pass reports nothing left). A failed pass is retried with a backoff rather than
raised, so Kopf posts no Event per retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import structlog

from gpushare.k8s.retry import Backoff
from gpushare.reconcile.reconciler import Reconciler
from gpushare.reconcile.scope import PassResult

log = structlog.stdlib.get_logger("gpushare.handlers")
#: After a wake-up, wait this long so a burst of node/pod events becomes one pass.
DEBOUNCE = 0.1
#: A failed pass (e.g. the apiserver is down) is retried after at most this many seconds.
MAX_BACKOFF = 4.0
#: 1 s, 2 s, then MAX_BACKOFF after consecutive failed passes (the shared retry policy's backoff).
FAILED_PASS_BACKOFF = Backoff(base_delay=1.0, max_delay=MAX_BACKOFF, jitter=False)


class Stopped(Protocol):
    """What stops the loop from outside (Kopf's ``DaemonStopped``): true once set, and awaitable."""

    def __bool__(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


class _Never:
    def __bool__(self) -> bool:
        return False

    async def wait(self) -> None:
        await asyncio.Event().wait()


async def wait_woken(wake: asyncio.Event, stop: Stopped, seconds: float) -> bool:
    """Wait for ``wake``, ``stop`` or ``seconds``, whichever comes first; True when woken
    (and not stopped). The one wait of every loop of the operator (a pool's passes, its demand)."""
    woken = asyncio.ensure_future(wake.wait())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        done, _pending = await asyncio.wait(
            {woken, stopping}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        woken.cancel()
        stopping.cancel()
    return woken in done and not stop


async def pool_loop(
    name: str,
    reconciler: Reconciler,
    pools: Callable[[], Iterable[Mapping[str, Any]]],
    *,
    listed: Callable[[], Awaitable[None]] | None = None,
    stopped: Stopped | None = None,
    until_done: bool = False,
) -> PassResult | None:
    """Passes of pool ``name`` (``pools``: every pool body now) until ``stopped``, or, with
    ``until_done``, until a pass reports nothing left (returned). Each waits for the wake-up or
    the requeue the last pass asked for; a quiet wait that the pass marked ``resync`` makes the
    next pass plan every node again."""
    stop = stopped if stopped is not None else _Never()
    wake = reconciler.wakeup(name)
    if listed is not None:
        await listed()  # only at startup: every node and pod listed once
    failures = 0
    resync = False
    while not stop:
        wake.clear()
        try:
            reconciler.set_pools(pools())
            with structlog.contextvars.bound_contextvars(pool=name):
                result = await reconciler.run_pass(name, resync=resync)
        except Exception as exc:
            failures += 1
            delay, quiet_resync = FAILED_PASS_BACKOFF.delay(failures), False
            log.exception("Reconcile pass failed", pool=name, retry_in=delay, error=str(exc))
        else:
            failures = 0
            if until_done and result.done:
                return result
            if until_done:
                log.info("Cleanup in progress", pool=name, summary=result.summary)
            delay, quiet_resync = result.requeue, result.resync
        woken = await wait_woken(wake, stop, delay)
        resync = not woken and not stop and quiet_resync
        if woken:
            await asyncio.sleep(DEBOUNCE)
    return None
