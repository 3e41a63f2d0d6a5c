"""``reconcile.batch.for_each``: the bounded write batches (the first write alone, then ``workers``)."""

from __future__ import annotations

import asyncio

import pytest

from gpushare.reconcile import batch
from gpushare.reconcile.batch import for_each


async def test_first_step_answers_before_the_others_start_then_workers_run_at_once() -> None:
    started: list[int] = []
    in_flight = 0
    peak = 0
    first_finished_before: list[int] = []

    async def step(i: int) -> None:
        nonlocal in_flight, peak
        started.append(i)
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        if i == 0:
            first_finished_before.extend(started)

    await for_each(list(range(100)), step, workers=8)
    assert sorted(started) == list(range(100))
    assert first_finished_before == [0]  # nothing else had started when the first answered
    assert peak == 8


async def test_a_slow_first_step_does_not_hold_back_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch, "LEAD_ALONE", 0.01)
    release = asyncio.Event()
    done: list[int] = []

    async def step(i: int) -> None:
        if i == 0:
            await release.wait()
        done.append(i)
        if len(done) == 9:
            release.set()

    await asyncio.wait_for(for_each(list(range(10)), step, workers=4), timeout=30)
    assert done[-1] == 0 and sorted(done) == list(range(10))


@pytest.mark.parametrize("n", [0, 1, 2])
async def test_few_items(n: int) -> None:
    done: list[int] = []

    async def step(i: int) -> None:
        done.append(i)

    await asyncio.wait_for(for_each(list(range(n)), step, workers=64), timeout=30)
    assert done == list(range(n))


async def test_a_failing_step_is_raised() -> None:
    async def step(i: int) -> None:
        if i == 3:
            raise RuntimeError("boom")
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="boom"):
        await for_each(list(range(10)), step, workers=4)
