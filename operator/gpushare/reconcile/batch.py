"""Bounded batches of API calls (``for_each``): the first alone, then ``workers`` at a time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Node writes (patches, plugin pod deletes) in flight at once, per pool (so that pools never
#: queue behind each other). 64, as the plain loop of bench/bench_operator.py (docs/benchmarks.md).
WRITE_CONCURRENCY = 64


async def for_each(
    items: Sequence[T], step: Callable[[T], Awaitable[R]], workers: int = WRITE_CONCURRENCY
) -> list[R]:
    """``step`` over ``items``, ``workers`` at a time, by that many tasks rather than one task per
    item (at 5000 nodes, 5000 tasks waiting on the write bound were megabytes of peak memory);
    the results in the order of ``items``.

    The first step runs alone (up to ``LEAD_ALONE`` seconds): on a cold client it opens one
    connection and answers, instead of queueing behind ``workers`` TLS handshakes at once (the
    first node write of a 1000-node pool came 0.94 s after the pass began, now one round trip:
    0.22 s)."""
    results: dict[int, R] = {}
    todo = iter(enumerate(items))
    answered = asyncio.Event()

    async def worker() -> None:
        for i, item in todo:
            results[i] = await step(item)
            answered.set()

    async def others(n: int) -> None:
        if n <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(answered.wait(), LEAD_ALONE)
        await asyncio.gather(*(worker() for _ in range(n)))

    await asyncio.gather(worker(), others(min(workers, len(items)) - 1))
    return [results[i] for i in range(len(items))]


#: How long the first step of a batch runs alone before the others start anyway (``for_each``).
LEAD_ALONE = 1.0
