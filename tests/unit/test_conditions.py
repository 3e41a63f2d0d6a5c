"""metav1.Condition semantics of policy.conditions.set_condition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpushare.policy.conditions import Status, get_condition, set_condition

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=3)


def test_new_condition_is_added_with_now() -> None:
    out = set_condition([], "Ready", "False", "NodesNotReady", "0/2", 3, T0)
    assert out == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "NodesNotReady",
            "message": "0/2",
            "lastTransitionTime": "2026-11-29T12:00:00Z",
            "observedGeneration": 3,
        }
    ]


@pytest.mark.parametrize(
    ("new_status", "expected_time"),
    [
        pytest.param("False", "2026-11-29T12:00:00Z", id="same-status-keeps-time"),
        pytest.param("True", "2026-11-29T12:03:00Z", id="status-change-moves-time"),
    ],
)
def test_transition_time_changes_only_with_status(new_status: Status, expected_time: str) -> None:
    first = set_condition([], "Ready", "False", "NodesNotReady", "0/2", 1, T0)
    second = set_condition(first, "Ready", new_status, "Other", "1/2", 2, T1)
    (cond,) = second
    assert cond["lastTransitionTime"] == expected_time
    assert (cond["reason"], cond["message"], cond["observedGeneration"]) == ("Other", "1/2", 2)
    assert first[0]["reason"] == "NodesNotReady"  # input not modified


def test_stable_order_and_unknown_types_last() -> None:
    conds: list[dict[str, object]] = [{"type": "Custom", "status": "True", "reason": "X", "message": ""}]
    for ctype in ("Conflict", "Degraded", "Ready", "Progressing"):
        conds = set_condition(conds, ctype, "False", "R", "", None, T0)
    assert [x["type"] for x in conds] == ["Ready", "Progressing", "Degraded", "Conflict", "Custom"]
    assert "observedGeneration" not in conds[0]
    assert get_condition(conds, "Degraded") is not None
    assert get_condition(conds, "Nope") is None
