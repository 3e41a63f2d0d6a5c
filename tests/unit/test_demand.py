"""Demand (policy.demand), the loan seam of the planner and the fit of advise (policy.advise)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpushare import constants as c
from gpushare.api.loan import LoanRecord
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.policy import Action, NodeView, PodView, plan
from gpushare.policy.advise import advise, check
from gpushare.policy.demand import PoolDemand, WaitingPod, compute, gpu_shortage, waiting_pod
from gpushare.policy.planner import desired_labels

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
NP = "alibabacloud.com/nodepool-id"


def pool(name: str, np: str, **spec: Any) -> GPUSharePool:
    return parse_pool(
        {"metadata": {"name": name}, "spec": {"nodeSelector": {"matchLabels": {NP: np}}, **spec}}
    )


def settled(name: str, p: GPUSharePool, *, gpus: int = 1, mem: int = 16, **kw: Any) -> NodeView:
    """A node of pool ``p`` with its labels applied and its plugin advertising the mode."""
    alloc = {c.RES_GPU_COUNT: str(gpus), c.RES_GPU_MEM: str(mem * gpus)}
    if p.spec.mode == c.SCHEDULE_CORE_MEM:
        alloc[c.RES_GPU_CORE] = str(100 * gpus)
    labels = {NP: str(p.spec.node_selector.match_labels[NP]), **desired_labels(p.spec, p.name)}
    owned = json.dumps({"pool": p.name, "prior": {}})
    restart = json.dumps({"hash": "x", "since": "2026-01-01T00:00:00Z", "state": "Done", "pool": p.name})
    return NodeView(
        name,
        labels,
        annotations={c.ANNOTATION_OWNED: owned, c.ANNOTATION_PLUGIN_RESTART: restart},
        allocatable=alloc,
        **kw,
    )


def pending_obj(
    name: str,
    *,
    mem: int,
    core: int = 0,
    selector: dict[str, str] | None = None,
    message: str = "0/3 nodes are available: 3 Insufficient aliyun.com/gpu-mem.",
    since: str = "2026-12-01T11:50:00Z",
    spread: int | None = None,
) -> dict[str, Any]:
    limits = {c.RES_GPU_MEM: str(mem)}
    if core:
        limits[c.RES_GPU_CORE] = str(core)
    labels = {c.RES_GPU_COUNT: str(spread)} if spread else {}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels},
        "spec": {
            "nodeSelector": selector or {},
            "containers": [{"name": "c", "resources": {"limits": limits}}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": since,
                }
            ],
        },
    }


def wait(name: str, **kw: Any) -> WaitingPod:
    pod = waiting_pod(pending_obj(name, **kw))
    assert pod is not None
    return pod


def test_gpu_shortage_reads_the_scheduler_message() -> None:
    assert gpu_shortage("0/2 nodes are available: 2 Insufficient aliyun.com/gpu-core.percentage.")
    assert gpu_shortage("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.")
    assert gpu_shortage("0/2 nodes: 1 Insufficient cpu, 1 Insufficient aliyun.com/gpu-mem.")
    assert not gpu_shortage("0/2 nodes are available: 2 Insufficient cpu.")


def test_waiting_pod_only_for_unschedulable_gpu_pods() -> None:
    pod = wait("a", mem=8, core=50, spread=None)
    assert (pod.request(c.RES_GPU_MEM), pod.request(c.RES_GPU_CORE), pod.gpus, pod.ref) == (8, 50, 1, "ns/a")
    assert pod.since == datetime(2026, 12, 1, 11, 50, tzinfo=UTC)
    assert wait("s", mem=8, spread=2).gpus == 2
    cpu_only = pending_obj("b", mem=8, message="0/3 nodes are available: 3 Insufficient memory.")
    assert waiting_pod(cpu_only) is None
    bound = pending_obj("c", mem=8)
    bound["spec"]["nodeName"] = "n1"
    assert waiting_pod(bound) is None
    not_gpu = pending_obj("d", mem=8)
    not_gpu["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert waiting_pod(not_gpu) is None
    fresh = pending_obj("e", mem=8)
    fresh["status"]["conditions"] = []  # not yet seen by the scheduler
    assert waiting_pod(fresh) is None


def test_planner_puts_a_lent_node_in_the_borrower_and_back() -> None:
    a, b = pool("a", "np-a"), pool("b", "np-b", computeAllocation=True)
    n = settled("n1", a)
    loan = LoanRecord("a", "b", "2026-12-01T12:00:00Z")
    lent = NodeView(
        n.name, n.labels, {**n.annotations, c.ANNOTATION_LOAN: loan.dump()}, allocatable=n.allocatable
    )
    p = plan([a, b], [lent], now=NOW).nodes[0]
    assert p.pool == "b" and p.action is Action.APPLY
    assert p.label_patch == {c.LABEL_SCHEDULE: "core_mem", c.LABEL_POOL: "b"}
    assert p.restart_plugin
    # The borrower gone, or a loan from a pool that does not select the node: ignored.
    assert plan([a], [lent], now=NOW).nodes[0].action is Action.NOOP
    other = LoanRecord("x", "b").dump()
    stray = NodeView(n.name, n.labels, {**n.annotations, c.ANNOTATION_LOAN: other}, allocatable=n.allocatable)
    assert plan([a, b], [stray], now=NOW).nodes[0].pool == "a"
    assert LoanRecord.parse("not json") is None and LoanRecord.parse('{"from": "a"}') is None
    assert LoanRecord.parse(loan.dump()) == loan


def _demand(pools: list[GPUSharePool], nodes: list[NodeView], waiting: list[WaitingPod],
            bound: list[PodView] = ()) -> dict[str, PoolDemand]:  # type: ignore[assignment]  # fmt: skip
    cp = plan(pools, nodes, bound, now=NOW)
    return compute(pools, cp, {n.name: n for n in nodes}, bound, waiting)


def test_demand_counts_waiting_pods_and_idle_nodes_per_pool() -> None:
    cg, core = pool("cgpu", "np-a"), pool("core", "np-b", computeAllocation=True)
    nodes = [
        settled("a1", cg),
        settled("a2", cg),
        settled("a3", cg, unschedulable=True),
        settled("a4", cg, ready=False),
        settled("b1", core),
    ]
    busy = [
        PodView(
            "ns", "run", node_name="b1", phase="Running", requests={c.RES_GPU_MEM: 16, c.RES_GPU_CORE: 100}
        ),
        PodView("ns", "run2", node_name="a2", phase="Running", requests={c.RES_GPU_MEM: 2}),
    ]
    waiting = [
        wait("j1", mem=8, core=50, selector={c.LABEL_POOL: "core"}, since="2026-12-01T11:55:00Z"),
        wait("j2", mem=4, core=20, selector={NP: "np-b"}, since="2026-12-01T11:40:00Z"),
        wait("m1", mem=30, selector={c.LABEL_POOL: "cgpu"}),
    ]
    d = _demand([cg, core], nodes, waiting, busy)
    assert [p.ref for p in d["core"].waiting] == ["ns/j2", "ns/j1"]  # oldest first
    assert (d["core"].requested(c.RES_GPU_MEM), d["core"].requested(c.RES_GPU_CORE)) == (12, 70)
    assert d["core"].oldest == datetime(2026, 12, 1, 11, 40, tzinfo=UTC)
    assert d["core"].idle == ()
    assert d["cgpu"].idle == ("a1",)  # a2 busy, a3 cordoned, a4 not Ready
    status = d["core"].status()
    assert status["pendingPods"] == 2 and status["oldestPendingSince"] == "2026-12-01T11:40:00Z"
    assert status["pods"] == ["ns/j2", "ns/j1"] and status["idleNodes"] == 0
    assert "oldestPendingSince" not in PoolDemand("x").status()


def test_demand_judges_a_pool_on_all_its_nodes_while_one_of_them_moves() -> None:
    """The one targeting (admission's): a pool is reached when the pod can match one of its nodes.
    While a node of the pool is still being switched, the pool is judged on all its nodes, not on
    that one alone: a pod selecting a label only a settled node carries waits for the pool."""
    cg = pool("cgpu", "np-a")
    zoned = settled("a1", cg)
    nodes = [
        NodeView(
            zoned.name, {**zoned.labels, "zone": "z1"}, zoned.annotations, allocatable=zoned.allocatable
        ),
        NodeView("a2", {NP: "np-a"}, allocatable=dict(zoned.allocatable)),  # not switched yet
    ]
    assert plan([cg], nodes, now=NOW).nodes[1].action is not Action.NOOP
    waiting = [wait("z", mem=30, selector={c.LABEL_POOL: "cgpu", "zone": "z1"})]
    assert [p.ref for p in _demand([cg], nodes, waiting)["cgpu"].waiting] == ["ns/z"]
    elsewhere = [wait("y", mem=30, selector={c.LABEL_POOL: "cgpu", "zone": "z9"})]
    assert _demand([cg], nodes, elsewhere)["cgpu"].waiting == ()


def test_advise_moves_an_idle_cgpu_node_to_the_waiting_core_pool() -> None:
    cg, core = pool("cgpu", "np-a"), pool("core", "np-b", computeAllocation=True)
    nodes = [settled("a1", cg, gpus=2, mem=16), settled("a2", cg), settled("b1", core)]
    waiting = [
        wait("j1", mem=8, core=60, selector={c.LABEL_POOL: "core"}),
        wait("j2", mem=8, core=60, selector={c.LABEL_POOL: "core"}),
        wait("j3", mem=8, core=60, selector={NP: "np-b"}),  # cannot reach a borrowed node
        wait("big", mem=20, core=10, selector={c.LABEL_POOL: "core"}),  # more than one GPU has
    ]
    d = _demand(
        [cg, core],
        nodes,
        waiting,
        [
            PodView(
                "ns", "r", node_name="b1", phase="Running", requests={c.RES_GPU_MEM: 16, c.RES_GPU_CORE: 100}
            )
        ],
    )
    out = advise([cg, core], d, {n.name: n for n in nodes}, now=NOW)
    assert len(out.moves) == 1
    move = out.moves[0]
    # j1 and j2 each need 60 % of a GPU: two GPUs, so the 2-GPU node a1 (first by name) takes both.
    assert (move.node, move.lender, move.borrower) == ("a1", "cgpu", "core")
    assert move.pods == ("ns/j1", "ns/j2")
    assert move.plan is not None and move.plan.restart_plugin
    assert move.plan.label_patch == {c.LABEL_SCHEDULE: "core_mem", c.LABEL_POOL: "core"}
    assert {s.pod.ref for s in out.pending} == {"ns/j3", "ns/big"}
    assert check(out, [cg, core], {n.name: n for n in nodes}, {p.ref: p for p in waiting}) == []


def test_advise_keeps_idle_and_honours_spread_and_units() -> None:
    lender = pool("cgpu", "np-a", lending={"to": ["mib"], "keepIdle": 1})
    mib = pool("mib", "np-b", devicePlugin={"memoryUnit": "MiB"})
    nodes = [settled("a1", lender, gpus=2, mem=8), settled("a2", lender, gpus=2, mem=8)]
    waiting = [wait("s", mem=12288, spread=2, selector={c.LABEL_POOL: "mib"})]  # 6 GiB on each of 2
    d = _demand([lender, mib], nodes, waiting)
    out = advise([lender, mib], d, {n.name: n for n in nodes}, now=NOW)
    assert [m.node for m in out.moves] == ["a2"]  # a1 is kept idle (keepIdle 1)
    assert out.moves[0].gpus == ((8192, 0), (8192, 0))
    assert dict(out.moves[0].placements[0].gpus) == {0: (6144, 0), 1: (6144, 0)}
    assert out.idle_left["cgpu"] == ()
    too_big = [wait("t", mem=20480, spread=2, selector={c.LABEL_POOL: "mib"})]
    out = advise([lender, mib], _demand([lender, mib], nodes, too_big), {n.name: n for n in nodes}, now=NOW)
    assert out.moves == () and [s.pod.ref for s in out.pending] == ["ns/t"]


# --- property: never a move that does not make a pod fit -----------------------------------------

POOLS = [
    pool("cg", "np-cg"),
    pool("core", "np-core", computeAllocation=True),
    pool("sh", "np-sh", memoryIsolation=False, placement="spread"),
    pool("mib", "np-mib", devicePlugin={"memoryUnit": "MiB"}),
]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeView], list[WaitingPod]]:
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        p = draw(st.sampled_from(POOLS))
        gpus = draw(st.integers(1, 4))
        mem = draw(st.sampled_from([8, 15, 16, 24])) * (1024 if p.name == "mib" else 1)
        nodes.append(settled(f"n{i}", p, gpus=gpus, mem=mem))
    waiting = []
    for i in range(draw(st.integers(1, 8))):
        p = draw(st.sampled_from(POOLS))
        unit = 1024 if p.name == "mib" else 1
        core = (
            draw(st.sampled_from([0, 0, 5, 50, 100]))
            if p.name == "core"
            else draw(st.sampled_from([0, 0, 30]))
        )
        spread = draw(st.sampled_from([None, None, 2, 3]))
        mem = draw(st.integers(1, 40)) * unit
        key = draw(st.sampled_from([c.LABEL_POOL, NP]))
        selector = (
            {c.LABEL_POOL: p.name}
            if key == c.LABEL_POOL
            else {NP: str(p.spec.node_selector.match_labels[NP])}
        )
        since = (NOW - timedelta(minutes=draw(st.integers(0, 60)))).strftime("%Y-%m-%dT%H:%M:%SZ")
        waiting.append(wait(f"p{i}", mem=mem, core=core, spread=spread, selector=selector, since=since))
    return nodes, waiting


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_advise_never_proposes_a_move_that_does_not_make_a_pod_fit(
    cluster: tuple[list[NodeView], list[WaitingPod]],
) -> None:
    nodes, waiting = cluster
    by_name = {n.name: n for n in nodes}
    d = _demand(POOLS, nodes, waiting)
    out = advise(POOLS, d, by_name, now=NOW)
    assert check(out, POOLS, by_name, {p.ref: p for p in waiting}) == []
    placed = {pl.pod for m in out.moves for pl in m.placements}
    stuck = {s.pod.ref for s in out.pending}
    targeted = {p.ref for dd in d.values() for p in dd.waiting}
    assert placed | stuck == targeted and not placed & stuck
    for m in out.moves:
        assert by_name[m.node].labels[c.LABEL_POOL] == m.lender != m.borrower
        assert m.node in d[m.lender].idle
        assert m.plan is not None and m.plan.pool == m.borrower


def test_admission_counts_a_borrowed_node_in_the_borrower() -> None:
    from gpushare.admission.model import Context, NodeInfo
    from gpushare.admission.targeting import node_constraints, resolve

    lender = pool("cgpu", "np-a", lending={"to": ["core"]})
    core = pool("core", "np-b", computeAllocation=True)
    lent = NodeInfo("a1", {NP: "np-a", **desired_labels(core.spec, "core")}, {c.RES_GPU_MEM: "16"})
    ctx = Context.build([lender, core], [lent])
    assert ctx.node_pool == {"a1": "core"}
    res = resolve(node_constraints("spec", {"nodeSelector": {c.LABEL_POOL: "core"}}), ctx)
    assert res.pools == {"core"} and not res.unpooled
    # Without lending the same labels are a node outside its pool's mode (unpooled).
    ctx = Context.build([pool("cgpu", "np-a"), core], [lent])
    assert ctx.node_pool == {"a1": "cgpu"}
    assert resolve(node_constraints("spec", {"nodeSelector": {c.LABEL_POOL: "core"}}), ctx).unpooled


# --- NVIDIA pools: demand and advice in slots (replicas x GPUs) ------------------------------------


def nvidia_pool(name: str, np: str, replicas: int = 4, **nvidia: Any) -> GPUSharePool:
    return pool(name, np, nvidia={"strategy": "TimeSlicing", "replicas": replicas, **nvidia})


def nvidia_settled(name: str, p: GPUSharePool, *, gpus: int = 2) -> NodeView:
    """A node of NVIDIA pool ``p``: labelled, its plugin advertising replicas x GPUs."""
    assert p.spec.nvidia is not None
    labels = {
        NP: str(p.spec.node_selector.match_labels[NP]),
        c.LABEL_NVIDIA_GPU_COUNT: str(gpus),
        **desired_labels(p.spec, p.name),
    }
    owned = json.dumps({"pool": p.name, "prior": {}})
    alloc = {p.spec.nvidia.resource: str(gpus * p.spec.nvidia.replicas)}
    return NodeView(name, labels, annotations={c.ANNOTATION_OWNED: owned}, allocatable=alloc)


def nvidia_wait(
    name: str, slots: int, target: str, resource: str = c.RES_NVIDIA_GPU, **kw: Any
) -> WaitingPod:
    obj = pending_obj(name, mem=0, selector={c.LABEL_POOL: target}, **kw)
    obj["spec"]["containers"][0]["resources"]["limits"] = {resource: str(slots)}
    obj["status"]["conditions"][0]["message"] = f"0/3 nodes are available: 3 Insufficient {resource}."
    pod = waiting_pod(obj)
    assert pod is not None
    return pod


def test_nvidia_pods_are_demand_of_the_nvidia_pools_they_aim_at_in_slots() -> None:
    ts, cg = nvidia_pool("ts", "np-t"), pool("cgpu", "np-a")
    shared = nvidia_pool("sh", "np-s", renameByDefault=True)
    nodes = [nvidia_settled("t1", ts), settled("a1", cg), nvidia_settled("s1", shared)]
    waiting = [
        nvidia_wait("p1", 3, "ts", since="2026-12-01T11:40:00Z"),
        nvidia_wait("p2", 1, "ts"),
        nvidia_wait("whole", 2, "cgpu"),  # whole GPUs on an ACK pool's nodes: not sharing demand
        nvidia_wait("s", 2, "sh", resource=c.RES_NVIDIA_GPU_SHARED),
        wait("ack", mem=4, selector={c.LABEL_POOL: "cgpu"}),
    ]
    d = _demand([ts, cg, shared], nodes, waiting)
    assert [p.ref for p in d["ts"].waiting] == ["ns/p1", "ns/p2"]
    status = d["ts"].status()
    assert status["requests"] == {c.RES_NVIDIA_GPU: "4"} and status["pendingPods"] == 2
    assert d["sh"].status()["requests"] == {c.RES_NVIDIA_GPU_SHARED: "2"}
    assert [p.ref for p in d["cgpu"].waiting] == ["ns/ack"]
    assert d["cgpu"].status()["requests"] == {c.RES_GPU_MEM: "4", c.RES_GPU_CORE: "0"}
    assert d["ts"].idle == ("t1",) and d["sh"].idle == ("s1",)
    # short of cpu only: not GPU demand; short of NVIDIA's GPUs: GPU demand
    assert gpu_shortage("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    assert gpu_shortage("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.shared.")


def test_advise_moves_an_idle_nvidia_node_sized_in_the_borrowers_slots() -> None:
    ts, spare = nvidia_pool("ts", "np-t", replicas=4), nvidia_pool("spare", "np-s", replicas=2)
    cg = pool("cgpu", "np-a")
    # spare's idle node has 2 GPUs (4 slots there); in ts they are 8 slots
    nodes = [nvidia_settled("s1", spare, gpus=2), settled("a1", cg, gpus=1)]
    waiting = [
        nvidia_wait("p1", 3, "ts", since="2026-12-01T11:40:00Z"),
        nvidia_wait("p2", 6, "ts", since="2026-12-01T11:41:00Z"),
        nvidia_wait("p3", 5, "ts", since="2026-12-01T11:42:00Z"),
        nvidia_wait("p4", 4, "ts", since="2026-12-01T11:43:00Z"),
        nvidia_wait("wrong-name", 1, "ts", resource=c.RES_NVIDIA_GPU_SHARED),
    ]
    pools = [ts, spare, cg]
    by_name = {n.name: n for n in nodes}
    d = _demand(pools, nodes, waiting)
    out = advise(pools, d, by_name, now=NOW, lenders={"ts": ["spare", "cgpu"]})
    assert check(out, pools, by_name, {p.ref: p for p in waiting}) == []
    moves = {m.node: m for m in out.moves}
    assert set(moves) == {"s1", "a1"}
    assert moves["s1"].pods == ("ns/p1", "ns/p3")  # 3 + 5 of its 8 slots in ts (4 in spare)
    assert moves["s1"].gpus == ((8, 0),)
    assert moves["a1"].pods == ("ns/p4",)  # an ACK node of 1 GPU: 4 slots in ts
    assert moves["a1"].plan is not None and moves["a1"].plan.pool == "ts"
    stuck = {s.pod.ref: s.why for s in out.pending}
    assert "no idle node of another pool fits it" in stuck["ns/p2"]
    assert stuck["ns/wrong-name"] == (
        f"requests {c.RES_NVIDIA_GPU_SHARED}, and the pool's nodes advertise {c.RES_NVIDIA_GPU}"
    )


NV_POOLS = [
    nvidia_pool("ts", "np-t", replicas=4),
    nvidia_pool("two", "np-w", replicas=2),
    pool("cgpu", "np-a"),
]


@st.composite
def nvidia_clusters(draw: st.DrawFn) -> tuple[list[NodeView], list[WaitingPod]]:
    nodes: list[NodeView] = []
    for i in range(draw(st.integers(0, 4))):
        p = draw(st.sampled_from(NV_POOLS))
        gpus = draw(st.integers(1, 4))
        nodes.append(
            nvidia_settled(f"n{i}", p, gpus=gpus) if p.spec.nvidia else settled(f"n{i}", p, gpus=gpus)
        )
    waiting = []
    for i in range(draw(st.integers(1, 8))):
        target = draw(st.sampled_from(["ts", "two"]))
        since = (NOW - timedelta(minutes=draw(st.integers(0, 60)))).strftime("%Y-%m-%dT%H:%M:%SZ")
        waiting.append(nvidia_wait(f"p{i}", draw(st.integers(1, 10)), target, since=since))
    return nodes, waiting


@settings(max_examples=200, deadline=None)
@given(nvidia_clusters())
def test_advise_for_nvidia_pools_never_overfills_a_node_and_leaves_no_fitting_pod_behind(
    cluster: tuple[list[NodeView], list[WaitingPod]],
) -> None:
    nodes, waiting = cluster
    by_name = {n.name: n for n in nodes}
    d = _demand(NV_POOLS, nodes, waiting)
    out = advise(NV_POOLS, d, by_name, now=NOW)
    assert check(out, NV_POOLS, by_name, {p.ref: p for p in waiting}) == []
    requested = {p.ref: p.request(c.RES_NVIDIA_GPU) for p in waiting}
    for m in out.moves:
        assert sum(requested[pod] for pod in m.pods) <= m.gpus[0][0]  # at most the node's slots
    placed = {pod for m in out.moves for pod in m.pods}
    assert placed | {s.pod.ref for s in out.pending} == {p.ref for dd in d.values() for p in dd.waiting}
    # a pod left pending could not fit on any node still idle in another pool, fresh
    for stuck in out.pending:
        for lender, idle in out.idle_left.items():
            if lender in stuck.pools:
                continue
            for name in idle:
                gpus = int(by_name[name].labels.get(c.LABEL_NVIDIA_GPU_COUNT) or 0) or by_name[
                    name
                ].allocatable_int(c.RES_GPU_COUNT)
                borrower = next(p for p in NV_POOLS if p.name == stuck.pools[0])
                assert borrower.spec.nvidia is not None
                assert requested[stuck.pod.ref] > gpus * borrower.spec.nvidia.replicas
