"""A MIG switch followed through the backend seam: gpushare's record ``gpushare.io/mig-switch``
written with the label, marked once the MIG manager is seen working, a stale ``success`` never
taken, and ``failed``, a stuck state and paused operands named on the pool's status, its Events and
its metrics (``gpushare.backends.nvidia.mig``, ``policy.status``, ``policy.events``, ``metrics``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from gpushare import constants as c
from gpushare import metrics
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.backends.ack import ACK
from gpushare.backends.nvidia import MIG, NVIDIA
from gpushare.backends.nvidia import migstate as ms
from gpushare.devcluster import migsim
from gpushare.policy import NodeView, RestartRecord, apply_node_patch, plan
from gpushare.policy.events import Reported, switch_events
from gpushare.policy.planner import Action, Ownership, awaiting_mode
from gpushare.policy.status import awaiting_plugin_mode, pool_status
from gpushare.reconcile.store import ClusterState

NP = "np"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
G7 = {"profiles": {"1g.5gb": 7}}
#: What two A100-40GB advertise under G7 (and under the chart's all-1g.5gb: the same devices).
SEVEN = {"nvidia.com/mig-1g.5gb": "14"}
KEY = ms.ANNOTATION_MIG_SWITCH


def pool(timeout: int = 300) -> GPUSharePool:
    spec = {
        "nodeSelector": {"matchLabels": {NP: "m"}},
        "nvidia": {"strategy": "MIG", "mig": {"geometry": [G7]}},
        "devicePlugin": {"readyTimeoutSeconds": timeout},
    }
    return parse_pool(
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": "mig", "generation": 2},
            "spec": spec,
        }
    )


def switched(
    p: GPUSharePool, state: str, *, at: datetime = T0, operands: dict[str, str] | None = None
) -> NodeView:
    """A node of the pool once gpushare's patch is applied at ``at`` (its record written), carrying
    MIG manager state ``state`` and the G7 devices, its plugin reload recorded Done."""
    before = NodeView(
        "n1",
        {NP: "m", c.LABEL_MIG_CONFIG: "all-1g.5gb", c.LABEL_NVIDIA_GPU_COUNT: "2"},
        allocatable=SEVEN,
    )
    patched = apply_node_patch(before, plan([p], [before], now=at).by_node()["n1"])
    record = RestartRecord.parse(patched.annotations[c.ANNOTATION_PLUGIN_RESTART])
    assert record is not None
    done = RestartRecord(record.hash, record.since, "Done", record.pool, backend=record.backend)
    return NodeView(
        "n1",
        {**patched.labels, c.LABEL_MIG_CONFIG_STATE: state, **(operands or {})},
        {**patched.annotations, c.ANNOTATION_PLUGIN_RESTART: done.dump()},
        allocatable=SEVEN,
    )


def status_of(p: GPUSharePool, node: NodeView, now: datetime) -> dict[str, Any]:
    return pool_status(p, plan([p], [node], now=now), {node.name: node}, [], now=now)


def node_status(status: dict[str, Any]) -> tuple[str, str, str]:
    (s,) = status["nodeStatuses"]
    return s["phase"], s["reason"], s.get("message") or ""


def cond(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(x for x in status["conditions"] if x["type"] == ctype)


def seen(node: NodeView) -> NodeView:
    """The node once the pass wrote what the backend saw of the switch under way."""
    patch = MIG.switch_seen({**node.labels, c.LABEL_MIG_CONFIG_STATE: "pending"}, node.annotations)
    assert patch is not None
    return NodeView(node.name, node.labels, {**node.annotations, **patch}, allocatable=node.allocatable)


def test_the_record_goes_in_the_same_patch_as_the_label_and_leaves_with_the_node() -> None:
    p = pool()
    node = NodeView("n1", {NP: "m", c.LABEL_MIG_CONFIG: "all-1g.5gb"})
    got = plan([p], [node], now=T0).by_node()["n1"]
    config = MIG.pool_mode(p.spec)
    assert got.action is Action.APPLY and got.label_patch[c.LABEL_MIG_CONFIG] == config
    assert json.loads(str(got.annotation_patch[KEY])) == {
        "config": config,
        "since": "2026-01-01T00:00:01Z",  # the patch's time, as the restart record's (the next second)
        "seenWorking": False,
    }
    # A node already at the pool's config: no switch, no record.
    at = apply_node_patch(node, got)
    again = NodeView("n1", at.labels, {k: v for k, v in at.annotations.items() if k != KEY})
    assert KEY not in plan([p], [again], now=T0).by_node()["n1"].annotation_patch
    # Leaving (the pool deleted): the label given back, the record dropped.
    owned = Ownership("mig", {**dict.fromkeys(c.MANAGED_LABELS), c.LABEL_MIG_CONFIG: "all-1g.5gb"}).dump()
    leaving = NodeView("n1", at.labels, {**at.annotations, c.ANNOTATION_OWNED: owned})
    gone = plan([p], [leaving], now=T0, deleting={"mig"}).by_node()["n1"]
    assert gone.action is Action.RESTORE and gone.annotation_patch[KEY] is None
    # The other backends keep no record.
    assert (
        ACK.switch_annotations({}, {}, {c.LABEL_MIG_CONFIG: "x"}, "2026-01-01T00:00:00Z", staying=True) == {}
    )
    assert NVIDIA.switch_seen({c.LABEL_MIG_CONFIG_STATE: "pending"}, {KEY: "{}"}) is None


def test_a_stale_success_with_the_new_geometrys_devices_is_not_taken_until_the_manager_worked() -> None:
    p = pool()
    config = MIG.pool_mode(p.spec)
    stale = switched(p, "success")
    # The previous config's success, the devices equal: not advertised, not Ready, still in flight.
    assert not MIG.advertises(config, SEVEN, stale.labels, stale.annotations)
    assert MIG.advertises(config, SEVEN, stale.labels)  # what the devices alone would say
    record = RestartRecord.parse(stale.annotations[c.ANNOTATION_PLUGIN_RESTART])
    assert awaiting_mode(stale, record, MIG)
    status = status_of(p, stale, T0 + timedelta(seconds=5))
    phase, reason, message = node_status(status)
    assert (phase, reason) == ("Restarting", ms.WAITING) and "is from before" in message
    assert cond(status, "Ready")["status"] == "False" and awaiting_plugin_mode(status)
    # The manager seen pending: the record marked; its success then confirms the node.
    assert MIG.switch_seen(stale.labels, stale.annotations) is None  # success: nothing seen yet
    done = seen(stale)
    assert json.loads(done.annotations[KEY])["seenWorking"] is True
    assert MIG.advertises(config, SEVEN, done.labels, done.annotations)
    assert MIG.switch_seen({**done.labels, c.LABEL_MIG_CONFIG_STATE: "pending"}, done.annotations) is None
    status = status_of(p, done, T0 + timedelta(seconds=5))
    assert node_status(status)[0] == "Ready" and cond(status, "Ready")["status"] == "True"
    assert not awaiting_plugin_mode(status)


def test_failed_after_the_switch_names_the_node_and_the_config_with_a_warning_event() -> None:
    p = pool()
    config = MIG.pool_mode(p.spec)
    # failed before the manager was seen working is the previous config's: not this one's.
    early = status_of(p, switched(p, "failed"), T0 + timedelta(seconds=5))
    assert node_status(early)[:2] == ("Restarting", ms.WAITING)
    failed = seen(switched(p, "failed"))
    status = status_of(p, failed, T0 + timedelta(seconds=5))
    phase, reason, message = node_status(status)
    assert (phase, reason) == ("Failed", ms.FAILED_REASON) and config in message, message
    degraded = cond(status, "Degraded")
    assert (
        degraded["reason"] == ms.FAILED_REASON
        and "n1" in degraded["message"]
        and config in degraded["message"]
    )
    events, after = switch_events(status["nodeStatuses"], MIG.switch_reasons, Reported())
    assert [(e.reason, e.type, e.node) for e in events] == [
        (ms.FAILED_REASON, "Warning", None),
        (ms.FAILED_REASON, "Warning", "n1"),
    ]
    assert "n1" in events[0].message and config in events[0].message
    # Once per node and reason, not every pass; again after it cleared and came back.
    assert switch_events(status["nodeStatuses"], MIG.switch_reasons, after)[0] == []
    _, cleared = switch_events([], MIG.switch_reasons, after)
    assert len(switch_events(status["nodeStatuses"], MIG.switch_reasons, cleared)[0]) == 2
    # Another backend names none of its Failed nodes this way.
    assert switch_events(status["nodeStatuses"], NVIDIA.switch_reasons, Reported())[0] == []


def test_a_state_stuck_past_the_timeout_and_operands_left_paused_are_named() -> None:
    p = pool(timeout=60)
    late = T0 + timedelta(seconds=61)
    never = node_status(status_of(p, switched(p, "success"), late))
    assert never[:2] == ("Failed", ms.STUCK) and "not been seen working" in never[2]
    pending = seen(switched(p, "pending"))
    assert node_status(status_of(p, pending, T0 + timedelta(seconds=30)))[:2] == ("Restarting", ms.WAITING)
    stuck = node_status(status_of(p, pending, late))
    assert stuck[:2] == ("Failed", ms.STUCK) and "still pending" in stuck[2]
    paused = seen(switched(p, "pending", operands={"nvidia.com/gpu.deploy.device-plugin": ms.PAUSED}))
    status = status_of(p, paused, late)
    phase, reason, message = node_status(status)
    assert (phase, reason) == ("Failed", ms.OPERANDS_PAUSED) and "device-plugin" in message
    assert cond(status, "Degraded")["reason"] == ms.OPERANDS_PAUSED


def test_the_failed_nodes_metric_counts_by_reason_and_drops_to_zero() -> None:
    def value(reason: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(
            "gpushare_pool_failed_nodes", {"pool": "mt", "reason": reason}
        )

    failed = {"phase": "Failed", "reason": ms.FAILED_REASON, "name": "a"}
    metrics.set_pool_status(
        "mt", {"nodeStatuses": [failed, {**failed, "name": "b"}]}, ready_timeout_seconds=60
    )
    assert value(ms.FAILED_REASON) == 2
    metrics.set_pool_status(
        "mt", {"nodeStatuses": [{"phase": "Ready", "name": "a"}]}, ready_timeout_seconds=60
    )
    assert value(ms.FAILED_REASON) == 0
    metrics.forget_pool("mt")
    assert value(ms.FAILED_REASON) is None


def test_the_store_keeps_what_the_watch_saw_until_the_record_moves_on() -> None:
    p = pool()
    node = switched(p, "pending")
    patch = MIG.switch_seen(node.labels, node.annotations)
    assert patch is not None
    state = ClusterState()
    state.note_switch(node, patch)
    later = NodeView("n1", {**node.labels, c.LABEL_MIG_CONFIG_STATE: "success"}, node.annotations)
    assert MIG.switch_seen(later.labels, later.annotations) is None  # the pass came too late
    assert state.switch_seen(later) == patch  # the watch saw it
    moved = NodeView("n1", later.labels, {**later.annotations, KEY: "another record"})
    assert state.switch_seen(moved) is None and "n1" not in state.switches_seen


def test_the_simulated_manager_can_wait_before_it_starts_keeping_the_previous_success() -> None:
    gpus = (("NVIDIA A100-SXM4-40GB", True),) * 2
    configs = migsim.configs_in({migsim.CHART_KEY: migsim.CHART_DOCUMENT})
    before = migsim.MigState("all-1g.5gb", migsim.SUCCESS, T0, ((("1g.5gb", 7),),) * 2)
    labels = {c.LABEL_MIG_CONFIG: "all-disabled"}
    start = timedelta(seconds=5)
    waiting = migsim.decide(labels, before, configs, gpus, T0 + timedelta(seconds=2), start=start, noticed=T0)
    assert waiting is not None and waiting.state == before and waiting.labels == {}
    assert waiting.again == timedelta(seconds=3)
    going = migsim.decide(labels, before, configs, gpus, T0 + start, start=start, noticed=T0)
    assert going is not None and going.state.state == migsim.PENDING


def managed(manager: str, at: str, *labels: str) -> dict[str, Any]:
    """A ``metadata.managedFields`` entry: ``manager`` last changed its fields (these labels) at ``at``."""
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": at,
        "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in labels}}},
    }


def test_the_node_views_keep_when_another_manager_last_wrote_the_state_label() -> None:
    state = c.LABEL_MIG_CONFIG_STATE
    obj = {
        "metadata": {
            "name": "n1",
            "labels": {state: "success"},
            "managedFields": [
                managed("nvidia-mig-manager", "2026-01-01T00:00:02Z", state, "nvidia.com/gpu.deploy.x"),
                managed("kubectl-label", "2026-01-01T00:00:05Z", state),
                # gpushare's own entries never count, nor another manager's without the label.
                managed(c.OPERATOR_FIELD_MANAGER, "2026-01-01T00:00:09Z", state, c.LABEL_MIG_CONFIG),
                managed(c.AGENT_FIELD_MANAGER, "2026-01-01T00:00:09Z", state),
                managed("kubelet", "2026-01-01T00:00:09Z", "kubernetes.io/hostname"),
                {"manager": "odd", "time": "not a time", "fieldsV1": None},
            ],
        }
    }
    expected = {state: T0 + timedelta(seconds=5)}
    assert NodeView.project(obj).label_times == expected == NodeView.from_obj(obj).label_times
    assert MIG.timed_labels == (state,) and ACK.timed_labels == NVIDIA.timed_labels == ()
    mine = {
        "metadata": {
            "name": "n1",
            "managedFields": [managed(c.OPERATOR_FIELD_MANAGER, "2026-01-01T00:00:09Z", state)],
        }
    }
    assert NodeView.project(mine).label_times == {}


def test_a_success_the_manager_wrote_after_the_record_is_taken_though_pending_was_never_seen() -> None:
    """The operator was down for the whole of ``pending``: the node's managedFields say the MIG
    manager wrote the state label after gpushare's record (written at T0+1s, to the second), so the
    switch counts as seen: the record marked, the node confirmed. The same second is not taken."""
    p = pool()
    config = MIG.pool_mode(p.spec)
    node = switched(p, "success")
    state = c.LABEL_MIG_CONFIG_STATE
    for written in (T0, T0 + timedelta(seconds=1, milliseconds=500)):  # before, the same second
        times = {state: written}
        later = NodeView(node.name, node.labels, node.annotations, allocatable=SEVEN, label_times=times)
        assert MIG.switch_seen(later.labels, later.annotations, later.label_times) is None
        assert not MIG.advertises(config, SEVEN, later.labels, later.annotations, later.label_times)
        assert node_status(status_of(p, later, T0 + timedelta(seconds=5)))[:2] == ("Restarting", ms.WAITING)
        assert node_status(status_of(p, later, T0 + timedelta(seconds=400)))[:2] == ("Failed", ms.STUCK)
    after = NodeView(
        node.name,
        node.labels,
        node.annotations,
        allocatable=SEVEN,
        label_times={state: T0 + timedelta(seconds=2)},
    )
    patch = MIG.switch_seen(after.labels, after.annotations, after.label_times)
    assert patch is not None and json.loads(patch[KEY])["seenWorking"] is True
    assert MIG.advertises(config, SEVEN, after.labels, after.annotations, after.label_times)
    for now in (T0 + timedelta(seconds=5), T0 + timedelta(seconds=400)):
        status = status_of(p, after, now)
        assert node_status(status)[0] == "Ready" and cond(status, "Ready")["status"] == "True"
