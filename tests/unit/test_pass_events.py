"""The Events of a reconcile pass (policy.events): what is posted for the writes, the restarts,
new holds and conflicts (once per change of the set) and an invalid spec (once per reason)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpushare import constants as c
from gpushare.policy import Action, NodePlan
from gpushare.policy import conditions as reasons
from gpushare.policy.events import (
    Event,
    Reported,
    invalid_events,
    label_changes,
    restart_events,
    transition_events,
    write_events,
)

APPLY = NodePlan("n0", "gpu", Action.APPLY, label_patch={c.LABEL_SCHEDULE: "cgpu"})


def _apply(i: int, **kw: object) -> NodePlan:
    return replace(APPLY, node=f"n{i}", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        pytest.param([], [], id="nothing-done"),
        pytest.param(
            [_apply(0), _apply(1)], [Event("LabelsApplied", "Applied cgpu labels to 2 node(s): n0, n1")],
            id="labels-applied",
        ),
        pytest.param(
            [_apply(i) for i in range(10)],
            [Event("LabelsApplied", "Applied cgpu labels to 10 node(s): "
                   "n0, n1, n2, n3, n4, n5, n6, n7 and 2 more")],
            id="long-lists-are-cut",
        ),
        pytest.param(
            [_apply(0, action=Action.RESTORE), _apply(1, action=Action.RETAIN)],
            [Event("LabelsRestored", "Restored the labels of 2 node(s): n0, n1")],
            id="restored-and-retained",
        ),
        pytest.param(
            [_apply(0, drift=True)],
            [
                Event("DriftCorrected", "Put back managed labels edited by hand on 1 node(s): "
                      "n0: ack.node.gpu.schedule=cgpu", "Warning"),
                Event("DriftCorrected", "Put back managed labels edited by hand on 1 node(s): "
                      "n0: ack.node.gpu.schedule=cgpu", "Warning", node="n0"),
            ],
            id="one-drift-also-on-the-node",
        ),
        pytest.param(
            [
                _apply(0, drift=True, label_patch={**APPLY.label_patch, c.LABEL_DISABLE_ISOLATION: "false"}),
                _apply(1, drift=True, label_patch={c.LABEL_NVIDIA_CONFIG: None}),
            ],
            [
                Event("DriftCorrected", "Put back managed labels edited by hand on 2 node(s): "
                      "n0: ack.node.gpu.schedule=cgpu, cgpu.disable.isolation=false; "
                      "n1: removed nvidia.com/device-plugin.config", "Warning"),
            ],
            id="drift-set-and-removed-labels-by-key",
        ),
        pytest.param(
            [_apply(0, label_patch={}, hold="Force", message="1 GPU pod")],
            [Event("ModeSwitchForced",
                   f"Forced {c.LABEL_SCHEDULE} switch on 1 node(s) with GPU pods running: n0: 1 GPU pod",
                   "Warning")],
            id="forced",
        ),
        pytest.param(
            [_apply(0, label_patch={}, unschedulable_patch=True), _apply(1, label_patch={}, uncordon=True)],
            [
                Event("Cordoned", "Cordoned by GPUSharePool gpu for a GPU mode switch", node="n0"),
                Event("Cordoned", "Cordoned 1 node(s) for a GPU mode switch: n0"),
                Event("Uncordoned", "Uncordoned by GPUSharePool gpu", node="n1"),
                Event("Uncordoned", "Uncordoned 1 node(s): n1"),
            ],
            id="cordons",
        ),
    ],
)  # fmt: skip
def test_write_events(done: list[NodePlan], expected: list[Event]) -> None:
    assert write_events("gpu", "cgpu", done) == expected


@pytest.mark.parametrize(
    ("patch", "text"),
    [
        pytest.param({}, "", id="nothing"),
        pytest.param({"b": "2", "a": "1"}, "a=1, b=2", id="set-by-key"),
        pytest.param({"k": None}, "removed k", id="removed"),
        pytest.param({"k": ""}, "k=", id="set-empty-is-not-removed"),
        pytest.param({"b": None, "a": "x"}, "a=x, removed b", id="both"),
    ],
)
def test_label_changes_read_as_key_value_never_as_a_dict(patch: dict[str, str | None], text: str) -> None:
    assert label_changes(patch) == text


def test_restart_events() -> None:
    assert restart_events([], []) == []
    assert restart_events(["n1", "n0"], ["n2"]) == [
        Event("DevicePluginRestarted", "Device plugin restarted on 2 node(s): n0, n1"),
        Event(reasons.NODE_PLUGIN_NOT_READY, "No Ready device plugin pod on n2", "Warning"),
    ]


def test_holds_and_conflicts_are_reported_once_per_change_of_the_set() -> None:
    held = NodePlan("n0", "gpu", Action.HOLD, message="GPU pods running")
    conflict = NodePlan("n1", None, Action.CONFLICT, conflict_pools=("gpu", "other"))
    events, seen = transition_events("gpu", [held, conflict], Reported())
    assert events == [
        Event("NodeHeld", "1 node(s) held: n0: GPU pods running", "Warning"),
        Event(
            "ConflictDetected",
            "Nodes selected by more than one pool are left unchanged: n1 (also other)",
            "Warning",
        ),
    ]
    assert transition_events("gpu", [held, conflict], seen) == ([], seen)  # the same sets: silence
    events, seen = transition_events("gpu", [], seen)  # both resolved: silence, memory cleared
    assert events == [] and seen == Reported()
    events, _ = transition_events("gpu", [held], seen)  # held again: reported again
    assert [e.reason for e in events] == ["NodeHeld"]


def test_invalid_spec_is_reported_once_per_reason() -> None:
    events, seen = invalid_events("bad selector", Reported(), conditions_changed=True)
    assert events == [Event(reasons.REASON_INVALID_SPEC, "bad selector", "Warning")]
    assert invalid_events("bad selector", seen, conditions_changed=True) == ([], seen)
    assert invalid_events("other", seen, conditions_changed=False) == ([], seen)
    assert [e.message for e in invalid_events("other", seen, conditions_changed=True)[0]] == ["other"]
