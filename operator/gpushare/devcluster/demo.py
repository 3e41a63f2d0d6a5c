"""Fake GPU nodes for ``make demo`` (``hack/demo.sh``): three ACK node pools, one agent pass each.

``python -m gpushare.devcluster.demo nodes --kubeconfig FILE`` creates six kwok GPU nodes whose
``alibabacloud.com/nodepool-id`` values are the ones the pools in ``examples/`` select, then runs
one ``gpushare agent`` cycle per node with the NVML stand-in (``gpushare.gpu.fake``) and a fake
``/proc``, so ``gpushare inspect`` shows real agent data (GPU model, cGPU isolation). The nodes'
GPU resources are not fixed: ``pluginsim`` (started with the cluster) advertises them from the
labels each time a node's device-plugin pod starts, as ACK's plugin does. Demo tooling only: the
operator never uses the stand-ins.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.agent import run_cycle
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster import nvidiasim
from gpushare.devcluster.fakes import POOL_LABEL, create_gpu_nodes, ensure_mig_manager, ensure_nvidia_plugin
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.gpu.isolation import MODULE_NAME, IsolationPaths
from gpushare.k8s.client import make_api_client


@dataclass(frozen=True)
class DemoNodePool:
    """One ACK node pool of the demo: ``count`` nodes named ``<prefix>-<i>``."""

    nodepool_id: str
    prefix: str
    count: int
    gpus: int
    gpu_name: str
    #: what the plugin advertises per GPU: gpu_mem_mib // 1024 (ACK floors to whole GiB)
    gpu_mem_gib: int
    gpu_mem_mib: int
    core_percentage: bool
    #: whether the fake node has the cGPU kernel module (what the agent reports)
    cgpu_km: bool


DEMO_POOLS: tuple[DemoNodePool, ...] = (
    DemoNodePool("np-cgpu", "gpu-cgpu", 2, 1, "Tesla V100-SXM2-16GB", 15, 16160, False, True),
    DemoNodePool("np-cgpu-no-isolation", "gpu-shared", 2, 1, "Tesla T4", 15, 15360, False, False),
    DemoNodePool("np-gpu-core", "gpu-core", 2, 2, "NVIDIA A10", 22, 23028, True, True),
)

#: ``make cluster``'s NVIDIA node pool: two nodes of 2 x A100-SXM4-40GB (the GPUs of the real
#: node's fake NVML), NVIDIA's plugin simulated (``pluginsim``), labelled as GPU Feature Discovery
#: and the node agent would; examples/pool-nvidia-time-slicing.yaml selects them by
#: ``gpushare.io/gpu.product``. Not in ``make demo`` (its NVIDIA part is the real node's).
NVIDIA_NODE_POOL = DemoNodePool(
    "np-nvidia", "nvidia-a100", 2, 2, "NVIDIA A100-SXM4-40GB", 40, 40960, False, False
)
#: ``make cluster``'s MIG node pool: two nodes of 2 x A100-SXM4-80GB, MIG-capable, whose MIG manager
#: ``pluginsim`` plays beside NVIDIA's plugin (its ConfigMap of mig-parted configs in
#: ``gpu-operator``, ``ensure_mig_manager``); each starts at ``nvidia.com/mig.config=all-disabled``,
#: as the GPU Operator labels a MIG-capable node. examples/pool-nvidia-mig.yaml selects them by
#: ``gpushare.io/gpu.product`` (another product than the NVIDIA pool's, which the time-slicing
#: example selects).
MIG_NODE_POOL = DemoNodePool(
    "np-nvidia-mig", "nvidia-mig", 2, 2, "NVIDIA A100-SXM4-80GB", 80, 81920, False, False
)
#: The MIG config a node of ``MIG_NODE_POOL`` starts with (NVIDIA's default: MIG disabled).
MIG_START_CONFIG = "all-disabled"
#: How long the node creators below wait for each node pool's simulated plugin to register. A
#: second ``make cluster`` beside ``make test``'s own on 2 busy cores has needed more than a minute.
REGISTER_TIMEOUT_S = 150.0
#: The named configs NVIDIA's plugin starts with: the chart's ``default`` (no sharing), ts2, ts4.
NVIDIA_CONFIGS: dict[str, str] = {
    nv.DEFAULT_CONFIG: nv.time_slicing_config(1),
    **{f"ts{n}": nv.time_slicing_config(n) for n in (2, 4)},
}


def _proc_dir(root: Path, with_module: bool) -> IsolationPaths:
    root.mkdir(parents=True, exist_ok=True)
    modules = root / "modules"
    lines = ["nvidia_uvm 1802240 0 - Live 0x0000000000000000 (POE)"]
    if with_module:
        lines.append(f"{MODULE_NAME} 1241088 0 - Live 0x0000000000000000 (POE)")
    modules.write_text("\n".join(lines) + "\n")
    return IsolationPaths(proc_modules=modules, proc_cgpu=root / "cgpu_km")


async def create_demo_nodes(kubeconfig: str, pools: tuple[DemoNodePool, ...] = DEMO_POOLS) -> list[str]:
    """Create the nodes and publish each one's agent labels once; returns the node names."""
    names: list[str] = []
    api = await make_api_client(kubeconfig)
    async with api:
        for pool in pools:
            created = await create_gpu_nodes(
                api,
                pool.count,
                prefix=pool.prefix,
                pool_labels={POOL_LABEL: pool.nodepool_id},
                gpus_per_node=pool.gpus,
                gpu_mem_gib_per_gpu=pool.gpu_mem_gib,
                core_percentage=pool.core_percentage,
                simulate_plugin=True,
                timeout_s=REGISTER_TIMEOUT_S,
                gpus=[FakeGPU(name=pool.gpu_name, memory_mib=pool.gpu_mem_mib, mig=None)] * pool.gpus,
            )
            with tempfile.TemporaryDirectory(prefix="gpushare-demo-proc-") as tmp:
                paths = _proc_dir(Path(tmp), pool.cgpu_km)
                for i, name in enumerate(created):
                    gpus = [
                        FakeGPU(
                            name=pool.gpu_name,
                            memory_mib=pool.gpu_mem_mib,
                            uuid=f"GPU-{pool.prefix}-{i}-{g}",
                            mig=None,
                        )
                        for g in range(pool.gpus)
                    ]
                    await run_cycle(api, name, FakeNVML(gpus=gpus), paths)
            names.extend(created)
    return names


async def create_nvidia_nodes(
    api: client.ApiClient,
    pool: DemoNodePool = NVIDIA_NODE_POOL,
    configs: Mapping[str, str] = NVIDIA_CONFIGS,
    *,
    stand_in: bool = True,
) -> list[str]:
    """NVIDIA's plugin (its ConfigMap of ``configs``, and with ``stand_in`` the stand-in DaemonSet:
    without it, the real one must be installed) and ``pool``'s nodes; waits until the simulated
    plugin registered on each (the default config: one ``nvidia.com/gpu`` per GPU)."""
    await ensure_nvidia_plugin(api, configs, daemonset=stand_in)
    gpu = FakeGPU(name=pool.gpu_name, memory_mib=pool.gpu_mem_mib, mig=False)  # MIG-capable, off
    return await create_gpu_nodes(
        api,
        pool.count,
        prefix=pool.prefix,
        pool_labels={POOL_LABEL: pool.nodepool_id},
        simulate_plugin=True,
        timeout_s=REGISTER_TIMEOUT_S,
        plugin=nvidiasim.SIMULATED_VALUE,
        gpus=[gpu] * pool.gpus,
    )


async def create_mig_nodes(api: client.ApiClient, pool: DemoNodePool = MIG_NODE_POOL) -> list[str]:
    """The MIG manager's ConfigMap (the chart's configs) and ``pool``'s nodes, labelled
    ``nvidia.com/mig.config=all-disabled``; NVIDIA's plugin (``create_nvidia_nodes``) serves them.
    Waits until the simulated plugin registered on each."""
    await ensure_mig_manager(api)
    gpu = FakeGPU(name=pool.gpu_name, memory_mib=pool.gpu_mem_mib, mig=False)  # MIG-capable, off
    return await create_gpu_nodes(
        api,
        pool.count,
        prefix=pool.prefix,
        pool_labels={POOL_LABEL: pool.nodepool_id},
        extra_labels={c.LABEL_MIG_CONFIG: MIG_START_CONFIG},
        simulate_plugin=True,
        timeout_s=REGISTER_TIMEOUT_S,
        plugin=nvidiasim.SIMULATED_VALUE,
        gpus=[gpu] * pool.gpus,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpushare.devcluster.demo", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    nodes = sub.add_parser("nodes", help="create the demo's fake GPU nodes and run the agent once on each")
    nodes.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    names = asyncio.run(create_demo_nodes(args.kubeconfig))
    print(f"created {len(names)} fake GPU nodes: {' '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
