"""ACK's fit model: a node's GPUs as ACK's device plugin and scheduler see them once it has a
sharing pool's labels and its plugin restarted (``gpushare advise``, lending). Pure.

* the node's GPUs: ``aliyun.com/gpu-count`` (allocatable, else the agent's ``gpushare.io/gpu.count``),
  each with ``aliyun.com/gpu-mem / count`` of memory in the lender's unit, converted to the
  borrower's ``devicePlugin.memoryUnit`` (GiB ↔ MiB, 1024), and, in a ``core_mem`` borrower, 100 %
  of compute each;
* a pod takes ``gpu-mem`` from one GPU, or ``gpu-mem / M`` from each of ``M`` GPUs with ACK's pod
  label ``aliyun.com/gpu-count: M`` (cgpu and share only, and only when M divides it); under
  ``core_mem`` it needs ``gpu-core.percentage`` on the same GPU, and a pod without it cannot go
  there (nor a pod with it to a pool without compute allocation).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpushare import constants as c
from gpushare.api.quantity import quantity_int
from gpushare.api.v1alpha1 import GPUSharePoolSpec
from gpushare.backends.base import GpuSize


def unit_factor(src: str, dst: str) -> tuple[int, int]:
    """(multiply, divide) turning gpu-mem in ``src`` units into ``dst`` units."""
    if src == dst:
        return 1, 1
    return (1024, 1) if (src, dst) == ("GiB", "MiB") else (1, 1024)


def counted_gpus(allocatable: Mapping[str, str]) -> int:
    """``aliyun.com/gpu-count`` (0: not advertised)."""
    return quantity_int(allocatable.get(c.RES_GPU_COUNT, 0))


def size(spec: GPUSharePoolSpec, allocatable: Mapping[str, str], gpus: int) -> GpuSize:
    """The node's GPUs (advertised, else ``gpus``) and gpu-mem per GPU, in the pool's unit."""
    count = counted_gpus(allocatable) or gpus
    mem = quantity_int(allocatable.get(c.RES_GPU_MEM, 0))
    return GpuSize(count, mem // count if count else 0, spec.device_plugin.memory_unit)


def room(
    borrower: GPUSharePoolSpec,
    lender: GPUSharePoolSpec,
    allocatable: Mapping[str, str],
    labels: Mapping[str, str],
    loan: GpuSize | None,
) -> list[tuple[int, int]]:
    """Per GPU (gpu-mem in the borrower's unit, compute %); a node already lent counts with the
    GPUs its loan recorded (its plugin may be restarting); empty: unknown."""
    if loan is not None and loan.gpus > 0 and loan.per_gpu > 0:
        count, per_src, unit = loan.gpus, loan.per_gpu, loan.unit
    else:
        count = counted_gpus(allocatable) or quantity_int(labels.get(c.LABEL_GPU_COUNT, 0))
        mem = quantity_int(allocatable.get(c.RES_GPU_MEM, 0))
        if count <= 0 or mem <= 0:
            return []
        per_src, unit = mem // count, lender.device_plugin.memory_unit
    mul, div = unit_factor(unit, borrower.device_plugin.memory_unit)
    core = 100 if borrower.mode == c.SCHEDULE_CORE_MEM else 0
    return [(per_src * mul // div, core)] * count


def fit_problem(pool: str, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int) -> str | None:
    """Why the pod cannot use the pool's GPUs (see the module docstring); None: it can."""
    mem, core = requests.get(c.RES_GPU_MEM, 0), requests.get(c.RES_GPU_CORE, 0)
    core_pool = spec.mode == c.SCHEDULE_CORE_MEM
    others = sorted(r for r in requests if not r.startswith(c.GPU_RESOURCE_PREFIX))
    if mem <= 0 and others:
        return f"pool {pool} is an ACK GPU-sharing pool, and the pod asks for {', '.join(others)}"
    if mem <= 0:
        return f"requests no {c.RES_GPU_MEM}"
    if core_pool and not core:
        return f"pool {pool} allocates compute and the pod requests no {c.RES_GPU_CORE}"
    if not core_pool and core:
        return f"requests {c.RES_GPU_CORE} and pool {pool} does not allocate compute"
    if core_pool and gpus > 1:
        return f"spreads over {gpus} GPUs, which ACK supports without compute allocation only"
    if mem % gpus:
        return f"{c.RES_GPU_MEM} {mem} does not divide over {gpus} GPUs"
    return None


def take(requests: Mapping[str, int], gpus: int) -> tuple[int, tuple[int, int]]:
    """``gpus`` GPUs, each giving gpu-mem / gpus and the whole gpu-core.percentage."""
    gpus = max(1, gpus)
    return gpus, (requests.get(c.RES_GPU_MEM, 0) // gpus, requests.get(c.RES_GPU_CORE, 0))
