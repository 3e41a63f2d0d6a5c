"""``gpushare plan`` on the example cluster and on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NODES = str(EXAMPLES / "cluster" / "nodes.yaml")
PODS = str(EXAMPLES / "cluster" / "pods.yaml")


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "-o", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _by_node(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in data["nodes"]}


def test_example_cluster_json(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "--pools", str(EXAMPLES), "--nodes", NODES, "--pods", PODS)
    nodes = _by_node(data)
    cgpu = nodes["np-cgpu-node-1"]
    assert (cgpu["pool"], cgpu["action"]) == ("cgpu", "Apply")
    assert {x["key"]: (x["from"], x["to"]) for x in cgpu["labels"]} == {
        c.LABEL_CGPU: (None, "true"),
        c.LABEL_DISABLE_ISOLATION: (None, "false"),
        c.LABEL_SCHEDULE: ("default", "cgpu"),
        c.LABEL_PLACEMENT: (None, "binpack"),
        c.LABEL_POOL: (None, "cgpu"),
    }
    assert cgpu["restartPlugin"] is True
    assert cgpu["pluginPods"] == ["kube-system/gpushare-device-plugin-ds-c1a"]
    assert cgpu["modeSwitch"] == {"from": "default", "to": "cgpu"}

    noiso = nodes["np-cgpu-no-isolation-node-1"]
    assert {x["key"] for x in noiso["labels"]} == {c.LABEL_SCHEDULE, c.LABEL_PLACEMENT, c.LABEL_POOL}
    assert {x["key"]: x["to"] for x in noiso["labels"]}[c.LABEL_SCHEDULE] == "share"

    core = nodes["np-gpu-core-node-1"]
    assert {x["key"]: x["to"] for x in core["labels"]}[c.LABEL_SCHEDULE] == "core_mem"

    held = nodes["np-gpu-core-node-2"]
    assert (held["action"], held["hold"], held["labels"]) == ("Hold", "Wait", [])
    assert held["blockingPods"] == ["default/cgpu-test-7d9f"]

    assert nodes["np-gpu-core-node-3"]["action"] == "Skip"
    assert (nodes["cpu-node-1"]["action"], nodes["cpu-node-1"]["pool"]) == ("Noop", None)
    assert data["summary"] == {
        "nodes": 7,
        "changed": 4,
        "pluginRestarts": 4,
        "held": 1,
        "conflicts": 0,
        "skipped": 1,
        "restored": 0,
        "unchanged": 1,
    }


def test_without_pods_nothing_is_held(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "--pools", str(EXAMPLES), "--nodes", NODES)
    node = _by_node(data)["np-gpu-core-node-2"]
    assert node["action"] == "Apply"
    assert node["modeSwitch"] == {"from": "cgpu", "to": "core_mem"}


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--pools", str(EXAMPLES), "--nodes", NODES, "--pods", PODS]) == 0
    out = capsys.readouterr().out
    assert "    ack.node.gpu.schedule: default -> cgpu   [mode switch]" in out
    assert "    restart device plugin: kube-system/gpushare-device-plugin-ds-c1a" in out
    assert "    blocking pod: default/cgpu-test-7d9f (aliyun.com/gpu-mem=4)" in out
    assert "np-gpu-core-node-3: Skip (pool gpu-core): node is labelled gpushare.io/skip=true" in out
    assert "cpu-node-1" not in out  # unchanged nodes only with --all
    assert out.strip().splitlines()[-1] == (
        "7 node(s): 4 to change, 4 plugin restart(s), 1 held, 0 conflict(s), 1 skipped, "
        "0 restored, 1 unchanged"
    )
    assert main(["plan", "--pools", str(EXAMPLES), "--nodes", NODES, "--all"]) == 0
    assert "cpu-node-1: Noop: in no pool" in capsys.readouterr().out


def test_conflict_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        "apiVersion: gpushare.io/v1alpha1\nkind: GPUSharePool\nmetadata: {name: all-t4}\n"
        "spec: {nodeSelector: {matchExpressions: [{key: kubernetes.io/hostname, operator: In,"
        " values: [np-cgpu-node-2]}]}}\n"
    )
    data = _json(capsys, "--pools", str(EXAMPLES), "--pools", str(extra), "--nodes", NODES)
    node = _by_node(data)["np-cgpu-node-2"]
    assert (node["action"], node["conflictPools"], node["labels"]) == ("Conflict", ["all-t4", "cgpu"], [])


def test_delete_preview_restores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Plan, "apply" the labels by hand into a nodes file, then preview deleting the pool.
    data = _json(capsys, "--pools", str(EXAMPLES), "--nodes", NODES)
    node = _by_node(data)["np-cgpu-node-1"]
    labels = {"alibabacloud.com/nodepool-id": "np-cgpu", c.LABEL_SCHEDULE: "default"}
    labels.update({x["key"]: x["to"] for x in node["labels"]})
    applied = tmp_path / "nodes.json"
    applied.write_text(
        json.dumps(
            {
                "kind": "Node",
                "metadata": {"name": "np-cgpu-node-1", "labels": labels, "annotations": node["annotations"]},
            }
        )
    )
    data = _json(capsys, "--pools", str(EXAMPLES), "--nodes", str(applied), "--delete", "cgpu")
    restored = _by_node(data)["np-cgpu-node-1"]
    assert restored["action"] == "Restore"
    assert {x["key"]: x["to"] for x in restored["labels"]} == {
        c.LABEL_CGPU: None,
        c.LABEL_DISABLE_ISOLATION: None,
        c.LABEL_SCHEDULE: "default",  # the prior value, written back
        c.LABEL_PLACEMENT: None,
        c.LABEL_POOL: None,
    }
    assert restored["annotations"][c.ANNOTATION_OWNED] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--pools", str(EXAMPLES / "invalid" / "pool-compute-without-isolation.yaml"), "--nodes", NODES],
            "computeAllocation: true requires memoryIsolation: true",
            id="invalid-pool",
        ),
        pytest.param(
            ["--pools", "/nonexistent.yaml", "--nodes", NODES],
            "/nonexistent.yaml: no such file",
            id="missing",
        ),
        pytest.param(["--pools", NODES, "--nodes", NODES], "no GPUSharePool found", id="no-pools"),
        pytest.param(["--pools", str(EXAMPLES), "--nodes", PODS], "no Node found", id="no-nodes"),
        pytest.param(
            ["--pools", str(EXAMPLES), "--nodes", NODES, "--delete", "nope"], "--delete nope", id="bad-delete"
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_invalid_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    assert main(["plan", "--pools", str(bad), "--nodes", NODES]) == 2
    assert "is not valid YAML" in capsys.readouterr().err


# --- -f: what applying a file would change (offline here; live in tests/integration/test_live_cli.py) ---


def test_apply_preview_offline_shows_spec_diff_and_node_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = tmp_path / "cgpu.yaml"
    changed.write_text(
        (EXAMPLES / "pool-cgpu.yaml").read_text().replace("placement: binpack", "placement: spread")
    )
    new = tmp_path / "new.yaml"
    new.write_text(
        "apiVersion: gpushare.io/v1alpha1\nkind: GPUSharePool\nmetadata: {name: extra}\n"
        "spec: {nodeSelector: {matchLabels: {alibabacloud.com/nodepool-id: np-none}}}\n"
    )
    pools = ["--pools", str(EXAMPLES / "pool-cgpu.yaml"), "--pools", str(EXAMPLES / "pool-gpu-core.yaml")]
    data = _json(capsys, *pools, "--nodes", NODES, "-f", str(changed), "-f", str(new))
    by_pool = {p["name"]: p for p in data["pools"]}
    assert by_pool["cgpu"]["change"] == "update"
    assert by_pool["cgpu"]["fields"] == [{"path": "spec.placement", "from": "binpack", "to": "spread"}]
    assert by_pool["extra"]["change"] == "create"
    assert {"path": "spec.rollout.modeSwitch", "from": None, "to": "Wait"} in by_pool["extra"]["fields"]
    node = _by_node(data)["np-cgpu-node-1"]
    assert {x["key"]: x["to"] for x in node["labels"]}[c.LABEL_PLACEMENT] == "spread"

    assert (
        main(
            ["plan", *pools, "--nodes", NODES, "-f", str(changed), "-f", str(EXAMPLES / "pool-gpu-core.yaml")]
        )
        == 0
    )
    text = capsys.readouterr().out.splitlines()
    assert text[:3] == [
        "GPUSharePool/cgpu: would be configured",
        "    spec.placement: binpack -> spread",
        "GPUSharePool/gpu-core: unchanged",
    ]


def test_apply_preview_without_pools_files(capsys: pytest.CaptureFixture[str]) -> None:
    """-f alone is enough offline: the file's pools against the nodes, all of them created."""
    data = _json(capsys, "--nodes", NODES, "-f", str(EXAMPLES / "pool-cgpu.yaml"))
    assert [(p["name"], p["change"]) for p in data["pools"]] == [("cgpu", "create")]
    assert data["summary"]["changed"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--pools", str(EXAMPLES / "pool-cgpu.yaml")], "--nodes FILE is required offline", id="no-nodes"
        ),
        pytest.param(["--nodes", NODES, "-f", NODES], "-f ", id="f-without-pools"),
        pytest.param(
            ["--kubeconfig", "/nonexistent/kubeconfig", "-f", str(EXAMPLES / "pool-cgpu.yaml")],
            "kubeconfig '/nonexistent/kubeconfig' does not exist",
            id="live-no-kubeconfig",
        ),
    ],
)
def test_apply_preview_bad_input(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_live_inputs_without_a_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live path's handling, with the cluster read replaced by the example files."""
    from gpushare.cli import plan as plan_cli
    from gpushare.k8s.readonly import LiveState
    from gpushare.objectfiles import load_files

    pools = [o for o in load_files([str(EXAMPLES)]) if o.get("kind") == c.KIND]
    for obj in pools:
        if obj["metadata"]["name"] == "cgpu-no-isolation":  # finalizer pending: planned as a deletion
            obj["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    bad = {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": "stored-bad"}, "spec": {}}
    state = LiveState(
        server="https://example.invalid:6443",
        pools=[*pools, bad],
        nodes=[o for o in load_files([NODES]) if o.get("kind") == "Node"],
        pods=[o for o in load_files([PODS]) if o.get("kind") == "Pod"],
    )
    seen: list[str | None] = []

    def fake_read(kubeconfig: str | None = None, *, with_pods: bool = True) -> LiveState:
        seen.append(kubeconfig)
        return state

    monkeypatch.setattr(plan_cli, "read_live_sync", fake_read)
    data = _json(capsys, "--kubeconfig", "kc", "--delete", "cgpu")
    assert seen == ["kc"]
    assert data["invalidPools"].keys() == {"stored-bad"}
    assert data["pools"] == [{"name": "cgpu", "change": "delete", "fields": []}]
    actions = {n["node"]: n["action"] for n in data["nodes"]}
    # neither cgpu's nodes nor the deleting pool's nodes join their pool
    assert actions["np-cgpu-node-1"] != "Apply" and actions["np-cgpu-no-isolation-node-1"] != "Apply"
    assert main(["plan"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"live: https://example.invalid:6443: {len(pools) + 1} pool(s)"), first


def test_a_pool_that_selects_no_node_says_so_with_its_selector(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As on a cluster whose node pools are not the examples' (np-a): MATCHED 0 must not be silent."""
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-a-0\n"
        "  labels: {alibabacloud.com/nodepool-id: np-a, gpushare: 'true'}\n"
    )
    assert main(["plan", "-f", str(EXAMPLES / "pool-gpu-core.yaml"), "--nodes", str(nodes)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        "pool gpu-core: spec.nodeSelector alibabacloud.com/nodepool-id=np-gpu-core selects 0 nodes: no node "
        "has these labels (kubectl get nodes -l 'alibabacloud.com/nodepool-id=np-gpu-core'); label the "
        "pool's nodes or change the selector"
    ) in out
    # a pool with nodes gets no such line
    assert main(["plan", "-f", str(EXAMPLES / "pool-gpu-core.yaml"), "--nodes", NODES]) == 0
    assert "selects 0 nodes" not in capsys.readouterr().out
