"""rollout.maxUnavailable counts a node until it advertises its pool's mode (issue 24, point 8).

A Ready device plugin pod is not enough: ACK's plugin advertises the mode it read at start, and
only the node's allocatable says which one that is (policy.plugin_mode). These tests drive the
pure decide step over a simulated cluster in which plugins become Ready, register their
resources late, or never (a hung plugin), and check that no pass ever leaves more than
``maxUnavailable`` nodes of the pool restarting or not advertising the mode of their labels.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.backends.ack import evidence as pm
from gpushare.policy import NodeView, RestartRecord, apply_node_patch, plan
from gpushare.policy.decide import decide
from gpushare.policy.rollout import in_flight, select_batch

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NP = "alibabacloud.com/nodepool-id"


def pool(**spec: Any) -> GPUSharePool:
    return parse_pool(
        {"metadata": {"name": "gpu"}, "spec": {"nodeSelector": {"matchLabels": {NP: "a"}}, **spec}}
    )


def advertised(labels: Any) -> dict[str, str]:
    """What a plugin started with ``labels`` advertises (one 16 GiB GPU), as in devcluster.pluginsim."""
    mode = labels.get(c.LABEL_SCHEDULE) or c.SCHEDULE_DEFAULT
    if mode == c.SCHEDULE_CORE_MEM:
        return {c.RES_GPU_MEM: "16", c.RES_GPU_COUNT: "1", c.RES_GPU_CORE: "100"}
    if mode in (c.SCHEDULE_CGPU, c.SCHEDULE_SHARE):
        return {c.RES_GPU_MEM: "16", c.RES_GPU_COUNT: "1"}
    return {pm.RES_NVIDIA_GPU: "1"}


def record_of(n: NodeView) -> RestartRecord | None:
    return RestartRecord.parse(n.annotations.get(c.ANNOTATION_PLUGIN_RESTART))


def plugin_ready(n: NodeView, *, register: bool) -> NodeView:
    """The operator saw a new Ready plugin pod (restart Done); with ``register`` it has also
    advertised the resources of the labels it started with."""
    record = record_of(n)
    if record is not None and record.pending:
        done = RestartRecord(record.hash, record.since, "Done", record.pool, "Restarted")
        n = replace(n, annotations={**n.annotations, c.ANNOTATION_PLUGIN_RESTART: done.dump()})
    if register:
        n = replace(n, allocatable=advertised(n.labels))
    return n


def one_pass(p: GPUSharePool, state: list[NodeView]) -> list[NodeView]:
    cp = plan([p], state, now=NOW)
    decision = decide("gpu", cp.nodes, rollouts={"gpu": p.spec.rollout}, live={"gpu"}, orphans=True)
    patches = {x.node: x for x in decision.patches}
    return [apply_node_patch(n, patches[n.name]) if n.name in patches else n for n in state]


def unavailable(state: list[NodeView]) -> list[str]:
    """Nodes restarting, or not advertising the mode of their labels."""
    out = []
    for n in state:
        record = record_of(n)
        mode = n.labels.get(c.LABEL_SCHEDULE) or c.SCHEDULE_DEFAULT
        if (record is not None and record.pending) or not pm.advertises(mode, n.allocatable):
            out.append(n.name)
    return out


def settled_cgpu_nodes(n: int) -> list[NodeView]:
    """``n`` nodes of pool gpu (cgpu), restarts Done, advertising cgpu resources."""
    base = pool()
    state = [NodeView(f"n{i}", {NP: "a"}) for i in range(n)]
    cp = plan([base], state, now=NOW).by_node()
    return [plugin_ready(apply_node_patch(x, cp[x.name]), register=True) for x in state]


def test_a_node_with_a_ready_plugin_counts_until_it_advertises_the_new_mode() -> None:
    state = settled_cgpu_nodes(3)
    core = pool(computeAllocation=True, rollout={"maxUnavailable": 1})
    state = one_pass(core, state)
    assert [n.labels.get(c.LABEL_SCHEDULE) for n in state] == ["core_mem", "cgpu", "cgpu"]

    # n0's new plugin pod is Ready (restart Done) but still advertises cgpu resources.
    state = [plugin_ready(state[0], register=False), *state[1:]]
    cp = plan([core], state, now=NOW)
    assert cp.by_node()["n0"].awaiting_mode
    assert in_flight("gpu", cp.nodes) == ["n0"]
    assert select_batch("gpu", core.spec.rollout, cp.nodes) == []
    assert one_pass(core, state) == state, "no second node may start while n0 does not advertise core_mem"

    # Once n0 advertises core_mem, the next node goes.
    state = [plugin_ready(state[0], register=True), *state[1:]]
    cp = plan([core], state, now=NOW)
    assert not cp.by_node()["n0"].awaiting_mode and in_flight("gpu", cp.nodes) == []
    assert [b.node for b in select_batch("gpu", core.spec.rollout, cp.nodes)] == ["n1"]


def test_a_plugin_that_never_advertises_stops_the_rollout() -> None:
    state = settled_cgpu_nodes(3)
    core = pool(computeAllocation=True, rollout={"maxUnavailable": 1})
    for _ in range(5):  # the plugin on n0 is Ready and never registers: nothing else moves
        state = [plugin_ready(n, register=False) if n.name == "n0" else n for n in one_pass(core, state)]
    assert [n.labels.get(c.LABEL_SCHEDULE) for n in state] == ["core_mem", "cgpu", "cgpu"]
    assert unavailable(state) == ["n0"]


def test_a_node_that_advertises_nothing_yet_is_not_counted_before_gpushare_restarts_it() -> None:
    """Nodes waiting for their turn are not unavailable: only restarts gpushare made count."""
    p = pool(rollout={"maxUnavailable": 2})
    state = [NodeView(f"n{i}", {NP: "a"}) for i in range(4)]  # no allocatable at all, no record
    cp = plan([p], state, now=NOW)
    assert in_flight("gpu", cp.nodes) == []
    assert [b.node for b in select_batch("gpu", p.spec.rollout, cp.nodes)] == ["n0", "n1"]


def test_restart_never_pools_do_not_wait_for_the_plugin() -> None:
    """With devicePlugin.restart Never gpushare disrupts nothing, so nothing holds the labels back."""
    state = settled_cgpu_nodes(3)
    never = pool(computeAllocation=True, devicePlugin={"restart": "Never"})
    state = one_pass(never, state)
    assert [n.labels.get(c.LABEL_SCHEDULE) for n in state] == ["core_mem"] * 3


# --- the property ----------------------------------------------------------------------------

SPECS: list[dict[str, Any]] = [
    {"computeAllocation": True},
    {"memoryIsolation": False},
    {"placement": "spread"},
    {"memoryIsolation": False, "placement": "spread"},
]

events = st.lists(
    st.one_of(
        st.just(("pass", 0)),
        st.tuples(st.just("ready"), st.integers(0, 5)),
        st.tuples(st.just("ready+register"), st.integers(0, 5)),
        st.tuples(st.just("register"), st.integers(0, 5)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 6),
    spec=st.sampled_from(SPECS),
    max_unavailable=st.sampled_from([1, 2, 3, "34%", "50%"]),
    hung=st.sets(st.integers(0, 5), max_size=2),
    steps=events,
)
def test_never_more_than_max_unavailable_nodes_not_advertising_their_mode(
    n: int, spec: dict[str, Any], max_unavailable: int | str, hung: set[int], steps: list[tuple[str, int]]
) -> None:
    target = pool(**spec, rollout={"maxUnavailable": max_unavailable})
    budget = target.spec.rollout.max_unavailable_for(n)
    state = settled_cgpu_nodes(n)
    assert unavailable(state) == []
    hung_names = {f"n{i}" for i in hung}

    def event(kind: str, i: int) -> None:
        nonlocal state
        if kind == "pass":
            state = one_pass(target, state)
            bad = unavailable(state)
            assert len(bad) <= budget, f"{bad} unavailable at once (maxUnavailable {max_unavailable})"
            return
        if i >= n:
            return
        node = state[i]
        record = record_of(node)
        if kind in ("ready", "ready+register") and record is not None and record.pending:
            node = plugin_ready(node, register=kind == "ready+register" and node.name not in hung_names)
        elif kind == "register" and record is not None and not record.pending and node.name not in hung_names:
            node = plugin_ready(node, register=True)
        state = [*state[:i], node, *state[i + 1 :]]

    for kind, i in steps:
        event(kind, i)
    # Then every plugin comes back (except the hung ones): the rollout ends, or stops at a hung node.
    for _ in range(4 * n + 2):
        event("pass", 0)
        for i in range(n):
            event("ready+register", i)
            event("register", i)
    done = [x.name for x in state if x.labels.get(c.LABEL_SCHEDULE) == target.spec.mode]
    stuck = unavailable(state)
    if not stuck:
        assert len(done) == n, "with no hung plugin in the way, every node gets the new mode"
    else:
        # A hung plugin stops the rollout (cgpu -> share advertises the same resources: no hang shows)
        assert set(stuck) <= hung_names and len(stuck) <= budget


def test_the_pool_says_where_a_stopped_rollout_waits() -> None:
    """Past readyTimeoutSeconds the hung node is Degraded (PluginModeStale) and Progressing names
    it as the node the others wait for, with the fix."""
    from datetime import timedelta

    from gpushare.policy.status import pool_status

    state = settled_cgpu_nodes(3)
    core = pool(computeAllocation=True, devicePlugin={"readyTimeoutSeconds": 30})
    state = [plugin_ready(n, register=False) if n.name == "n0" else n for n in one_pass(core, state)]
    views = {n.name: n for n in state}

    def status_at(seconds: int) -> dict[str, Any]:
        now = NOW + timedelta(seconds=seconds)
        return pool_status(core, plan([core], state, now=now), views, [], now=now)

    def cond(status: dict[str, Any], ctype: str) -> dict[str, Any]:
        return next(x for x in status["conditions"] if x["type"] == ctype)

    early = status_at(10)  # within the timeout: still rolling out, n0 waits for its plugin
    assert cond(early, "Progressing")["reason"] == "RollingOut"
    assert {s["name"]: s["reason"] for s in early["nodeStatuses"]}["n0"] == "PluginModePending"

    late = status_at(120)
    progressing = cond(late, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "RolloutStalled")
    assert progressing["message"].startswith(
        "2 node(s) wait for their turn: rollout.maxUnavailable is used up by n0, whose device plugin"
    )
    assert "label the node gpushare.io/skip=true" in progressing["message"]
    assert (cond(late, "Degraded")["reason"]) == "PluginModeStale"
