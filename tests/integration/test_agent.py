"""The node agent against the real apiserver: publishes on its fake node, writes only on change."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpushare import agent as agent_loop
from gpushare import constants as c
from gpushare.devcluster import ClusterInfo
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.gpu.inventory import AGENT_LABELS, inventory_from_annotations, isolation_state
from gpushare.gpu.isolation import IsolationPaths
from gpushare.gpu.nvml import NVMLError
from gpushare.k8s import agent as k8s_agent

H200 = FakeGPU(name="NVIDIA H200", memory_mib=143771)
A10 = FakeGPU(name="NVIDIA A10", memory_mib=23028)


@pytest.fixture
def no_cgpu(tmp_path: Path) -> IsolationPaths:
    (tmp_path / "modules").write_text("nvidia 1 0 - Live 0x0\nnvidia_uvm 1 0 - Live 0x0\n")
    return IsolationPaths(proc_modules=tmp_path / "modules", proc_cgpu=tmp_path / "cgpu_km")


@pytest.fixture
def patch_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every patch the agent sends through the k8s layer (counts writes independently of the agent)."""
    calls: list[dict[str, Any]] = []
    real = k8s_agent.patch_node_metadata

    async def counting(api: client.ApiClient, name: str, patch: dict[str, Any]) -> str:
        calls.append(patch)
        return await real(api, name, patch)

    monkeypatch.setattr(k8s_agent, "patch_node_metadata", counting)
    return calls


async def _meta(api: client.ApiClient, name: str) -> tuple[dict[str, str], dict[str, str]]:
    node = await client.CoreV1Api(api).read_node(name)
    return dict(node.metadata.labels or {}), dict(node.metadata.annotations or {})


async def test_agent_publishes_then_writes_nothing_when_unchanged(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    no_cgpu: IsolationPaths,
    patch_calls: list[dict[str, Any]],
) -> None:
    (node,) = await fake_nodes.create(
        1, pool_labels={POOL_LABEL: "np-agent"}, extra_labels={c.LABEL_CGPU: "true"}
    )
    before, _ = await _meta(api, node)
    nvml = FakeNVML(gpus=[H200, A10])

    assert await agent_loop.run_agent(api, node, nvml, paths=no_cgpu, once=True) == 0
    assert len(patch_calls) == 1
    labels, annotations = await _meta(api, node)
    assert labels[c.LABEL_GPU_COUNT] == "2"
    assert labels[c.LABEL_GPU_PRODUCT] == "mixed"
    assert labels[c.LABEL_GPU_MEMORY_MIB] == "23028"
    assert labels[c.LABEL_CGPU_ISOLATION] == "absent"
    # nothing else on the node changed
    assert {k: v for k, v in labels.items() if k not in AGENT_LABELS} == before
    inventory = inventory_from_annotations(annotations)
    assert inventory is not None
    assert inventory.state == "ok"
    assert [g.memory_mib for g in inventory.gpus] == [143771, 23028]
    assert json.loads(annotations[c.ANNOTATION_INVENTORY])["gpus"][1]["name"] == "NVIDIA A10"
    # what the operator reads to report IsolationUnavailable
    assert isolation_state(labels, annotations) == "absent"

    # second and third runs: same inventory → no write at all
    state = agent_loop.AgentState()
    assert await agent_loop.run_agent(api, node, nvml, paths=no_cgpu, once=True, state=state) == 0
    assert await agent_loop.run_agent(api, node, nvml, paths=no_cgpu, once=True, state=state) == 0
    assert len(patch_calls) == 1
    assert state.writes == 0
    assert all(not r.patched for r in state.results)
    assert await _meta(api, node) == (labels, annotations)


async def test_agent_nvml_failure_publishes_unknown_and_clears_capacity_labels(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    no_cgpu: IsolationPaths,
    patch_calls: list[dict[str, Any]],
) -> None:
    (node,) = await fake_nodes.create(1)
    assert await agent_loop.run_agent(api, node, FakeNVML(gpus=[H200]), paths=no_cgpu, once=True) == 0
    broken = FakeNVML(
        gpus=[H200],
        device_errors={
            (0, "device_name"): NVMLError("GPU is lost", kind="gpu-lost", call="nvmlDeviceGetName")
        },
    )
    assert await agent_loop.run_agent(api, node, broken, paths=no_cgpu, once=True) == 0
    labels, annotations = await _meta(api, node)
    assert c.LABEL_GPU_COUNT not in labels
    assert c.LABEL_GPU_PRODUCT not in labels
    assert c.LABEL_GPU_MEMORY_MIB not in labels
    assert labels[c.LABEL_CGPU_ISOLATION] == "absent"
    inventory = inventory_from_annotations(annotations)
    assert inventory is not None
    assert inventory.state == "unknown"
    assert inventory.error == "GPU 0: nvmlDeviceGetName: GPU is lost"
    assert len(patch_calls) == 2


async def test_agent_missing_node_fails_once_mode(api: client.ApiClient, no_cgpu: IsolationPaths) -> None:
    state = agent_loop.AgentState()
    code = await agent_loop.run_agent(
        api, "no-such-node", FakeNVML(gpus=[H200]), paths=no_cgpu, once=True, state=state
    )
    assert code == 1
    assert state.errors == 1


async def test_agent_loop_keeps_running_without_a_driver(
    api: client.ApiClient, fake_nodes: FakeNodeSet, no_cgpu: IsolationPaths, patch_calls: list[dict[str, Any]]
) -> None:
    """The loop survives NVML failing every cycle, publishes once, then stops on request."""
    (node,) = await fake_nodes.create(1)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    nvml = FakeNVML.missing_library()
    real_init = nvml.init

    def init() -> None:  # runs in the agent's worker thread: ask it to stop after the 4th cycle
        if nvml.calls.count("init") >= 3:
            loop.call_soon_threadsafe(stop.set)
        real_init()

    nvml.init = init  # type: ignore[method-assign]
    state = agent_loop.AgentState()
    code = await asyncio.wait_for(
        agent_loop.run_agent(api, node, nvml, paths=no_cgpu, interval=0.05, stop=stop, state=state),
        timeout=30,
    )
    assert code == 0
    assert state.cycles == 4
    assert state.writes == 1
    assert len(patch_calls) == 1
    assert state.errors == 0
    _, annotations = await _meta(api, node)
    inventory = inventory_from_annotations(annotations)
    assert inventory is not None
    assert inventory.state == "unknown"
    assert "NVML init failed" in (inventory.error or "")


def test_agent_cli_with_the_real_nvml(cluster: ClusterInfo) -> None:
    """`gpushare agent --once` as the DaemonSet runs it, with the real pynvml backend."""
    from gpushare.devcluster.fakes import create_gpu_nodes, delete_nodes
    from gpushare.k8s.client import make_api_client

    name = f"agent-cli-{secrets.token_hex(3)}"

    async def setup() -> None:
        async with await make_api_client(str(cluster.kubeconfig)) as api:
            await create_gpu_nodes(api, 1, prefix=name)

    async def read() -> tuple[dict[str, str], dict[str, str]]:
        async with await make_api_client(str(cluster.kubeconfig)) as api:
            return await _meta(api, f"{name}-0")

    async def cleanup() -> None:
        async with await make_api_client(str(cluster.kubeconfig)) as api:
            await delete_nodes(api, [f"{name}-0"])

    asyncio.run(setup())
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpushare", "agent", "--once", "--kubeconfig", str(cluster.kubeconfig)],
            env={"NODE_NAME": f"{name}-0", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        labels, annotations = asyncio.run(read())
        inventory = inventory_from_annotations(annotations)
        assert inventory is not None
        logs = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
        events = [entry["event"] for entry in logs]
        assert "node patched" in events
        if inventory.state == "unknown":  # no NVIDIA driver here: clear log line, unknown published
            assert inventory.error
            assert any(e.startswith("gpu inventory unknown") for e in events)
            assert c.LABEL_GPU_COUNT not in labels
        else:
            assert labels[c.LABEL_GPU_COUNT] == str(len(inventory.gpus))
        assert labels[c.LABEL_CGPU_ISOLATION] in ("active", "absent", "unknown")
    finally:
        asyncio.run(cleanup())
