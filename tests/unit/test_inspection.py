"""gpushare.inspection: the pure report behind `gpushare inspect`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.cli import main
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.gpu.inventory import collect_inventory, desired_node_metadata
from gpushare.inspection import NO_AGENT, build_report, render_text

POOL_KEY = "alibabacloud.com/nodepool-id"


def pool(
    name: str, np: str, *, isolation: bool = True, compute: bool = False, status: Any = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "gpushare.io/v1alpha1",
        "kind": "GPUSharePool",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {POOL_KEY: np}},
            "memoryIsolation": isolation,
            "computeAllocation": compute,
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def node(
    name: str,
    np: str | None,
    *,
    gpus: int = 2,
    mem: int = 30,
    core: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    alloc = {"cpu": "32", c.RES_GPU_MEM: str(mem), c.RES_GPU_COUNT: str(gpus)}
    if core:
        alloc[c.RES_GPU_CORE] = str(100 * gpus)
    all_labels = {"kubernetes.io/hostname": name, **({POOL_KEY: np} if np else {}), **(labels or {})}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations or {}},
        "status": {"allocatable": alloc},
    }


def pod(
    name: str,
    *,
    node_name: str = "",
    mem: int = 0,
    core: int = 0,
    phase: str = "Running",
    selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    message: str = "",
) -> dict[str, Any]:
    limits = {}
    if mem:
        limits[c.RES_GPU_MEM] = str(mem)
    if core:
        limits[c.RES_GPU_CORE] = str(core)
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    if selector:
        spec["nodeSelector"] = selector
    status: dict[str, Any] = {"phase": phase}
    if message:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
        "spec": spec,
        "status": status,
    }


def agent_metadata(isolation: str, gpus: list[FakeGPU]) -> tuple[dict[str, str], dict[str, str]]:
    labels, annotations = desired_node_metadata(collect_inventory(FakeNVML(gpus=gpus), isolation=isolation))  # type: ignore[arg-type]
    return {k: v for k, v in labels.items() if v is not None}, annotations


STATUS_A = {
    "conditions": [
        {
            "type": "Ready",
            "status": "False",
            "reason": "NodesNotReady",
            "lastTransitionTime": "2026-11-29T10:00:00Z",
        }
    ],
    "nodeStatuses": [{"name": "a-1", "phase": "Degraded", "reason": "IsolationUnavailable"}],
}


@pytest.fixture
def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    active = agent_metadata("active", [FakeGPU(name="NVIDIA A10", memory_mib=23028)] * 2)
    absent = agent_metadata("absent", [FakeGPU(name="NVIDIA A10", memory_mib=23028)] * 2)
    nodes = [
        node("a-0", "np-a", labels={**active[0], c.LABEL_SCHEDULE: "cgpu"}, annotations=active[1]),
        node("a-1", "np-a", labels={**absent[0], c.LABEL_SCHEDULE: "cgpu"}, annotations=absent[1]),
        node("b-0", "np-b", gpus=4, mem=60, core=True, labels={c.LABEL_SCHEDULE: "core_mem"}),
        node("loose-0", None, gpus=1, mem=15),
        node("cpu-0", None, gpus=0, mem=0),
    ]
    pods = [
        pod("train-1", node_name="a-0", mem=8, annotations={"ALIYUN_COM_GPU_MEM_IDX": "1"}),
        pod("train-2", node_name="a-0", mem=4),
        pod("done", node_name="a-0", mem=10, phase="Succeeded"),  # finished: holds nothing
        pod("web", node_name="a-0"),  # no GPU request: not listed
        pod(
            "core-1",
            node_name="b-0",
            mem=6,
            core=25,
            annotations={"scheduler.framework.gpushare.allocation": '{"0": {"2": 6}}'},
        ),
        pod(
            "wait-a", mem=16, phase="Pending", selector={POOL_KEY: "np-a"}, message="0/5 nodes are available"
        ),
        pod("wait-b", mem=4, core=10, phase="Pending", selector={POOL_KEY: "np-b"}),
        pod("wait-any", mem=2, phase="Pending"),
        pod("wait-cpu", phase="Pending", selector={POOL_KEY: "np-a"}),  # no GPU: not a pending GPU pod
    ]
    pools = [pool("team-a", "np-a", status=STATUS_A), pool("team-b", "np-b", compute=True)]
    return nodes, pods, pools


def test_report_numbers(cluster: Any) -> None:
    report = build_report(*cluster)
    a, b = report.pools
    assert (a.name, a.mode, a.memory_isolation) == ("team-a", "cgpu", True)
    assert a.ready == "False (NodesNotReady)"
    a0, a1 = a.nodes
    assert (a0.gpu_mem_allocated, a0.gpu_mem_total, a0.gpus) == (12, 30, 2)
    assert (a0.isolation, a1.isolation) == ("active", "absent")
    assert (a1.phase, a1.reason) == ("Degraded", "IsolationUnavailable")
    assert a0.phase == "-"  # not listed in the pool status
    assert [p.ref for p in a0.pods] == ["ml/train-1", "ml/train-2"]
    assert a0.pods[0].gpu == "1"
    assert a0.gpu_product == "NVIDIA-A10"
    assert a0.gpu_memory_mib == (23028, 23028)
    assert a.totals.gpu_mem_allocated == 12
    assert a.totals.gpu_mem_total == 60
    assert [p.ref for p in a.pending] == ["ml/wait-a"]
    assert a.pending[0].message == "0/5 nodes are available"
    assert any("a-1" in w and "isolation absent" in w for w in a.warnings)

    (b0,) = b.nodes
    assert (b.mode, b0.mode, b0.isolation) == ("core_mem", "core_mem", NO_AGENT)
    assert (b0.gpu_core_allocated, b0.gpu_core_total) == (25, 400)
    assert b0.pods[0].gpu == "2"
    assert [p.ref for p in b.pending] == ["ml/wait-b"]
    assert b.ready == "unknown (no status yet)"

    # GPU nodes and pending GPU pods outside every pool; the CPU node is left out
    assert [n.name for n in report.unpooled.nodes] == ["loose-0"]
    assert [p.ref for p in report.unpooled.pending] == ["ml/wait-any"]


def test_json_shape(cluster: Any) -> None:
    data = json.loads(json.dumps(build_report(*cluster).to_dict()))
    assert data["totals"] == {
        "nodes": 4,
        "gpus": 9,
        "gpuMem": {"allocated": 18, "total": 135},
        "gpuCorePercentage": {"allocated": 25, "total": 400},
    }
    a1 = data["pools"][0]["nodes"][1]
    assert a1["isolation"] == "absent"
    assert a1["phase"] == "Degraded"
    assert a1["reason"] == "IsolationUnavailable"
    assert data["pools"][0]["pending"][0] == {
        "namespace": "ml",
        "name": "wait-a",
        "phase": "Pending",
        "gpuMem": 16,
        "gpuCorePercentage": 0,
        "message": "0/5 nodes are available",
    }


def test_text_is_labelled_and_details_list_pods(cluster: Any) -> None:
    report = build_report(*cluster)
    short = render_text(report)
    assert "POOL team-a  mode=cgpu (memory isolation)" in short
    assert "PENDING: 1 GPU pod(s) not yet scheduled whose node selector targets this pool" in short
    assert "ml/train-1" not in short
    assert "12/30" in short
    assert "Degraded (IsolationUnavailable)" in short
    assert "NO POOL" in short
    assert "Total: 4 GPU node(s), 9 GPU(s), gpu-mem 18/135" in short
    detailed = render_text(report, details=True)
    assert "ml/train-1" in detailed
    assert "0/5 nodes are available" in detailed  # the WHY column
    assert "ml/done" not in detailed


def test_node_in_two_pools_and_invalid_pool_warn() -> None:
    nodes = [node("x-0", "np-x")]
    bad = pool("broken", "np-x")
    bad["spec"]["nodeSelector"] = {}
    report = build_report(nodes, [], [pool("p1", "np-x"), pool("p2", "np-x"), bad])
    assert [p.name for p in report.pools] == ["p1", "p2"]
    assert any("selected by 2 pools" in w for w in report.warnings)
    assert any(w.startswith("skipped invalid pool: GPUSharePool/broken") for w in report.warnings)
    assert report.unpooled.nodes == ()


def test_empty_cluster() -> None:
    report = build_report([], [], [])
    assert "No GPUSharePools, GPU nodes or pending GPU pods found." in render_text(report)


def test_pool_without_nodes() -> None:
    text = render_text(build_report([], [], [pool("lonely", "np-none")]))
    assert "(no nodes match the pool's nodeSelector)" in text
    assert "PENDING: none" in text


def test_cli_offline_from_files(tmp_path: Any, cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods, pools = cluster
    for name, items in (("nodes", nodes), ("pods", pods), ("pools", pools)):
        (tmp_path / f"{name}.json").write_text(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        )
    args = ["inspect", "--nodes", str(tmp_path / "nodes.json"), "--pods", str(tmp_path / "pods.json")]
    args += ["--pools", str(tmp_path / "pools.json")]
    assert main([*args, "-o", "json", "team-b"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in data["pools"]] == ["team-b"]
    assert main([*args, "nope"]) == 2
    assert "no GPUSharePool named nope (known: team-a, team-b)" in capsys.readouterr().err
    assert main(["inspect", "--nodes", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_effective_mode_is_shown_next_to_the_labelled_mode_and_a_stale_plugin_is_warned() -> None:
    core_labels = {c.LABEL_SCHEDULE: "core_mem", c.LABEL_CGPU: "true"}
    nodes = [
        node("fresh", "np-c", core=True, labels=core_labels),
        node("stale", "np-c", core=False, labels=core_labels),  # relabelled; plugin not restarted
    ]
    report = build_report(nodes, [], [pool("gpu-core", "np-c", compute=True)])
    (section,) = report.pools
    assert [(n.name, n.mode, n.effective_mode) for n in section.nodes] == [
        ("fresh", "core_mem", "core_mem"),
        ("stale", "core_mem", "cgpu|share"),
    ]
    assert section.warnings == (
        "node stale: labelled core_mem but its device plugin advertises cgpu|share; "
        "it has not restarted since the labels changed",
    )
    text = render_text(report)
    assert "MODE(node)  MODE(plugin)" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("stale"))
    assert row.split()[:3] == ["stale", "core_mem", "cgpu|share"]
    assert report.to_dict()["pools"][0]["nodes"][1]["effectiveMode"] == "cgpu|share"


def test_an_nvidia_pool_is_shown_as_nvidia_and_not_held_to_cgpu_isolation() -> None:
    """An NVIDIA pool keeps the ACK fields' defaults (memoryIsolation true) in its model: inspect
    shows its kind, not cgpu, and an agent reporting cGPU isolation absent is no warning there."""
    nv = pool("ts", "np-ts")
    nv["spec"] = {
        "nodeSelector": nv["spec"]["nodeSelector"],
        "nvidia": {"strategy": "TimeSlicing", "replicas": 4},
    }
    absent = node("n1", "np-ts", labels={c.LABEL_CGPU_ISOLATION: "absent"})
    report = build_report([absent], [], [nv])
    (section,) = report.pools
    assert (section.mode, section.memory_isolation, section.warnings) == ("nvidia", False, ())
    assert "mode=nvidia (NVIDIA's device plugin)" in render_text(report)


def test_an_nvidia_node_shows_what_nvidias_plugin_advertises() -> None:
    nv = pool("ts", "np-ts")
    nv["spec"] = {
        "nodeSelector": nv["spec"]["nodeSelector"],
        "nvidia": {"strategy": "TimeSlicing", "replicas": 4},
    }
    labelled = node("n1", "np-ts", labels={c.LABEL_NVIDIA_CONFIG: "gpushare-ts4-00000000"})
    labelled["status"]["allocatable"] = {"cpu": "32", c.RES_NVIDIA_GPU: "8"}
    report = build_report([labelled], [], [nv])
    assert report.to_dict()["pools"][0]["nodes"][0]["effectiveMode"] == "nvidia.com/gpu: 8"
