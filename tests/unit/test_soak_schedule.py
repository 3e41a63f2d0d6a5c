"""The soak's schedule (``gpushare.devcluster.soak``): the same seed gives the same steps, every kind
of work and fault is in every run, and the printed schedule is the one run."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpushare.devcluster.soak import (
    FAULTS,
    KINDS,
    WORK,
    Step,
    _foreign_keys,
    format_schedule,
    make_schedule,
    owned_label_diff,
)


@given(seed=st.integers(0, 2**32), seconds=st.floats(30, 1800))
@settings(max_examples=50, deadline=None)
@example(seed=224977, seconds=1383.099609375)  # a step at 1383.0996 rounded to 1383.1, past the end
def test_same_seed_same_schedule_every_kind_once(seed: int, seconds: float) -> None:
    steps = make_schedule(seed, seconds)
    assert steps == make_schedule(seed, seconds)
    assert {s.kind for s in steps} == set(KINDS)
    assert steps == sorted(steps)
    assert all(0 <= s.at < seconds for s in steps)
    instant = ("plugin-pod-delete", "watch-cut")
    assert all(s.hold > 0 for s in steps if s.kind in FAULTS and s.kind not in instant)


def test_seeds_differ_and_the_print_names_each_step() -> None:
    a, b = make_schedule(1, 600), make_schedule(2, 600)
    assert a != b
    text = format_schedule(1, a)
    assert text.splitlines()[0] == f"schedule (seed 1, {len(a)} steps):"
    assert [line.strip() for line in text.splitlines()[1:]] == [str(s).strip() for s in a]
    assert set(WORK).isdisjoint(FAULTS)


def test_a_step_prints_what_and_for_how_long() -> None:
    assert (
        str(Step(1.5, "operator-stop", "replica-1", 4.0)).strip() == "1.50s  operator-stop replica-1 for 4.0s"
    )
    assert str(Step(2.0, "probe")).strip() == "2.00s  probe"


def test_foreign_keys_in_node_writes() -> None:
    """The audit check: owned labels and gpushare.io/ annotations pass; anything else is named."""
    merge = {
        "metadata": {
            "labels": {"cgpu": "true", "team": "x"},
            "annotations": {"gpushare.io/owned-labels": "{}"},
        }
    }
    assert _foreign_keys(merge, "patch") == {"label team"}
    json_patch = [
        {"op": "add", "path": "/metadata/labels/nvidia.com~1device-plugin.config", "value": "a"},
        {"op": "remove", "path": "/metadata/annotations/other.io~1x"},
        {"op": "replace", "path": "/spec/unschedulable", "value": True},
    ]
    assert _foreign_keys(json_patch, "patch") == {"annotation other.io/x"}
    assert _foreign_keys({"metadata": {"labels": {"gpushare.io/pool": "p"}}}, "patch") == set()
    assert _foreign_keys({}, "update") == {"<PUT of the whole node>"}


def test_owned_label_diff() -> None:
    """The end's label check: a pool's node holds the pool's labels, a node of no pool what it had
    before; a label outside the owned ones is never compared."""
    want = {"cgpu": "true", "gpushare.io/pool": "a"}
    assert owned_label_diff({"cgpu": "true", "gpushare.io/pool": "a", "team": "x"}, {}, want) == {}
    assert owned_label_diff({"gpushare.io/pool": "a"}, {}, want) == {"cgpu": (None, "true")}
    assert owned_label_diff({"cgpu": "false"}, {"cgpu": "false"}, None) == {}
    assert owned_label_diff({"gpushare.io/pool": "a"}, {}, None) == {"gpushare.io/pool": ("a", None)}
    # an owned label the pool does not set keeps its value from before any pool
    assert (
        owned_label_diff(
            {**want, "nvidia.com/device-plugin.config": "x"}, {"nvidia.com/device-plugin.config": "x"}, want
        )
        == {}
    )


def test_a_node_that_left_an_ack_pool_is_expected_back_at_default() -> None:
    """owned-labels: a node an ACK pool gave back has its labels from before any pool, and
    ``ack.node.gpu.schedule=default`` where it had none; what it had is kept."""
    from gpushare import constants as c
    from gpushare.devcluster.soak import restored_by_ack

    assert restored_by_ack({}) == {c.LABEL_SCHEDULE: "default"}
    had = {c.LABEL_SCHEDULE: "share", c.LABEL_PLACEMENT: "spread"}
    assert restored_by_ack(had) == had
    assert owned_label_diff({c.LABEL_SCHEDULE: "default"}, restored_by_ack({}), None) == {}
    assert owned_label_diff(
        {c.LABEL_SCHEDULE: "default", c.LABEL_CGPU: "true"}, restored_by_ack({}), None
    ) == {c.LABEL_CGPU: ("true", None)}


def test_every_invariant_has_a_break() -> None:
    """Each --break names an invariant the soak checks, and every invariant has one (webhook-errors'
    makes the webhook's rules raise in its process: no request from outside does,
    docs/how-to/soak.md)."""
    from gpushare.devcluster.soak import BREAKS, INVARIANTS

    names = {inv.split(":", 1)[0] for inv in INVARIANTS}
    assert set(BREAKS) == names


def test_a_watch_cut_is_a_fault_of_no_hold_in_every_schedule() -> None:
    """watch-cut is a fault like the others: in every schedule's first 80 %, instantaneous."""
    assert "watch-cut" in FAULTS
    for seed in (1, 126, 1664):
        cuts = [s for s in make_schedule(seed, 60) if s.kind == "watch-cut"]
        assert cuts and min(s.at for s in cuts) < 48 and all(s.hold == 0 for s in cuts)


def test_the_real_nodes_kinds_only_in_a_soak_with_it_and_the_rest_unchanged() -> None:
    """``--real-node`` adds backend-move, kubelet-restart and config-manager-kill, each in the
    first 80 %, the kubelet down a while; without it they are never scheduled."""
    from gpushare.devcluster.soak import REAL_FAULTS, REAL_KINDS, REAL_WORK

    real = make_schedule(7, 600, real=True)
    assert {s.kind for s in real} == set(REAL_KINDS)
    for kind in REAL_WORK + REAL_FAULTS:
        assert min(s.at for s in real if s.kind == kind) < 480
    assert all(s.hold > 0 for s in real if s.kind == "kubelet-restart")
    kwok = make_schedule(7, 600)
    assert not {s.kind for s in kwok} & set(REAL_WORK + REAL_FAULTS)
    assert set(REAL_WORK).isdisjoint(WORK) and set(REAL_FAULTS).isdisjoint(FAULTS)


def test_config_manager_kill_finds_a_process_by_its_name() -> None:
    """config-manager-kill finds the sidecar on the host by its process name (the real node's
    containers are this host's processes), and only processes of that name."""
    import subprocess
    import time

    from gpushare.devcluster.soak import _processes

    child = subprocess.Popen(["sleep", "30"])
    try:
        # Popen returns once the child is forked; its name is "sleep" once it has exec'd
        for _ in range(100):
            if child.pid in _processes("sleep"):
                break
            time.sleep(0.05)
        assert child.pid in _processes("sleep")
        assert child.pid not in _processes("config-manager")
    finally:
        child.kill()
        child.wait()
