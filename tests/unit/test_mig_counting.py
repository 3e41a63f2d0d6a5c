"""A MIG pool's devices counted per profile: ``gpushare inspect`` and ``gpushare advise``, the demand
(``status.demand.requests``), lending, the pool's ``status.capacity``/``allocated`` and the
per-resource gauges (``gpushare.backends.nvidia.migfit`` behind the seam)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare import constants as c
from gpushare import metrics
from gpushare.api.v1alpha1 import parse_pool
from gpushare.backends import backend_for
from gpushare.backends.nvidia import migfit
from gpushare.cli import main
from gpushare.inspection import build_report, render_text
from gpushare.policy import NodeView, PodView, plan
from gpushare.policy.advise import advise, check
from gpushare.policy.demand import snapshot
from gpushare.policy.lending import decide_loans
from gpushare.policy.status import pool_status

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)
NP = "alibabacloud.com/nodepool-id"
MIG_3G, MIG_2G, MIG_1G = (c.RES_NVIDIA_MIG_PREFIX + p for p in ("3g.20gb", "2g.10gb", "1g.5gb"))
MIG_7G = c.RES_NVIDIA_MIG_PREFIX + "7g.40gb"
MIXED: dict[str, Any] = {"geometry": [{"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}]}
#: What a node of 2 GPUs advertises under MIXED.
ADVERTISED = {MIG_3G: "2", MIG_2G: "2", MIG_1G: "4", c.RES_NVIDIA_GPU: "0"}


def pool(name: str, np: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "generation": 1},
        "spec": {"nodeSelector": {"matchLabels": {NP: np}}, **spec},
    }


def mig_pool(name: str = "mig", np: str = "np-m", **mig: Any) -> dict[str, Any]:
    return pool(name, np, nvidia={"strategy": "MIG", "mig": mig or MIXED})


def node(name: str, np: str, allocatable: dict[str, str], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {NP: np, **labels}, "annotations": {}},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def ack_node(name: str, np: str, pool_name: str, gpus: int = 2) -> dict[str, Any]:
    """An idle node of an ACK cgpu pool, settled (labelled, owned)."""
    obj = node(
        name, np, {c.RES_GPU_COUNT: str(gpus), c.RES_GPU_MEM: str(16 * gpus)},
        **{c.LABEL_CGPU: "true", c.LABEL_DISABLE_ISOLATION: "false", c.LABEL_SCHEDULE: "cgpu",
           c.LABEL_PLACEMENT: "binpack", c.LABEL_POOL: pool_name},
    )  # fmt: skip
    obj["metadata"]["annotations"][c.ANNOTATION_OWNED] = json.dumps({"pool": pool_name, "prior": {}})
    return obj


def pod(name: str, limits: dict[str, str], *, node_name: str = "", target: str = "mig") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}"},
        "spec": {
            "nodeSelector": {c.LABEL_POOL: target},
            "containers": [{"name": "c", "resources": {"limits": limits}}],
        },
        "status": {"phase": "Running" if node_name else "Pending"},
    }
    if node_name:
        obj["spec"]["nodeName"] = node_name
    else:
        obj["status"]["conditions"] = [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "lastTransitionTime": "2026-12-06T10:00:00Z",
            "message": f"0/3 nodes are available: 1 Insufficient {next(iter(limits))}, "
                       "2 node(s) didn't match Pod's node affinity/selector.",
        }]  # fmt: skip
    return obj


def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """A MIG pool (one node of 2 A100s under MIXED, two pods running on it), an ACK pool with an
    idle node of 2 GPUs, and pods waiting for the MIG pool's devices."""
    pools = [pool("cgpu", "np-a"), mig_pool()]
    nodes = [
        node("m1", "np-m", ADVERTISED, **{c.LABEL_NVIDIA_GPU_COUNT: "2"}),
        ack_node("a1", "np-a", "cgpu"),
    ]
    pods = [
        pod("run-3g", {MIG_3G: "1"}, node_name="m1"),
        pod("run-1g", {MIG_1G: "2"}, node_name="m1"),
        pod("wait-3g", {MIG_3G: "1"}),
        pod("wait-1g", {MIG_1G: "3"}),
        pod("wait-three-3g", {MIG_3G: "3"}),
        pod("wait-7g", {MIG_7G: "1"}),
    ]
    return nodes, pods, pools


def test_the_geometry_counts_per_profile_replicas_and_the_fewest_over_gpu_models() -> None:
    spec = parse_pool(mig_pool()).spec
    assert migfit.resources(spec) == (MIG_1G, MIG_2G, MIG_3G)
    assert migfit.offered(spec, 2) == {MIG_1G: 4, MIG_2G: 2, MIG_3G: 2}
    sliced = parse_pool(mig_pool(**MIXED, timeSlicing=[{"profile": "1g.5gb", "replicas": 3}])).spec
    assert migfit.offered(sliced, 1) == {MIG_1G: 6, MIG_2G: 1, MIG_3G: 1}
    two_models: dict[str, Any] = {
        "geometry": [
            {"deviceFilter": ["0x20B010DE"], "profiles": {"3g.20gb": 2}},
            {"deviceFilter": ["0x20B210DE"], "profiles": {"3g.20gb": 1, "1g.5gb": 4}},
        ]
    }
    # Which model a node has is the MIG manager's to match: the fewest of each over the entries.
    assert migfit.offered(parse_pool(mig_pool(**two_models)).spec, 1) == {MIG_3G: 1}
    single = parse_pool(mig_pool(strategy="single", geometry=[{"profiles": {"1g.5gb": 7}}])).spec
    assert migfit.offered(single, 2) == {c.RES_NVIDIA_GPU: 14}
    named = parse_pool(mig_pool(config="all-1g.5gb")).spec
    assert (migfit.resources(named), migfit.room(named, 2)) == ((), [])
    assert "not known here" in (backend_for(named).fit_problem("mig", named, {MIG_1G: 1}, 1) or "")


def test_inspect_shows_each_nodes_devices_per_profile_and_pending_pods_asking_for_them() -> None:
    report = build_report(*cluster())
    mig = next(p for p in report.pools if p.name == "mig")
    (m1,) = mig.nodes
    assert m1.devices == ((MIG_1G, 2, 4), (MIG_2G, 0, 2), (MIG_3G, 1, 2))
    assert [(p.ref, p.devices) for p in m1.pods] == [
        ("ml/run-1g", ((MIG_1G, 2),)),
        ("ml/run-3g", ((MIG_3G, 1),)),
    ]
    assert [(p.ref, p.devices) for p in mig.pending] == [
        ("ml/wait-1g", ((MIG_1G, 3),)),
        ("ml/wait-3g", ((MIG_3G, 1),)),
        ("ml/wait-7g", ((MIG_7G, 1),)),
        ("ml/wait-three-3g", ((MIG_3G, 3),)),
    ]
    text = render_text(report, details=True)
    assert "DEVICES(used/total)" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("m1 "))
    assert f"{MIG_1G}: 2/4 used, {MIG_2G}: 0/2 used, {MIG_3G}: 1/2 used" in row
    assert f"{MIG_3G}: 1" in next(line for line in text.splitlines() if "ml/run-3g" in line)
    # The demand in the profiles' words: the geometry's devices asked for (7g.40gb is not one).
    assert f"(3 {MIG_1G}, 4 {MIG_3G}, waiting since" in text
    assert f"devices {MIG_1G}: 2/4 used" in text.splitlines()[-1]
    data = json.loads(json.dumps(report.to_dict()))
    section = next(p for p in data["pools"] if p["name"] == "mig")
    assert section["nodes"][0]["devices"][MIG_3G] == {"allocated": 1, "total": 2}
    assert section["totals"]["devices"][MIG_1G] == {"allocated": 2, "total": 4}
    assert section["demand"]["requests"] == {MIG_1G: "3", MIG_2G: "0", MIG_3G: "4"}
    # An ACK pool's nodes and totals carry no devices (its JSON is as before).
    ack = next(p for p in data["pools"] if p["name"] == "cgpu")
    assert "devices" not in ack["nodes"][0] and "devices" not in ack["totals"]


def test_advise_moves_an_idle_node_for_the_profiles_it_holds_and_names_what_never_fits() -> None:
    nodes, pods, pools = cluster()
    snap = snapshot(nodes, pods, pools, now=NOW)
    advice = advise(snap.pools, snap.demand, snap.nodes, now=NOW)
    (move,) = advice.moves
    assert (move.node, move.lender, move.borrower) == ("a1", "cgpu", "mig")
    # a1's 2 GPUs under MIXED: 4 x 1g.5gb, 2 x 2g.10gb, 2 x 3g.20gb (room in entry order).
    assert move.gpus == ((4, 0), (2, 0), (2, 0))
    assert {p.pod: dict(p.gpus) for p in move.placements} == {
        "ml/wait-1g": {0: (3, 0)},
        "ml/wait-3g": {2: (1, 0)},
    }
    why = {s.pod.ref: s.why for s in advice.pending}
    assert (
        why["ml/wait-7g"] == f"requests {MIG_7G}, and pool mig's geometry offers {MIG_1G}, {MIG_2G}, {MIG_3G}"
    )
    assert why["ml/wait-three-3g"].startswith("no idle node of another pool fits it")
    assert check(advice, snap.pools, snap.nodes, {p.ref: p for p in snap.waiting}) == []


def test_advise_prints_and_writes_the_profiles_it_places(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods, pools = cluster()
    argv = []
    for kind, objs in (("pools", pools), ("nodes", nodes), ("pods", pods)):
        path = tmp_path / f"{kind}.yaml"
        path.write_text(yaml.safe_dump_all(objs))
        argv += [f"--{kind}", str(path)]
    assert main(["advise", *argv]) == 0
    out = capsys.readouterr().out
    assert f"pool mig: 4 pod(s) wait for GPU (3 {MIG_1G}, 4 {MIG_3G})" in out
    assert f"    schedules ml/wait-3g (1 {MIG_3G})" in out
    assert f"    schedules ml/wait-1g (3 {MIG_1G})" in out
    assert main(["advise", *argv, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"pod": "ml/wait-3g", "slots": {MIG_3G: 1}} in report["moves"][0]["pods"]
    assert main(["inspect", *argv]) == 0
    assert f"{MIG_3G}: 1/2 used" in capsys.readouterr().out


def test_a_lender_lends_its_idle_node_to_a_mig_pool_for_its_waiting_profiles() -> None:
    nodes, pods, pools = cluster()
    pools[0]["spec"]["lending"] = {"to": ["mig"], "keepIdle": 0}
    snap = snapshot(nodes, pods, pools, now=NOW)
    decision = decide_loans(snap.pools, snap.demand, snap.nodes, set(), now=NOW)
    (lent,) = decision.lend
    assert (lent.node, lent.record.lender, lent.record.borrower, lent.record.gpus) == ("a1", "cgpu", "mig", 2)
    assert sorted(lent.move.pods) == ["ml/wait-1g", "ml/wait-3g"]


def test_the_pool_status_counts_capacity_and_allocation_per_profile() -> None:
    model = parse_pool(mig_pool())
    nodes = [
        NodeView("m1", {NP: "np-m"}, allocatable=ADVERTISED),
        NodeView("m2", {NP: "np-m"}, allocatable={}),
    ]
    pods = [
        PodView("ml", "a", node_name="m1", phase="Running", requests={MIG_3G: 1, MIG_1G: 1}),
        PodView("ml", "b", node_name="m1", phase="Succeeded", requests={MIG_3G: 1}),
    ]
    cp = plan([model], nodes, pods, now=NOW)
    st = pool_status(model, cp, {n.name: n for n in nodes}, pods, now=NOW)
    assert st["capacity"] == {MIG_1G: "4", MIG_2G: "2", MIG_3G: "2"}
    assert st["allocated"] == {MIG_1G: "1", MIG_2G: "0", MIG_3G: "1"}
    # A time-slicing pool's capacity is as before: its one resource.
    ts = parse_pool(pool("ts", "np-m", nvidia={"strategy": "TimeSlicing", "replicas": 4}))
    st = pool_status(ts, plan([ts], nodes, pods, now=NOW), {n.name: n for n in nodes}, pods, now=NOW)
    assert st["capacity"] == {c.RES_NVIDIA_GPU: "0"}


def test_per_resource_gauges_follow_the_status_and_drop_a_profile_that_went() -> None:
    R = metrics.REGISTRY
    name = "metrics-test-mig"
    status = {"schedule": "gpushare-mig-aaaaaaaa", "backend": "nvidia-mig", "nodes": {"matched": 1},
              "capacity": {MIG_3G: "2", MIG_1G: "4"}, "allocated": {MIG_3G: "1", MIG_1G: "0"}}  # fmt: skip
    metrics.set_pool_status(name, status, ready_timeout_seconds=300)
    metrics.set_pool_demand(name, {"pendingPods": 2, "requests": {MIG_3G: "3", MIG_1G: "0"}})

    def value(metric: str, resource: str) -> float | None:
        return R.get_sample_value(metric, {"pool": name, "resource": resource})

    assert value("gpushare_pool_capacity", MIG_3G) == 2
    assert value("gpushare_pool_allocated", MIG_3G) == 1
    assert value("gpushare_pool_pending_requests", MIG_3G) == 3
    # The geometry edited: 1g.5gb is gone, 2g.10gb came; the old profile's series go.
    status = {**status, "capacity": {MIG_3G: "2", MIG_2G: "2"}, "allocated": {MIG_3G: "0", MIG_2G: "1"}}
    metrics.set_pool_status(name, status, ready_timeout_seconds=300)
    metrics.set_pool_demand(name, {"pendingPods": 0, "requests": {MIG_3G: "0", MIG_2G: "0"}})
    assert value("gpushare_pool_capacity", MIG_1G) is None
    assert value("gpushare_pool_pending_requests", MIG_1G) is None
    assert value("gpushare_pool_allocated", MIG_2G) == 1
    # The existing gauges are as before: the ACK ones are 0 for a MIG pool, none is renamed.
    assert R.get_sample_value("gpushare_pool_pending_pods", {"pool": name}) == 0
    assert R.get_sample_value("gpushare_pool_pending_gpu_mem", {"pool": name}) == 0
    metrics.forget_pool(name)
    metrics.forget_pool_demand(name)
    for metric in ("gpushare_pool_capacity", "gpushare_pool_allocated", "gpushare_pool_pending_requests"):
        assert value(metric, MIG_3G) is None, metric
