"""A hold seen on the cluster, not in the operator's report of itself: the held node's labels and
what it advertises, sampled from the moment the pool says Held until the operator has finished
more reconcile passes of that pool (a held pool is looked at again every ``WAIT_REQUEUE``
seconds), so that a hold the operator reports but does not keep, or keeps for one pass only, is
seen as the label it writes.

A pass plans again only the nodes that changed (every node only on a quiet resync, which a held
pool never reaches), so the node is changed on the way: a label of the test's own is set once the
first pass is seen and removed at the end. The hold must survive its node being planned again,
as it must in a cluster where nodes change all the time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from kubernetes_asyncio import client

from gpushare.policy.decide import WAIT_REQUEUE
from support.operator_proc import OperatorProc

#: A node's labels and allocatable -> what is wrong with them while the hold lasts ("" if nothing).
Check = Callable[[Mapping[str, str], Mapping[str, str]], str]
#: Passes of the held pool to sample across, after the one that first said Held.
PASSES = 2
#: Between two samples; a label written and written back within it would be missed, which no
#: operator does (its writes are one per pass).
INTERVAL_S = 0.2
#: The test's own label, set on the held node so that the operator plans the node again.
TOUCH = "gpushare-test.io/replanned"


async def hold_kept(
    core: client.CoreV1Api,
    node: str,
    operator: OperatorProc,
    pool: str,
    check: Check,
    *,
    passes: int = PASSES,
) -> int:
    """Sample ``node`` until ``operator`` has finished a pass of ``pool``, then change the node
    (``TOUCH``) and sample on until ``passes`` more passes after the one that change wakes, and one
    sample after that; AssertionError naming the sample when ``check`` finds a problem. Returns the
    number of samples. Passes that never come within a generous bound (the requeue of a held pool,
    ``passes`` times, and a minute) fail too: the hold was not looked at again."""
    start = operator.passes(pool)
    deadline = time.monotonic() + passes * WAIT_REQUEUE + 60.0
    count, started, touched = 0, time.monotonic(), False
    try:
        while True:
            seen = operator.passes(pool) - start  # read before the node: the last sample follows it
            obj = await core.read_node(node)
            labels = obj.metadata.labels or {}
            allocatable = obj.status.allocatable or {}
            count += 1
            problem = check(labels, allocatable)
            assert not problem, (
                f"{node} during the hold, {time.monotonic() - started:.1f} s after it was first reported"
                f" (sample {count}, {seen} pass(es) of {pool} since, node changed: {touched}): {problem}"
            )
            if touched and seen >= passes + 1:
                return count
            if not touched and seen >= 1:
                # Passes from here on plan the node again (the next one because of this change).
                await core.patch_node(node, {"metadata": {"labels": {TOUCH: str(count)}}})
                start, touched = start + seen, True
            assert time.monotonic() < deadline, (
                f"{passes} more pass(es) of {pool} never came while it was held"
            )
            await asyncio.sleep(INTERVAL_S)
    finally:
        if touched:
            await core.patch_node(node, {"metadata": {"labels": {TOUCH: None}}})
