"""Demand-aware pools against the local control plane (issue 23): ``status.demand``, ``gpushare
advise`` and opt-in lending with the operator (a real subprocess), kube-scheduler, kcm's Job
controller and the simulated device plugin (``pluginsim``) on kwok nodes.

Two pools, ``cgpu`` (memory isolation) and ``core`` (compute allocation), one GPU of 16 GiB per
node; the core pool's node is full and a core Job waits.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, wait_for
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet
from gpushare.k8s.client import make_api_client
from support.operator_proc import OperatorProc
from support.pools import MERGE, PoolApi

LENDING = {"to": [], "keepIdle": 1, "returnAfterSeconds": 30}


class Pools(PoolApi):
    async def demand(self, name: str) -> dict[str, Any]:
        obj = await self.get(name) or {}
        return dict((obj.get("status") or {}).get("demand") or {})

    async def wait_demand(
        self, name: str, what: str, check: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        async def ok() -> dict[str, Any] | None:
            d = await self.demand(name)
            return d if d and check(d) else None

        found: dict[str, Any] = await wait_for(ok, what=f"{name} status.demand: {what}", timeout_s=60)
        return found

    async def wait_ready(self, name: str) -> None:
        async def ready() -> bool:
            obj = await self.get(name) or {}
            conds = {x["type"]: x for x in (obj.get("status") or {}).get("conditions") or []}
            return bool(conds.get("Ready", {}).get("status") == "True")

        await wait_for(ready, what=f"{name} Ready", timeout_s=90)


@pytest.fixture
async def pools(api: client.ApiClient) -> AsyncIterator[Pools]:
    helper = Pools(api)
    yield helper
    for name in helper.created:
        try:
            await helper.custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
            )
            await helper.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def gpu_pod_spec(target: str, mem: int, core: int = 0) -> dict[str, Any]:
    limits = {c.RES_GPU_MEM: str(mem), **({c.RES_GPU_CORE: str(core)} if core else {})}
    return {
        "nodeSelector": {c.LABEL_POOL: target},
        "restartPolicy": "Never",
        "containers": [
            {"name": "cuda", "image": "registry.invalid/cuda-sample:fake", "resources": {"limits": limits}}
        ],
    }


async def create_pod(api: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    body = {"metadata": {"name": name}, "spec": spec}
    await client.CoreV1Api(api).create_namespaced_pod(ns, cast(Any, body))


async def create_job(api: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"job": name}}, "spec": spec}},
    }
    await client.BatchV1Api(api).create_namespaced_job(ns, cast(Any, body))


async def job_pod(api: client.ApiClient, ns: str, job: str) -> Any:
    pods = await client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"job={job}")
    return pods.items[0] if pods.items else None


async def wait_unschedulable(api: client.ApiClient, ns: str, job: str) -> str:
    async def check() -> str | None:
        pod = await job_pod(api, ns, job)
        if pod is None or pod.spec.node_name:
            return None
        conds = {x.type: x for x in pod.status.conditions or []}
        sched = conds.get("PodScheduled")
        return pod.metadata.name if sched is not None and sched.reason == "Unschedulable" else None

    name: str = await wait_for(check, what=f"job {job}'s pod Unschedulable", timeout_s=60)
    return name


async def wait_running(api: client.ApiClient, ns: str, name: str, timeout_s: float = 60) -> str:
    async def check() -> str | None:
        pod = await client.CoreV1Api(api).read_namespaced_pod(name, ns)
        # kwok completes pods that never restart (a Job's) soon after they run.
        return pod.spec.node_name if pod.status.phase in ("Running", "Succeeded") else None

    try:
        where: str = await wait_for(check, what=f"pod {ns}/{name} running (or done)", timeout_s=timeout_s)
    except TimeoutError as exc:
        pod = await client.CoreV1Api(api).read_namespaced_pod(name, ns)
        conds = [(x.type, x.status, x.reason, x.message) for x in pod.status.conditions or []]
        raise TimeoutError(f"{exc}; node {pod.spec.node_name!r}, phase {pod.status.phase}, {conds}") from None
    return where


async def node_meta(
    api: client.ApiClient, name: str
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    obj = await client.CoreV1Api(api).read_node(name)
    return obj.metadata.labels or {}, obj.metadata.annotations or {}, obj.status.allocatable or {}


def advise(cluster: ClusterInfo, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gpushare", "advise", "--kubeconfig", str(cluster.kubeconfig), "-o", "json"]
    out = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


async def events_for(api: client.ApiClient, name: str) -> list[Any]:
    found = await client.CoreV1Api(api).list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={name}"
    )
    return list(found.items)


#: The one GPU of each node ``two_pools`` makes.
GPU_GIB = 16


async def two_pools(
    api: client.ApiClient, fake_nodes: FakeNodeSet, pools: Pools, ns: str, *, cgpu_nodes: int = 2
) -> tuple[str, str, list[str], str]:
    """cgpu pool (``cgpu_nodes`` nodes), core pool (1 node, filled by a running pod)."""
    tag = secrets.token_hex(3)
    np_a, np_b = f"np-a-{tag}", f"np-b-{tag}"
    shape: dict[str, Any] = {"simulate_plugin": True, "gpus_per_node": 1, "gpu_mem_gib_per_gpu": GPU_GIB}
    a_nodes = await fake_nodes.create(cgpu_nodes, prefix=f"a{tag}", pool_labels={POOL_LABEL: np_a}, **shape)
    (b_node,) = await fake_nodes.create(1, prefix=f"b{tag}", pool_labels={POOL_LABEL: np_b}, **shape)
    cg, core = f"cgpu-{tag}", f"core-{tag}"
    await pools.create_pool(cg, {POOL_LABEL: np_a})
    await pools.create_pool(core, {POOL_LABEL: np_b}, computeAllocation=True)
    await pools.wait_ready(cg)
    await pools.wait_ready(core)
    await create_pod(api, ns, "fill", gpu_pod_spec(core, 16, 100))
    assert await wait_running(api, ns, "fill") == b_node
    return cg, core, a_nodes, b_node


async def test_status_and_advise_name_an_idle_cgpu_node_and_lending_runs_the_job_then_returns_it(
    api: client.ApiClient,
    cluster: ClusterInfo,
    fake_nodes: FakeNodeSet,
    operator: OperatorProc,
    pools: Pools,
    namespace: str,
) -> None:
    cg, core, a_nodes, _ = await two_pools(api, fake_nodes, pools, namespace)
    await create_job(api, namespace, "train", gpu_pod_spec(core, 4, 50))
    pod = await wait_unschedulable(api, namespace, "train")

    d = await pools.wait_demand(core, "1 pod waits", lambda d: d.get("pendingPods") == 1)
    assert (d["pods"], d["idleNodes"]) == ([f"{namespace}/{pod}"], 0)
    assert d["requests"] == {c.RES_GPU_MEM: "4", c.RES_GPU_CORE: "50"}
    assert "oldestPendingSince" in d
    idle = await pools.wait_demand(cg, "2 idle nodes", lambda d: d.get("idleNodes") == 2)
    assert idle["idleNodeNames"] == sorted(a_nodes) and idle["pendingPods"] == 0

    advice = advise(cluster)
    assert [(m["from"], m["to"]) for m in advice["moves"]] == [(cg, core)]
    move = advice["moves"][0]
    assert move["node"] in a_nodes and move["restartPlugin"] is True
    assert [p["pod"] for p in move["pods"]] == [f"{namespace}/{pod}"]
    assert {"key": c.LABEL_SCHEDULE, "from": "cgpu", "to": "core_mem"} in move["labels"]
    assert advice["pending"] == []
    # With the keepIdle the lending below uses, advise names the node lending then takes.
    (move,) = advise(cluster, "--keep-idle", str(LENDING["keepIdle"]))["moves"]
    assert move["node"] in a_nodes and (move["from"], move["to"]) == (cg, core)

    # Lending on: the node advise named moves to the core pool, its plugin restarts, the Job runs there.
    plugin_before = (await node_meta(api, move["node"]))[1].get("gpushare.io/simulated-plugin")
    await pools.patch_spec(cg, {"lending": {**LENDING, "to": [core]}})
    where = await wait_running(api, namespace, pod, timeout_s=90)
    assert where == move["node"], "kube-scheduler placed the Job where advise said"
    labels, annotations, alloc = await node_meta(api, where)
    assert labels[c.LABEL_POOL] == core and labels[c.LABEL_SCHEDULE] == "core_mem"
    assert alloc[c.RES_GPU_CORE] == "100", "its plugin restarted in core_mem"
    assert annotations.get("gpushare.io/simulated-plugin") != plugin_before
    loan = json.loads(annotations[c.ANNOTATION_LOAN])
    assert (loan["from"], loan["to"], loan["gpus"], loan["gpuMem"]) == (cg, core, 1, 16)
    other = next(n for n in a_nodes if n != where)
    assert c.ANNOTATION_LOAN not in (await node_meta(api, other))[1], "keepIdle 1: the other node stays"
    await pools.wait_demand(cg, "the loan", lambda d: {"node": where, "to": core} in d.get("loans", []))
    await pools.wait_demand(core, "the loan", lambda d: {"node": where, "from": cg} in d.get("loans", []))
    reasons = {e.reason for e in await events_for(api, cg)}
    assert "NodeLent" in reasons and "NodeLent" in {e.reason for e in await events_for(api, core)}

    # The Job is done (kwok completes its pod); returnAfterSeconds later the node goes back to cgpu.

    async def returned() -> bool:
        labels, annotations, alloc = await node_meta(api, where)
        return (
            labels.get(c.LABEL_POOL) == cg
            and labels.get(c.LABEL_SCHEDULE) == "cgpu"
            and c.ANNOTATION_LOAN not in annotations
            and alloc.get(c.RES_GPU_CORE, "0") == "0"
        )

    await wait_for(returned, what=f"{where} back in {cg} with its plugin in cgpu", timeout_s=120)
    assert "LoanReturned" in {e.reason for e in await events_for(api, where)}
    await pools.wait_ready(cg)


async def test_an_nvidia_pool_counts_its_waiting_pods_in_slots(
    api: client.ApiClient,
    cluster: ClusterInfo,
    fake_nodes: FakeNodeSet,
    operator: OperatorProc,
    pools: Pools,
    namespace: str,
) -> None:
    """A Job asking for 3 nvidia.com/gpu aimed at a TimeSlicing pool whose node does not advertise
    them waits; it is the pool's demand in slots (status.demand), and advise sizes the move of an
    idle ACK node to the pool in slots (1 GPU x 4 replicas)."""
    tag = secrets.token_hex(3)
    np_t, np_a = f"np-t-{tag}", f"np-a-{tag}"
    await fake_nodes.create(1, prefix=f"t{tag}", pool_labels={POOL_LABEL: np_t})
    shape: dict[str, Any] = {"simulate_plugin": True, "gpus_per_node": 1, "gpu_mem_gib_per_gpu": 16}
    (a_node,) = await fake_nodes.create(1, prefix=f"a{tag}", pool_labels={POOL_LABEL: np_a}, **shape)
    ts, cg = f"ts-{tag}", f"cgpu-{tag}"
    await pools.create_pool(ts, {POOL_LABEL: np_t}, nvidia={"strategy": "TimeSlicing", "replicas": 4})
    await pools.create_pool(cg, {POOL_LABEL: np_a})
    slots = gpu_pod_spec(ts, 0)
    slots["containers"][0]["resources"]["limits"] = {c.RES_NVIDIA_GPU: "3"}
    await create_job(api, namespace, "slots", slots)
    pod = await wait_unschedulable(api, namespace, "slots")

    d = await pools.wait_demand(ts, "1 pod waits", lambda d: d.get("pendingPods") == 1)
    assert d["pods"] == [f"{namespace}/{pod}"] and d["requests"] == {c.RES_NVIDIA_GPU: "3"}
    assert "oldestPendingSince" in d
    ack = await pools.wait_demand(cg, "its node idle", lambda d: d.get("idleNodes") == 1)
    assert ack["pendingPods"] == 0 and ack["requests"] == {c.RES_GPU_MEM: "0", c.RES_GPU_CORE: "0"}

    # The ACK pool's idle node (1 GPU) would give the TimeSlicing pool 4 slots: the pod fits.
    advice = advise(cluster)
    assert advice["demand"][ts]["requests"] == {c.RES_NVIDIA_GPU: "3"}
    moves = [m for m in advice["moves"] if m["to"] == ts]
    assert [(m["node"], m["from"]) for m in moves] == [(a_node, cg)]
    assert moves[0]["pods"] == [{"pod": f"{namespace}/{pod}", "slots": {c.RES_NVIDIA_GPU: 3}}]
    assert {"key": c.LABEL_POOL, "from": cg, "to": ts} in moves[0]["labels"]
    assert advice["pending"] == []


async def test_a_busy_node_is_never_lent_and_a_pool_keeps_its_idle_nodes(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    operator: OperatorProc,
    pools: Pools,
    namespace: str,
) -> None:
    cg, core, a_nodes, _ = await two_pools(api, fake_nodes, pools, namespace)
    await create_pod(api, namespace, "cg-run", gpu_pod_spec(cg, 2))
    busy = await wait_running(api, namespace, "cg-run")
    assert busy in a_nodes
    (idle,) = set(a_nodes) - {busy}
    await pools.patch_spec(cg, {"lending": {**LENDING, "to": [core]}})
    await create_job(api, namespace, "wait", gpu_pod_spec(core, 4, 50))
    pod = await wait_unschedulable(api, namespace, "wait")
    # The demand loop decides loans before it writes status.demand, and writes both pools' from
    # the same view: once core's names the waiting pod and cgpu's names exactly the idle node
    # (the operator sees the busy one as busy), a pass decided with this state, and its status
    # says it lent nothing (no loans); the nodes agree.
    waiting = await pools.wait_demand(core, f"{pod} waits", lambda d: d.get("pods") == [f"{namespace}/{pod}"])
    spare = await pools.wait_demand(cg, f"only {idle} idle", lambda d: d.get("idleNodeNames") == [idle])
    assert "loans" not in waiting and "loans" not in spare, (waiting, spare)
    for n in a_nodes:
        labels, annotations, _ = await node_meta(api, n)
        assert c.ANNOTATION_LOAN not in annotations and labels[c.LABEL_POOL] == cg, n
    # keepIdle 0: the idle node is lent and the pod runs there; the busy one still is not lent.
    # (The pod's name is the one seen waiting: once the loan is made it may be scheduled at once.)
    await pools.patch_spec(cg, {"lending": {**LENDING, "to": [core], "keepIdle": 0}})
    where = await wait_running(api, namespace, pod, timeout_s=90)
    assert where == idle, (where, idle, busy)
    loan = json.loads((await node_meta(api, idle))[1][c.ANNOTATION_LOAN])
    assert (loan["from"], loan["to"]) == (cg, core)
    assert c.ANNOTATION_LOAN not in (await node_meta(api, busy))[1]
    await pools.wait_demand(
        cg, "one loan, of the idle node", lambda d: d.get("loans") == [{"node": idle, "to": core}]
    )


async def test_operator_killed_mid_loan_completes_it_once(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    start_operator: Callable[..., OperatorProc],
    pools: Pools,
    namespace: str,
) -> None:
    op = start_operator()
    cg, core, a_nodes, _ = await two_pools(api, fake_nodes, pools, namespace, cgpu_nodes=3)
    await create_job(api, namespace, "train", gpu_pod_spec(core, 4, 50))
    pod = await wait_unschedulable(api, namespace, "train")
    await pools.patch_spec(cg, {"lending": {**LENDING, "to": [core], "keepIdle": 0}})

    async def lent() -> str | None:
        for n in a_nodes:
            if c.ANNOTATION_LOAN in (await node_meta(api, n))[1]:
                return n
        return None

    node = await wait_for(lent, what="a loan annotation", timeout_s=60, interval=0.05)
    op.kill()  # SIGKILL right after the loan's write: labels and plugin restart may not have happened
    start_operator()
    assert await wait_running(api, namespace, pod, timeout_s=90) == node
    labels, annotations, _ = await node_meta(api, node)
    assert labels[c.LABEL_POOL] == core and json.loads(annotations[c.ANNOTATION_LOAN])["to"] == core
    lent_nodes = [n for n in a_nodes if c.ANNOTATION_LOAN in (await node_meta(api, n))[1]]
    assert lent_nodes == [node], "one loan for one waiting pod, never doubled"


# --- advise against kube-scheduler on generated clusters -------------------------------------------

#: Generated clusters tried (each one a few tens of seconds: nodes, pools, a plugin restart per
#: move); GPUSHARE_ADVISE_EXAMPLES raises it.
ADVISE_EXAMPLES = int(os.environ.get("GPUSHARE_ADVISE_EXAMPLES", "8"))
#: How long a pod advise leaves pending is watched, once every moved node serves the core pool,
#: for kube-scheduler to place it anyway (it retries pending pods on every node change).
STAYS_PENDING_S = 15.0

#: One GPU of 16 GiB per node; a pod takes 55 % or 100 % of a GPU's compute (two never share one),
#: and asks for 4, 8, 16 or 20 GiB (20 fits no GPU): where kube-scheduler's per-node view and the
#: per-GPU fit agree, so both must give the same answer.
SCENARIOS = st.tuples(
    st.integers(1, 3),  # idle cgpu nodes
    st.lists(st.tuples(st.sampled_from([4, 8, 16, 20]), st.sampled_from([55, 100])), min_size=1, max_size=3),
)


@settings(
    max_examples=ADVISE_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=SCENARIOS)
# Always tried: one idle node, the oldest pod fits no GPU, the younger one fits. An advise that
# ignored memory would move the node for the oldest and leave the younger pending, which
# kube-scheduler then places.
@example(scenario=(1, [(20, 55), (4, 55)]))
def test_advise_agrees_with_what_kube_scheduler_then_does(
    cluster: ClusterInfo, operator: OperatorProc, scenario: tuple[int, list[tuple[int, int]]]
) -> None:
    # One operator for every generated example (a function-scoped fixture, hence the health check).
    asyncio.run(_agree(cluster, *scenario))


async def _agree(cluster: ClusterInfo, idle: int, pods: list[tuple[int, int]]) -> None:
    api = await make_api_client(str(cluster.kubeconfig))
    async with api:
        nodes = FakeNodeSet(api, f"h{secrets.token_hex(2)}")
        helper = Pools(api)
        ns = f"t-{secrets.token_hex(4)}"
        core_api = client.CoreV1Api(api)
        await core_api.create_namespace(cast(Any, {"metadata": {"name": ns}}))
        try:
            cg, core, a_nodes, _ = await two_pools(api, nodes, helper, ns, cgpu_nodes=idle)
            names = []
            for i, (mem, pct) in enumerate(pods):
                await create_pod(api, ns, f"p{i}", gpu_pod_spec(core, mem, pct))
                names.append(f"p{i}")
            await helper.wait_demand(
                core, f"{len(pods)} pod(s) wait", lambda d: d.get("pendingPods") == len(pods)
            )
            advice = advise(cluster, "--keep-idle", "0")
            placed = {p["pod"].split("/")[1]: m["node"] for m in advice["moves"] for p in m["pods"]}
            stuck = {p["pod"].split("/")[1] for p in advice["pending"]}
            assert set(placed) | stuck == set(names) and not set(placed) & stuck
            assert set(placed.values()) <= set(a_nodes)
            # Carry the moves out (lending does what advise says) and let kube-scheduler work.
            await helper.patch_spec(
                cg, {"lending": {**LENDING, "to": [core], "keepIdle": 0, "returnAfterSeconds": 600}}
            )

            async def scheduled() -> dict[str, str] | None:
                found = {}
                for name in names:
                    pod = await core_api.read_namespaced_pod(name, ns)
                    if pod.spec.node_name:
                        found[name] = pod.spec.node_name
                return found if len(found) >= len(placed) else None

            where = await wait_for(
                scheduled, what=f"{len(placed)} pod(s) scheduled as advise said", timeout_s=120
            )
            assert set(where.values()) <= set(placed.values()), "only onto the nodes advise moved"
            # Each moved node takes one pod (55 or 100 % of its one GPU), and a pod that fits a GPU
            # fits any moved node: where more pods fit than advise had nodes, kube-scheduler may
            # pick other fitting pods than advise did. So its pods differ from advise's only by such
            # swaps: only once advise used every idle node, and every pod advise placed that
            # kube-scheduler did not is one it could have placed (it fits a GPU).
            asked = {f"p{i}": mem for i, (mem, _) in enumerate(pods)}
            out, into = set(placed) - set(where), set(where) - set(placed)
            if out or into:
                assert len(placed) == idle and len(out) == len(into), ("not a swap", where, advice)
                unfit = {name: asked[name] for name in out if asked[name] > GPU_GIB}
                assert not unfit, (
                    f"advise moved a node for {unfit} (GiB), which fit no {GPU_GIB} GiB GPU;"
                    f" kube-scheduler placed {sorted(into)} there instead",
                    advice,
                )
            # What is not placed stays pending once every moved node serves the core pool: each
            # such pod watched for a while (kube-scheduler retries it on every node change), those
            # advise left pending and those it placed that were swapped out alike.
            for node in set(placed.values()):
                labels, _, alloc = await node_meta(api, node)
                assert labels[c.LABEL_POOL] == core and alloc.get(c.RES_GPU_CORE) == "100"
            left = set(names) - set(where)
            until = time.monotonic() + STAYS_PENDING_S
            while left and time.monotonic() < until:
                for name in left:
                    pod = await core_api.read_namespaced_pod(name, ns)
                    assert not pod.spec.node_name, (
                        f"{name}: left pending with every moved node taken; it was put on"
                        f" {pod.spec.node_name}",
                        advice,
                    )
                await asyncio.sleep(0.5)
            final = await scheduled()
            assert final == where, ("more pods were scheduled than advise moved nodes for", final, where)
            assert len(where) == len(placed)
        finally:
            await core_api.delete_namespace(ns)
            for name in helper.created:
                await helper.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)

            async def gone() -> bool:
                return all([await helper.get(n) is None for n in helper.created])

            await wait_for(gone, what="the pools deleted", timeout_s=90)
            from gpushare.devcluster import delete_nodes

            await delete_nodes(api, nodes.created)
