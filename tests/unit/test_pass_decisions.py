"""The pass's small decisions in policy/ (pure), as tables: which patch needs a pod-list
confirmation, the confirmation and 409 acceptance rules, the orphan owner, the record that
counts for owed restarts, the status rate limit and the requeue."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpushare import constants as c
from gpushare.policy import Action, NodePlan, NodeView, RestartRecord
from gpushare.policy.decide import (
    CLEANUP_POLL,
    FAST_REQUEUE,
    RESYNC,
    WAIT_REQUEUE,
    Settled,
    look_again,
    orphan_owner,
    restart_records,
    status_wait,
)
from gpushare.policy.rollout import confirmed, equivalent, needs_confirmation

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
LABELS = NodePlan("n0", "gpu", Action.APPLY, label_patch={c.LABEL_SCHEDULE: "cgpu"})
SWITCH = replace(LABELS, mode_switch=("gpu", "cgpu"), restart_plugin=True)
NOTHING = NodePlan("n0", "gpu", Action.NOOP)


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        pytest.param(LABELS, False, id="no-mode-switch"),
        pytest.param(SWITCH, True, id="apply-switching-mode"),
        pytest.param(replace(SWITCH, action=Action.RESTORE), True, id="restore-switching-mode"),
        pytest.param(replace(SWITCH, hold="Force"), False, id="forced-switch-is-not-confirmed"),
        pytest.param(replace(SWITCH, action=Action.HOLD, hold="Cordon"), False, id="a-hold"),
    ],
)
def test_needs_confirmation(plan: NodePlan, expected: bool) -> None:
    assert needs_confirmation(plan) is expected


HELD = replace(SWITCH, action=Action.HOLD, hold="Cordon", unschedulable_patch=True, label_patch={})


@pytest.mark.parametrize(
    ("again", "is_confirmed", "is_equivalent"),
    [
        pytest.param(SWITCH, True, True, id="same-plan"),
        pytest.param(NOTHING, False, False, id="nothing-to-do-any-more"),
        pytest.param(replace(SWITCH, pool="other"), False, False, id="another-pool-now"),
        pytest.param(HELD, True, False, id="a-pod-found-turns-it-into-a-hold"),
        pytest.param(replace(SWITCH, label_patch={c.LABEL_SCHEDULE: "share"}), True, True, id="other-labels"),
    ],
)
def test_confirmation_and_conflict_acceptance(
    again: NodePlan, is_confirmed: bool, is_equivalent: bool
) -> None:
    assert confirmed(SWITCH, again) is is_confirmed
    assert equivalent(SWITCH, again) is is_equivalent


def test_a_conflict_never_turns_a_quiet_change_into_a_disrupting_one() -> None:
    assert not equivalent(LABELS, SWITCH)
    assert equivalent(SWITCH, LABELS)


@pytest.mark.parametrize(
    ("live", "expected"),
    [pytest.param(set(), None, id="no-pool"), pytest.param({"b", "a", "c"}, "a", id="first-by-name")],
)
def test_orphan_owner(live: set[str], expected: str | None) -> None:
    assert orphan_owner(live) == expected


ON_NODE = RestartRecord("h0", "2026-11-29T12:00:01Z", "Pending", "gpu")
PLANNED = RestartRecord("h1", "2026-11-29T12:00:09Z", "Pending", "gpu")


@pytest.mark.parametrize(
    ("plan", "annotations", "expected"),
    [
        pytest.param(
            replace(NOTHING, plugin_restart=PLANNED), {c.ANNOTATION_PLUGIN_RESTART: ON_NODE.dump()}, PLANNED,
            id="written-plan-its-own-record",
        ),
        pytest.param(
            replace(SWITCH, plugin_restart=PLANNED), {c.ANNOTATION_PLUGIN_RESTART: ON_NODE.dump()}, ON_NODE,
            id="unwritten-plan-the-node-record",
        ),
        pytest.param(replace(SWITCH, plugin_restart=PLANNED), {}, None, id="unwritten-and-none-on-the-node"),
    ],
)  # fmt: skip
def test_restart_records(plan: NodePlan, annotations: dict[str, str], expected: RestartRecord | None) -> None:
    views = {"n0": NodeView("n0", {}, annotations=annotations)}
    assert restart_records([plan], views) == [("n0", expected)]


@pytest.mark.parametrize(
    ("last", "now", "moving", "expected"),
    [
        pytest.param(None, NOW, True, None, id="first-write"),
        pytest.param(NOW, NOW + timedelta(seconds=0.25), True, 0.75, id="moving-within-the-interval"),
        pytest.param(NOW, NOW + timedelta(seconds=1), True, None, id="moving-after-the-interval"),
        pytest.param(NOW, NOW + timedelta(seconds=0.25), False, None, id="settled-goes-out-at-once"),
    ],
)
def test_status_wait(last: datetime | None, now: datetime, moving: bool, expected: float | None) -> None:
    assert status_wait(last, now, moving=moving) == expected


QUIET = Settled(done=True, requeue=RESYNC, leftover=0, pending=False, resync=True)
BUSY = Settled(done=False, requeue=FAST_REQUEUE, leftover=0, pending=True, resync=False)


@pytest.mark.parametrize(
    ("settled", "kw", "requeue", "resync"),
    [
        pytest.param(QUIET, {}, RESYNC, True, id="quiet-resyncs"),
        pytest.param(QUIET, {"status_wait": 0.5}, 0.5, False, id="a-status-to-write"),
        pytest.param(QUIET, {"awaiting_plugin": True}, WAIT_REQUEUE, False, id="waiting-for-plugin-mode"),
        pytest.param(QUIET, {"deleting": True}, CLEANUP_POLL, False, id="cleanup-polls"),
        pytest.param(QUIET, {"config_expires": 4.5}, 4.5, False, id="an-unused-config-ages-out"),
        pytest.param(QUIET, {"config_expires": 3600.0}, RESYNC, True, id="an-unused-config-ages-out-later"),
        pytest.param(
            BUSY, {"awaiting_plugin": True, "deleting": True}, FAST_REQUEUE, False, id="busy-stays-fast"
        ),
    ],
)
def test_look_again(settled: Settled, kw: dict[str, object], requeue: float, resync: bool) -> None:
    out = look_again(settled, **kw)  # type: ignore[arg-type]
    assert (out.requeue, out.resync, out.done) == (requeue, resync, settled.done)
