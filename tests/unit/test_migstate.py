"""Where a node's MIG switch stands (``gpushare.backends.nvidia.migstate``): a state is trusted only
once NVIDIA's MIG manager was seen working after gpushare's write, so a stale ``success`` is never
taken; ``failed``, a state stuck past the timeout and operands left paused are named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpushare import constants as c
from gpushare.backends.nvidia import migstate as ms
from gpushare.backends.nvidia.migstate import MigSwitch, progress

NEW = "gpushare-mig-0a1b2c3d"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT = timedelta(seconds=300)
EARLY, LATE = T0 + timedelta(seconds=5), T0 + timedelta(seconds=301)
WROTE = MigSwitch(NEW, T0)
SEEN = MigSwitch(NEW, T0, seen_working=True)


def node(state: str | None, **operands: str) -> dict[str, str]:
    labels = {
        c.LABEL_MIG_CONFIG: NEW,
        **{ms.DEPLOY_PREFIX + k.replace("_", "-"): v for k, v in operands.items()},
    }
    return labels if state is None else {**labels, c.LABEL_MIG_CONFIG_STATE: state}


def test_the_success_of_the_previous_config_is_not_taken() -> None:
    found = progress(NEW, node("success"), True, WROTE, EARLY, TIMEOUT)
    assert (found.reason, found.record) == (ms.WAITING, None)
    assert "success is from before" in found.message
    assert not found.confirmed


def test_pending_after_the_write_is_recorded_then_success_confirms() -> None:
    working = progress(NEW, node("pending"), False, WROTE, EARLY, TIMEOUT)
    assert working.reason == ms.WAITING and working.record == SEEN
    assert progress(NEW, node("pending"), False, SEEN, EARLY, TIMEOUT).record is None  # nothing new to write
    done = progress(NEW, node("success"), True, SEEN, EARLY, TIMEOUT)
    assert done.confirmed and done.record is None


def test_success_before_the_slices_are_advertised_waits_then_is_named() -> None:
    assert progress(NEW, node("success"), False, SEEN, EARLY, TIMEOUT).reason == ms.WAITING
    late = progress(NEW, node("success"), False, SEEN, LATE, TIMEOUT)
    assert late.reason == ms.NOT_ADVERTISED and "does not advertise its resources" in late.message


def test_failed_after_the_manager_worked_names_the_config() -> None:
    found = progress(NEW, node("failed"), False, SEEN, EARLY, TIMEOUT)
    assert found.reason == ms.FAILED_REASON and found.failed
    assert f"failed to apply {c.LABEL_MIG_CONFIG}={NEW}" in found.message


def test_a_failed_from_before_the_switch_waits_then_is_stuck() -> None:
    assert progress(NEW, node("failed"), False, WROTE, EARLY, TIMEOUT).reason == ms.WAITING
    late = progress(NEW, node("failed"), False, WROTE, LATE, TIMEOUT)
    assert late.reason == ms.STUCK and "is NVIDIA's MIG manager running on the node?" in late.message


@pytest.mark.parametrize("state", ["pending", "rebooting"])
def test_working_past_the_timeout_is_stuck(state: str) -> None:
    found = progress(NEW, node(state), False, SEEN, LATE, TIMEOUT)
    assert found.reason == ms.STUCK and f"{c.LABEL_MIG_CONFIG_STATE} is still {state}" in found.message


def test_operands_left_paused_are_named_when_stuck_or_failed_not_while_working() -> None:
    paused = {"device_plugin": ms.PAUSED, "gpu_feature_discovery": ms.PAUSED, "dcgm": "true"}
    assert progress(NEW, node("pending", **paused), False, SEEN, EARLY, TIMEOUT).reason == ms.WAITING
    stuck = progress(NEW, node("pending", **paused), False, SEEN, LATE, TIMEOUT)
    assert stuck.reason == ms.OPERANDS_PAUSED and stuck.failed
    assert stuck.message.endswith(f"operands left {ms.PAUSED}: device-plugin, gpu-feature-discovery")
    failed = progress(NEW, node("failed", **paused), False, SEEN, EARLY, TIMEOUT)
    assert failed.reason == ms.OPERANDS_PAUSED


def test_a_node_that_already_carries_the_config_is_confirmed_by_its_state_and_resources() -> None:
    assert progress(NEW, node("success"), True, None, EARLY, TIMEOUT).confirmed
    # A record of another config (the pool's geometry changed since): a new switch is recorded.
    other = MigSwitch("gpushare-mig-99999999", T0 - TIMEOUT, seen_working=True)
    found = progress(NEW, node("success"), False, other, EARLY, TIMEOUT)
    assert found.reason == ms.WAITING and found.record == MigSwitch(NEW, EARLY)


def test_the_record_round_trips_and_an_unreadable_one_trusts_nothing() -> None:
    assert MigSwitch.parse(SEEN.dump()) == SEEN
    assert MigSwitch.parse("{") is None and MigSwitch.parse(None) is None
    assert ms.paused_operands({ms.DEPLOY_PREFIX + "dcgm": ms.PAUSED, "x": ms.PAUSED}) == ["dcgm"]


def test_a_state_the_manager_wrote_after_the_record_counts_as_seen_working() -> None:
    """The operator missed ``pending`` (down while the manager worked): a write of the state label by
    another field manager in a later second than the record is as good as having seen it."""
    after = T0 + timedelta(seconds=1)
    done = progress(NEW, node("success"), True, WROTE, EARLY, TIMEOUT, after)
    assert done.confirmed and done.record == SEEN
    # Long after the write, too: confirmed, not named stuck.
    assert progress(NEW, node("success"), True, WROTE, LATE, TIMEOUT, after).confirmed
    failed = progress(NEW, node("failed"), False, WROTE, EARLY, TIMEOUT, after)
    assert failed.reason == ms.FAILED_REASON and failed.record == SEEN


@pytest.mark.parametrize(
    "written",
    [None, T0, T0 + timedelta(milliseconds=999), T0 - timedelta(seconds=1)],
    ids=["unknown", "same-second", "same-second-later", "before"],
)
def test_a_state_written_in_the_same_second_or_before_the_record_is_not_taken(
    written: datetime | None,
) -> None:
    assert not ms.written_after(WROTE, written)
    found = progress(NEW, node("success"), True, WROTE, EARLY, TIMEOUT, written)
    assert (found.reason, found.record) == (ms.WAITING, None) and not found.confirmed
    assert progress(NEW, node("success"), True, WROTE, LATE, TIMEOUT, written).reason == ms.STUCK
