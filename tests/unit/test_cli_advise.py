"""``gpushare advise`` offline: moves, label changes, restarts, what stays pending; bad input one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare import constants as c
from gpushare.admission.targeting import node_constraints
from gpushare.api.v1alpha1 import parse_pool
from gpushare.cli import main
from gpushare.policy.advise import kind_problem
from gpushare.policy.demand import WaitingPod

NP = "alibabacloud.com/nodepool-id"


def pool(name: str, np: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {NP: np}}, **spec},
    }


def node(name: str, np: str, pool_name: str, mode: str, gpus: int = 1, mem: int = 16) -> dict[str, Any]:
    alloc = {c.RES_GPU_COUNT: str(gpus), c.RES_GPU_MEM: str(gpus * mem)}
    if mode == "core_mem":
        alloc[c.RES_GPU_CORE] = str(100 * gpus)
    labels = {NP: np, c.LABEL_CGPU: "true", c.LABEL_DISABLE_ISOLATION: "false", c.LABEL_SCHEDULE: mode,
              c.LABEL_PLACEMENT: "binpack", c.LABEL_POOL: pool_name}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {c.ANNOTATION_OWNED: json.dumps({"pool": pool_name, "prior": {}})},
        },
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str, *, mem: int, core: int = 0, node_name: str = "", target: str = "core") -> dict[str, Any]:
    limits = {c.RES_GPU_MEM: str(mem), **({c.RES_GPU_CORE: str(core)} if core else {})}
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
            "lastTransitionTime": "2026-12-01T10:00:00Z",
            "message": "0/3 nodes are available: 1 Insufficient aliyun.com/gpu-core.percentage, "
                       "2 node(s) didn't match Pod's node affinity/selector.",
        }]  # fmt: skip
    return obj


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    pools = [pool("cgpu", "np-a"), pool("core", "np-b", computeAllocation=True)]
    nodes = [
        node("a1", "np-a", "cgpu", "cgpu"),
        node("a2", "np-a", "cgpu", "cgpu"),
        node("b1", "np-b", "core", "core_mem"),
    ]
    pods = [
        pod("fill", mem=16, core=100, node_name="b1"),
        pod("a2-job", mem=2, node_name="a2", target="cgpu"),
        pod("train", mem=4, core=50),
        pod("huge", mem=40, core=50),
    ]
    out = []
    for name, objs in (("pools", pools), ("nodes", nodes), ("pods", pods)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(objs))
        out += [f"--{name}", str(path)]
    return out


def test_advise_text_names_the_idle_cgpu_node_its_labels_and_restart(
    files: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["advise", *files]) == 0
    out = capsys.readouterr().out
    assert (
        "pool core: 2 pod(s) wait for GPU (gpu-mem 44, gpu-core 100%), the oldest since 2026-12-01T10:00:00Z"
        in out
    )
    assert "move node a1 from pool cgpu to pool core:" in out  # a2 runs a GPU pod: not idle
    assert "    schedules ml/train (GPU 0: gpu-mem 4 GiB, gpu-core 50%)" in out
    assert f"    {c.LABEL_SCHEDULE}: cgpu -> core_mem" in out and f"    {c.LABEL_POOL}: cgpu -> core" in out
    assert "    restart device plugin" in out
    assert "stays pending: ml/huge (pool core): no idle node of another pool fits it per GPU" in out
    assert out.rstrip().endswith("1 move(s): 1 pod(s) would schedule, 1 stay pending")


def test_advise_json_and_keep_idle(files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advise", *files, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(m["node"], m["from"], m["to"]) for m in out["moves"]] == [("a1", "cgpu", "core")]
    assert out["moves"][0]["pods"] == [{"pod": "ml/train", "gpus": [{"gpu": 0, "gpuMem": 4, "gpuCore": 50}]}]
    assert out["moves"][0]["restartPlugin"] is True
    assert out["demand"]["cgpu"]["idleNodes"] == 1 and out["demand"]["core"]["pendingPods"] == 2
    assert [p["pod"] for p in out["pending"]] == ["ml/huge"]
    assert main(["advise", *files, "-o", "json", "--keep-idle", "1"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert kept["moves"] == [] and len(kept["pending"]) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "/nonexistent.yaml", "--pools", "/nonexistent.yaml"], "/nonexistent.yaml"),
        (["--nodes", "/dev/null"], "--pools FILE is required offline"),
        (["--pools", "/dev/null"], "--nodes FILE is required offline"),
        (["--keep-idle", "-1"], "--keep-idle -1: must be 0 or more"),
    ],
)
def test_advise_bad_input_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["advise", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_advise_invalid_pool_file_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "pool.yaml"
    bad.write_text(yaml.safe_dump(pool("x", "np-x", lending={"to": [], "keepIdle": -1})))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(node("a1", "np-x", "x", "cgpu")))
    assert main(["advise", "--pools", str(bad), "--nodes", str(nodes)]) == 2
    err = capsys.readouterr().err
    assert "GPUSharePool/x" in err and "spec.lending" in err and "Traceback" not in err


def test_inspect_shows_each_pools_demand(files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", *files]) == 0
    out = capsys.readouterr().out
    assert (
        "  DEMAND: 2 pod(s) wait for GPU resources (gpu-mem 44, gpu-core 100%, waiting since "
        "2026-12-01T10:00:00Z); idle nodes: 0" in out
    )
    assert "  DEMAND: 0 pod(s) wait for GPU resources; idle nodes: 1 (a1)" in out
    assert out.count("DEMAND") == 2
    assert main(["inspect", *files, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    demand = {p["name"]: p["demand"] for p in report["pools"]}
    assert demand["core"]["pods"] == ["ml/huge", "ml/train"] and demand["core"]["pendingPods"] == 2
    assert demand["cgpu"]["idleNodeNames"] == ["a1"]


def test_an_nvidia_pool_is_never_lent_to_ack_gpu_sharing_pods() -> None:
    """An NVIDIA pool reads as kind nvidia, not cgpu: advise names the mismatch instead of
    planning a loan of its nodes to a pod asking for aliyun.com/gpu-mem."""
    nv = parse_pool(
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": "ts"},
            "spec": {
                "nodeSelector": {"matchLabels": {"np": "ts"}},
                "nvidia": {"strategy": "TimeSlicing", "replicas": 4},
            },
        }
    )
    waiting = WaitingPod("default", "p", "u", {c.RES_GPU_MEM: 2}, 1, node_constraints("spec", {}), None)
    problem = kind_problem(waiting, nv)
    assert problem is not None and "pool ts is an NVIDIA device-plugin pool" in problem


def test_advise_sizes_an_nvidia_pool_in_slots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A TimeSlicing pool (4 replicas) whose pods wait; the ACK pool's idle node of 2 GPUs is 8 of
    its slots: a pod asking for 3 and one asking for 5 fit, one asking for 9 stays pending."""
    nvidia = {"strategy": "TimeSlicing", "replicas": 4}
    pools = [pool("cgpu", "np-a"), pool("ts", "np-t", nvidia=nvidia)]
    nodes = [node("a1", "np-a", "cgpu", "cgpu", gpus=2)]
    pods = []
    for name, slots in (("three", 3), ("five", 5), ("nine", 9)):
        p = pod(name, mem=0, target="ts")
        p["spec"]["containers"][0]["resources"]["limits"] = {c.RES_NVIDIA_GPU: str(slots)}
        pods.append(p)
    argv = []
    for kind, objs in (("pools", pools), ("nodes", nodes), ("pods", pods)):
        path = tmp_path / f"{kind}.yaml"
        path.write_text(yaml.safe_dump_all(objs))
        argv += [f"--{kind}", str(path)]
    assert main(["advise", *argv]) == 0
    out = capsys.readouterr().out
    assert "pool ts: 3 pod(s) wait for GPU (17 nvidia.com/gpu slot(s))" in out
    assert "move node a1 from pool cgpu to pool ts:" in out
    assert "    schedules ml/five (5 nvidia.com/gpu slot(s))" in out
    assert "    schedules ml/three (3 nvidia.com/gpu slot(s))" in out
    assert "stays pending: ml/nine (pool ts): no idle node of another pool fits it" in out
    assert main(["advise", *argv, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["demand"]["ts"]["requests"] == {c.RES_NVIDIA_GPU: "17"}
    assert {"pod": "ml/three", "slots": {c.RES_NVIDIA_GPU: 3}} in report["moves"][0]["pods"]
