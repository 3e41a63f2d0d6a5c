"""The demand loop (gpushare.demand_loop) against a recording stand-in of the API: writes only on
change, loans onto the version decided on, returns after returnAfterSeconds."""

from __future__ import annotations

import asyncio
import gc
import json
import math
import types
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from gpushare import constants as c
from gpushare.demand_loop import SETTLE_MAX, DemandTracker
from gpushare.handlers.watch import Feeds
from gpushare.k8s import Conflict
from gpushare.policy import NodeView
from gpushare.policy.planner import desired_labels
from gpushare.reconcile import Reconciler
from unit.test_demand import NP, pending_obj, pool

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


class FakeAPI:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.status: list[tuple[str, dict[str, Any]]] = []
        self.node_patches: list[tuple[str, dict[str, Any]]] = []
        self.events: list[tuple[str, str]] = []
        self.rv = 100

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        obj = self.nodes[name]
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != obj["metadata"]["resourceVersion"]:
            raise Conflict("HTTP 409 Conflict")
        self.node_patches.append((name, dict(patch)))
        ann = obj["metadata"].setdefault("annotations", {})
        for k, v in (patch["metadata"].get("annotations") or {}).items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = v
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        copy: dict[str, Any] = json.loads(json.dumps(obj))
        return copy

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> bool:
        self.status.append((name, dict(status)))
        return True

    async def event(
        self, obj: Mapping[str, str], *, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        self.events.append((obj["name"], reason))


class Loop:
    """The demand loop as the operator runs it: the watches feed the reconciler's store first and
    then the loop (``handlers.watch.Feeds``), which reads that one model."""

    def __init__(self, api: FakeAPI, clock: Any) -> None:
        self.rec = Reconciler(cast(Any, api), clock=clock)
        self.tracker = DemandTracker(api, self.rec, clock=clock)
        self.feeds = Feeds(self.rec, pod_listeners=[self.tracker], view_listeners=[self.tracker])

    def node_event(self, type_: str, obj: dict[str, Any]) -> None:
        self.feeds.node(type_, obj)

    def pod_event(self, type_: str, obj: dict[str, Any]) -> None:
        self.feeds.pod(type_, obj)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tracker, name)


def node_obj(name: str, p: Any, np: str, mode: str) -> dict[str, Any]:
    alloc = {
        c.RES_GPU_COUNT: "1",
        c.RES_GPU_MEM: "16",
        **({c.RES_GPU_CORE: "100"} if mode == "core_mem" else {}),
    }
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "10",
            "labels": {NP: np, **desired_labels(p.spec, p.name)},
            "annotations": {c.ANNOTATION_OWNED: json.dumps({"pool": p.name, "prior": {}})},
        },
        "status": {"allocatable": alloc},
    }


def setup(
    lending: dict[str, Any] | None,
) -> tuple[FakeAPI, Loop, list[dict[str, Any]], list[datetime]]:
    cg = pool("cgpu", "np-a", **({"lending": lending} if lending else {}))
    core = pool("core", "np-b", computeAllocation=True)
    api = FakeAPI()
    clock = [NOW]
    tracker = Loop(api, clock=lambda: clock[0])
    for obj in (
        node_obj("a1", cg, "np-a", "cgpu"),
        node_obj("a2", cg, "np-a", "cgpu"),
        node_obj("b1", core, "np-b", "core_mem"),
    ):
        api.nodes[obj["metadata"]["name"]] = obj
        tracker.node_event("ADDED", obj)
    bodies = [{"metadata": {"name": p.name, "uid": f"u-{p.name}"}, "spec": p.spec.dump()} for p in (cg, core)]
    tracker.pod_event("ADDED", pending_obj("job", mem=4, core=50, selector={c.LABEL_POOL: "core"}))
    limits = {c.RES_GPU_MEM: "16", c.RES_GPU_CORE: "100"}
    fill = {
        "metadata": {"name": "fill", "namespace": "ns", "uid": "u-fill"},
        "spec": {"nodeName": "b1", "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }
    tracker.pod_event("ADDED", fill)
    return api, tracker, bodies, clock


def test_status_demand_is_written_once_and_not_again_while_quiet() -> None:
    api, tracker, bodies, _ = setup(None)
    asyncio.run(tracker.run("core", bodies))
    asyncio.run(tracker.run("cgpu", bodies))
    assert [n for n, _ in api.status] == ["core", "cgpu"]
    core = api.status[0][1]["demand"]
    assert (core["pendingPods"], core["idleNodes"]) == (1, 0)
    assert core["requests"] == {c.RES_GPU_MEM: "4", c.RES_GPU_CORE: "50"}
    assert api.status[1][1]["demand"]["idleNodeNames"] == ["a1", "a2"]
    for _ in range(3):
        asyncio.run(tracker.run("core", bodies))
        asyncio.run(tracker.run("cgpu", bodies))
    assert len(api.status) == 2 and api.node_patches == [], "nothing written while nothing changed"
    # The job goes away: pendingPods 0 and the oldest wait nulled in the merge patch.
    tracker.pod_event("DELETED", pending_obj("job", mem=4, core=50))
    asyncio.run(tracker.run("core", bodies))
    assert api.status[-1][1]["demand"]["pendingPods"] == 0


def test_lending_writes_one_loan_onto_the_version_decided_on_and_returns_it() -> None:
    api, tracker, bodies, clock = setup({"to": ["core"], "keepIdle": 1, "returnAfterSeconds": 60})
    asyncio.run(tracker.run("core", bodies))
    assert [n for n, _ in api.node_patches] == ["a2"], "keepIdle 1 keeps a1"
    loan = json.loads(api.nodes["a2"]["metadata"]["annotations"][c.ANNOTATION_LOAN])
    assert (loan["from"], loan["to"], loan["gpus"], loan["gpuMem"], loan["unit"]) == (
        "cgpu",
        "core",
        1,
        16,
        "GiB",
    )
    assert api.node_patches[0][1]["metadata"]["resourceVersion"] == "10"
    assert (
        ("cgpu", "NodeLent") in api.events
        and ("core", "NodeLent") in api.events
        and ("a2", "NodeLent") in api.events
    )
    # Again and again while the job still waits (its node restarting): no second loan.
    for _ in range(3):
        asyncio.run(tracker.run("core", bodies))
    assert len(api.node_patches) == 1
    # The job ran and is gone; 60 s without need later the loan ends.
    tracker.pod_event("DELETED", pending_obj("job", mem=4, core=50))
    clock[0] = NOW + timedelta(seconds=30)
    asyncio.run(tracker.run("core", bodies))
    assert len(api.node_patches) == 1
    clock[0] = NOW + timedelta(seconds=61)
    asyncio.run(tracker.run("core", bodies))
    assert len(api.node_patches) == 2 and c.ANNOTATION_LOAN not in api.nodes["a2"]["metadata"]["annotations"]
    assert ("a2", "LoanReturned") in api.events


def test_a_node_that_changed_since_the_decision_is_not_lent() -> None:
    api, tracker, bodies, _ = setup({"to": ["core"], "keepIdle": 0})
    api.nodes["a1"]["metadata"]["resourceVersion"] = "11"  # changed; the tracker has not seen it yet
    again = asyncio.run(tracker.run("core", bodies))
    assert [n for n, _ in api.node_patches] == [], "409: decided again with the node's new version"
    assert again == 1.0, "and soon: a heartbeat that brings the new version wakes no step"


def _reachable(root: object, skip: tuple[object, ...]) -> list[object]:
    """Every object ``root`` refers to, directly or not, except through ``skip`` and through
    classes, modules and functions."""
    seen = {id(s) for s in skip}
    out: list[object] = []
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType | types.FunctionType):
            continue
        seen.add(id(obj))
        out.append(obj)
        todo.extend(gc.get_referents(obj))
    return out


def test_between_steps_the_loop_keeps_no_node_view_of_its_own() -> None:
    """The nodes are the model's: the loop's cache of its last step holds none of their views. It
    did (a snapshot of every view), and kept the old view of each node the store replaced since: a
    second copy of the model's nodes after a pool's restore rewrote them all."""
    api, tracker, bodies, _ = setup({"to": ["core"], "keepIdle": 2})
    asyncio.run(tracker.run("core", bodies))
    asyncio.run(tracker.run("cgpu", bodies))  # a step on the cached result (nothing moved)
    assert api.status, "the steps ran and wrote status.demand"
    model = tracker.rec
    held = [o for o in _reachable(tracker.tracker, skip=(model, api)) if isinstance(o, NodeView)]
    assert held == []
    # A heartbeat (a new resourceVersion, nothing else) replaces every view in the store without
    # moving the model's generation: the next step is served from the cache, and holds none of
    # the views it replaced either.
    generation, written = model.generation(), len(api.status)
    for obj in api.nodes.values():
        beat = json.loads(json.dumps(obj))
        beat["metadata"]["resourceVersion"] = "20"
        tracker.node_event("MODIFIED", beat)
    assert model.generation() == generation
    asyncio.run(tracker.run("core", bodies))
    assert len(api.status) == written and api.node_patches == []
    assert [o for o in _reachable(tracker.tracker, skip=(model, api)) if isinstance(o, NodeView)] == []


def _pod(name: str, node: str, mem: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {c.RES_GPU_MEM: str(mem)}}}],
        },
        "status": {"phase": phase},
    }


_NODES = ("a1", "a2", "b1", "b2")
_EVENT = st.one_of(
    st.tuples(st.just("node"), st.sampled_from(_NODES), st.sampled_from(("cgpu", "core", "none", "gone"))),
    st.tuples(st.just("pod"), st.sampled_from(("p1", "p2", "p3")), st.sampled_from((*_NODES, "deleted"))),
    st.tuples(st.just("pools"), st.sampled_from(("both", "cgpu-only")), st.just("")),
)


@settings(max_examples=150, deadline=None)
@given(events=st.lists(_EVENT, max_size=25))
def test_demand_planned_incrementally_equals_a_fresh_plan_of_everything(
    events: list[tuple[str, str, str]],
) -> None:
    """Only the nodes an event touched are planned again (the others keep their plan); after any
    sequence of node, pod and pool changes the demand is what a tracker fed the end state alone,
    planning every node, computes."""
    cg = pool("cgpu", "np-a")
    core = pool("core", "np-b", computeAllocation=True)
    specs = {"cgpu": cg, "core": core}
    tracker = Loop(FakeAPI(), clock=lambda: NOW)
    nodes: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    chosen: tuple[str, ...] = ("cgpu", "core")
    rv = 10

    def bodies(names: tuple[str, ...]) -> list[dict[str, Any]]:
        return [{"metadata": {"name": n, "uid": f"u-{n}"}, "spec": specs[n].spec.dump()} for n in names]

    for kind, name, value in events:
        rv += 1
        if kind == "node" and value == "gone":
            if nodes.pop(name, None) is not None:
                tracker.node_event("DELETED", {"metadata": {"name": name}})
        elif kind == "node":
            np = "np-a" if name.startswith("a") else "np-b"
            obj = node_obj(name, specs["cgpu" if value == "none" else value], np, value)
            if value == "none":
                obj["metadata"]["labels"] = {NP: np}
                obj["metadata"]["annotations"] = {}
            obj["metadata"]["resourceVersion"] = str(rv)
            nodes[name] = obj
            tracker.node_event("MODIFIED", obj)
        elif kind == "pod" and value == "deleted":
            if (gone := pods.pop(name, None)) is not None:
                tracker.pod_event("DELETED", gone)
        elif kind == "pod":
            pods[name] = _pod(name, value, mem=2 + len(name))
            tracker.pod_event("MODIFIED", pods[name])
        else:
            chosen = ("cgpu", "core") if name == "both" else ("cgpu",)
        tracker._compute(bodies(chosen), NOW)  # plans what changed, keeps the rest

    fresh = Loop(FakeAPI(), clock=lambda: NOW)
    for obj in nodes.values():
        fresh.node_event("ADDED", obj)
    for obj in pods.values():
        fresh.pod_event("ADDED", obj)
    tracker.tracker.version += 1  # look again now (the cache keys on the version)
    got, want = tracker._compute(bodies(chosen), NOW), fresh._compute(bodies(chosen), NOW)
    assert {k: v.status() for k, v in got.demand.items()} == {k: v.status() for k, v in want.demand.items()}
    assert tracker.rec.cache.plans == fresh.rec.cache.plans


class _FakeTime:
    """A clock that ``sleep`` moves on; with ``busy``, each wait sees a node event arrive."""

    def __init__(self, tracker: Loop, busy: bool) -> None:
        self.now = 0.0
        self.tracker = tracker
        self.busy = busy

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.busy:
            obj = node_obj(f"n{self.now}", pool("cgpu", "np-a"), "np-a", "cgpu")
            self.tracker.node_event("ADDED", obj)


def test_after_a_wake_up_a_quiet_moment_or_settle_max_ends_the_wait() -> None:
    """A change alone: one debounce. A rollout changing nodes all the time: waits on until
    SETTLE_MAX, so that the burst is one computation, not one per debounce."""
    quiet = Loop(FakeAPI(), clock=lambda: NOW)
    t = _FakeTime(quiet, busy=False)
    assert asyncio.run(quiet.settle(t.sleep, t.monotonic)) == 1
    assert t.now == quiet.debounce()

    busy = Loop(FakeAPI(), clock=lambda: NOW)
    t = _FakeTime(busy, busy=True)
    waits = asyncio.run(busy.settle(t.sleep, t.monotonic))
    assert t.now == SETTLE_MAX
    assert waits == math.ceil(SETTLE_MAX / busy.debounce())


def test_a_loan_ends_when_the_only_lender_stops_lending() -> None:
    """Lending removed from the one pool that lent: no pool lends any more, and the loan it made
    still ends (the loop decided loans only while some pool lent, and the node stayed lent)."""
    api, tracker, bodies, clock = setup({"to": ["core"], "keepIdle": 1, "returnAfterSeconds": 600})
    asyncio.run(tracker.run("core", bodies))
    assert [n for n, _ in api.node_patches] == ["a2"]
    tracker.pod_event("DELETED", pending_obj("job", mem=4, core=50))
    tracker.node_event("MODIFIED", json.loads(json.dumps(api.nodes["a2"])))
    off = [{**b, "spec": {k: v for k, v in b["spec"].items() if k != "lending"}} for b in bodies]
    clock[0] = NOW + timedelta(seconds=5)
    asyncio.run(tracker.run("cgpu", off))
    assert c.ANNOTATION_LOAN not in api.nodes["a2"]["metadata"]["annotations"]
    assert ("a2", "LoanEnded") in api.events


def test_two_pools_stepping_at_once_lend_a_node_once() -> None:
    """Each pool's step decides loans; two steps that decided before either wrote lend the node
    once (the second writes onto the version it decided on, which the first changed: 409). The
    loop lent it once per step, each with its Events, and counted each in the metrics."""
    api, tracker, bodies, _ = setup({"to": ["core"], "keepIdle": 1})
    write = api.patch_node

    async def slow_write(name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        await asyncio.sleep(0.01)  # the API's round trip: the other step decides meanwhile
        return await write(name, patch)

    api.patch_node = slow_write  # type: ignore[method-assign]

    async def both() -> None:
        await asyncio.gather(tracker.run("core", bodies), tracker.run("cgpu", bodies))

    asyncio.run(both())
    assert [n for n, _ in api.node_patches] == ["a2"]
    assert api.events.count(("a2", "NodeLent")) == 1
