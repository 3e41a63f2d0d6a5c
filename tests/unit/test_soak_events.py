"""The soak's events-agree check (``gpushare.devcluster.soakaudit``): each change of a node's labels
by the operator is named by a write Event of a pool soon after it, unless its posting failed or
its replica was killed first (counted apart), and no write Event names a node the operator did not
write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpushare.devcluster.soakaudit import Told, label_writes, told, unfounded, untold_writes
from gpushare.policy.events import names

OP = "gpushare-operator"
T0 = datetime(2026, 12, 7, 10, 0, 0, tzinfo=UTC)
WITHIN = timedelta(seconds=30)


def _at(second: float) -> datetime:
    return T0 + timedelta(seconds=second)


def _write(
    verb: str, second: float, labels: dict[str, Any], user: str = OP, node: str = "n1"
) -> dict[str, Any]:
    return {
        "verb": verb,
        "objectRef": {"resource": "nodes", "name": node},
        "user": {"username": user},
        "responseStatus": {"code": 200},
        "requestObject": {"metadata": {"name": node, "labels": labels}},
        "stageTimestamp": _at(second).isoformat(),
    }


def _applied(second: float, *nodes: str) -> Told:
    t = told("soak-a", "LabelsApplied", _at(second).replace(microsecond=0), _message(nodes))
    assert t is not None
    return t


def _message(nodes: tuple[str, ...]) -> str:
    return f"Applied cgpu labels to {len(nodes)} node(s): {names(list(nodes))}"


def test_the_events_names_are_read_back_as_the_operator_writes_them() -> None:
    nodes = tuple(f"gpu-{i}" for i in range(10))
    t = told("p", "LabelsApplied", T0, _message(nodes))
    assert t is not None and t.nodes == frozenset(nodes[:8]) and t.more == 2
    drift = told(
        "p",
        "DriftCorrected",
        T0,
        "Put back managed labels edited by hand on 2 node(s): a: cgpu=true; b: removed x",
    )
    assert drift is not None and drift.nodes == {"a", "b"} and drift.more == 0
    assert told("p", "NodeHeld", T0, "1 node(s) held: a: pods") is None


def test_only_writes_that_change_a_label_count_replayed_from_the_creation() -> None:
    log = [
        _write("create", 0, {"cgpu": "true", "pool": "np"}, user="admin"),
        _write("patch", 1, {"cgpu": "true"}),  # the same value: no change
        _write("patch", 2, {"ack.node.gpu.schedule": "cgpu"}),
        _write("patch", 3, {"cgpu": None}),
    ]
    got = [(w.at, w.changed) for w in label_writes(log)]
    assert got == [(_at(2), ("ack.node.gpu.schedule",)), (_at(3), ("cgpu",))]


def test_a_write_named_by_an_event_of_its_second_or_later_passes() -> None:
    writes = label_writes([_write("create", 0, {}, user="admin"), _write("patch", 5.7, {"cgpu": "true"})])
    assert untold_writes(writes, [_applied(5.7, "n1")], by=OP, within=WITHIN, failed_posts=[], kills=[]) == []


def test_a_write_no_event_names_is_a_violation_unless_its_event_was_lost() -> None:
    writes = label_writes([_write("create", 0, {}, user="admin"), _write("patch", 5, {"cgpu": "true"})])
    late, other, before = _applied(40, "n1"), _applied(6, "n2"), _applied(3, "n1")
    got = untold_writes(writes, [late, other, before], by=OP, within=WITHIN, failed_posts=[], kills=[])
    assert [(u.write.node, u.lost) for u in got] == [("n1", None)]
    logged = untold_writes(writes, [], by=OP, within=WITHIN, failed_posts=[_at(6)], kills=[])
    assert logged[0].lost is not None and "posting failed" in logged[0].lost
    killed = untold_writes(writes, [], by=OP, within=WITHIN, failed_posts=[], kills=[_at(9)])
    assert killed[0].lost is not None and "killed" in killed[0].lost
    # a kill or a failure long after the write does not excuse it
    assert (
        untold_writes(writes, [], by=OP, within=WITHIN, failed_posts=[_at(60)], kills=[_at(60)])[0].lost
        is None
    )


def test_writes_of_others_owe_no_event() -> None:
    writes = label_writes(
        [_write("create", 0, {}, user="admin"), _write("patch", 5, {"pool": "x"}, user="admin")]
    )
    assert untold_writes(writes, [], by=OP, within=WITHIN, failed_posts=[], kills=[]) == []


def test_an_event_that_names_a_node_not_written_is_unfounded() -> None:
    event = _applied(10, "n1", "n2")
    got = unfounded([event], [("n1", _at(9.5)), ("n2", _at(-30))], within=WITHIN)
    assert [node for _, node in got] == ["n2"]
    assert unfounded([event], [("n1", _at(9.5)), ("n2", _at(10.9))], within=WITHIN) == []
