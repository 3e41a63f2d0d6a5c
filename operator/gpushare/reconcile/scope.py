"""What one reconcile pass works on (:class:`PassScope`) and what it returns (:class:`PassResult`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.policy.decide import RESYNC

if TYPE_CHECKING:
    from gpushare.reconcile.reconciler import Reconciler

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


@dataclass
class PassResult:
    """What one pass did and what it still waits for."""

    pool: str
    #: True when nothing is left for this pool: no node to restore, restart owed or node held.
    done: bool = True
    #: Seconds until the next pass unless a change it concerns comes first.
    requeue: float = RESYNC
    #: Whether that next pass, if nothing woke it first, plans every node again.
    resync: bool = True
    patched: int = 0
    #: Patches refused because the node had changed since it was planned (planned again next pass).
    conflicts: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    summary: str = ""


@dataclass(frozen=True)
class PassScope:
    """One pass of one pool: the pool, the pass's clock, and the reconciler's long-lived parts."""

    rec: Reconciler
    name: str
    uid: str
    raw: Mapping[str, Any]
    #: None for a pool whose spec does not parse.
    model: GPUSharePool | None
    now: datetime
    live: frozenset[str]
    #: Whether this pool also acts on the nodes of vanished pools (``policy.decide.orphan_owner``).
    orphans: bool
    deleting: bool
    ref: Mapping[str, str]
    log: structlog.stdlib.BoundLogger

    @property
    def mode(self) -> str:
        return self.model.spec.mode if self.model else ""

    def remember(self, obj: Mapping[str, Any] | None) -> None:
        """Believe our own write (the returned node) until the watch shows it; plan it again."""
        rec = self.rec
        rec.wake(rec.cache.remember(rec.state, obj, self.now), but=self.name)
