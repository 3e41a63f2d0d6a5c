"""``make gpu-check``: the agent's inventory and the quota helper against a real NVIDIA GPU.

    python -m gpushare.gpu.check [--index 0] [--share-gib N] [--margin 0.05]

1. Reads the inventory through the real NVML exactly as ``gpushare agent`` does and prints
   it with the labels the agent would publish.
2. Cross-checks the quota helper with GPU ``--index``: builds the environment the gpushare
   device plugin would inject for a share of ``--share-gib`` (default: a quarter of the GPU),
   and, when PyTorch is installed, applies it with ``apply_torch`` and proves it holds:
   allocating half the share succeeds, allocating more than the share fails.

Exit codes: 0 all checks passed (PyTorch missing is reported, not failed); 1 a check failed;
2 no NVIDIA driver / NVML on this machine.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from gpushare.gpu.inventory import collect_inventory, desired_node_metadata
from gpushare.gpu.isolation import detect_cgpu_isolation
from gpushare.gpu.nvml import (
    KIND_DRIVER_NOT_LOADED,
    KIND_LIBRARY_NOT_FOUND,
    NVML,
    MiB,
    NVMLError,
    PynvmlBackend,
)
from gpushare.quota import QuotaError, apply_torch, read_quota

NO_GPU_EXIT = 2


def _say(text: str = "") -> None:
    print(text, flush=True)


def _probe(nvml: NVML) -> str | None:
    """None when NVML initialises, else the reason (only for library/driver missing)."""
    try:
        nvml.init()
    except NVMLError as exc:
        if exc.kind in (KIND_LIBRARY_NOT_FOUND, KIND_DRIVER_NOT_LOADED):
            return str(exc)
        raise
    nvml.shutdown()
    return None


def torch_allocation_check(quota_env: dict[str, str], margin: float, index: int) -> tuple[bool, list[str]]:
    """Apply the share with PyTorch and try allocations under and over it."""
    lines: list[str] = []
    try:
        torch: Any = importlib.import_module("torch")
    except ModuleNotFoundError:
        return True, ["PyTorch not installed: allocation check NOT RUN (pip install torch to run it)"]
    quota = read_quota(quota_env)
    torch.cuda.set_device(index)
    fraction = apply_torch(quota, margin=margin, device=index)
    if fraction is None:  # pragma: no cover - torch was importable just above
        return False, ["apply_torch did not find PyTorch"]
    total = int(torch.cuda.get_device_properties(index).total_memory)
    lines.append(
        f"torch {torch.__version__}: set_per_process_memory_fraction({fraction}, {index}) "
        f"= {fraction * total / MiB:.0f} MiB of {total // MiB} MiB"
    )
    ok = True
    under = int(quota.container_bytes * 0.5)
    over = int(quota.container_bytes * 1.1)
    try:
        t = torch.empty(under, dtype=torch.uint8, device=f"cuda:{index}")
        del t
        lines.append(f"allocate {under // MiB} MiB (half the share): ok")
    except torch.cuda.OutOfMemoryError as exc:
        ok = False
        lines.append(f"allocate {under // MiB} MiB (half the share): FAILED, unexpected OOM: {exc}")
    torch.cuda.empty_cache()
    try:
        t = torch.empty(over, dtype=torch.uint8, device=f"cuda:{index}")
        del t
        ok = False
        lines.append(f"allocate {over // MiB} MiB (110% of the share): FAILED, it was allowed")
    except torch.cuda.OutOfMemoryError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        lines.append(f"allocate {over // MiB} MiB (110% of the share): refused as expected ({first[:120]})")
    torch.cuda.empty_cache()
    return ok, lines


def run(argv: Sequence[str] | None = None, nvml: NVML | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=int, default=0, help="GPU (NVML/CUDA index) for the quota check")
    parser.add_argument("--share-gib", type=int, help="the simulated container share (default: GPU/4)")
    parser.add_argument("--margin", type=float, default=0.05)
    args = parser.parse_args(argv)
    backend = nvml or PynvmlBackend()

    try:
        missing = _probe(backend)
    except NVMLError as exc:
        _say(f"gpu-check: FAILED: NVML error: {exc}")
        return 1
    if missing is not None:
        _say(f"gpu-check: no NVIDIA driver/NVML found on this machine ({missing})")
        return NO_GPU_EXIT

    isolation = detect_cgpu_isolation()
    inventory = collect_inventory(backend, isolation=isolation.state)
    labels, _ = desired_node_metadata(inventory)
    _say("== agent inventory (real NVML) ==")
    _say(json.dumps(inventory.model_dump(by_alias=True, mode="json"), indent=2))
    _say(f"cgpu isolation: {isolation.state} ({isolation.reason})")
    _say("labels the agent publishes:")
    for key, value in labels.items():
        _say(f"  {key}={value if value is not None else '(removed)'}")
    if inventory.state != "ok":
        _say(f"gpu-check: FAILED: inventory state {inventory.state}: {inventory.error}")
        return 1
    gpu = next((g for g in inventory.gpus if g.index == args.index), None)
    if gpu is None:
        _say(f"gpu-check: FAILED: no GPU with index {args.index}")
        return 1

    _say()
    _say(f"== quota helper on GPU {gpu.index} ({gpu.name}, {gpu.memory_mib} MiB) ==")
    device_gib = gpu.memory_mib // 1024  # what the device plugin advertises (floored)
    share = args.share_gib or max(1, device_gib // 4)
    env = {"ALIYUN_COM_GPU_MEM_CONTAINER": str(share), "ALIYUN_COM_GPU_MEM_DEV": str(device_gib)}
    try:
        quota = read_quota(env).with_nvml(gpu.memory_mib * MiB)
    except QuotaError as exc:
        _say(f"gpu-check: FAILED: {exc}")
        return 1
    _say(f"simulated device-plugin env: {env}")
    _say(json.dumps(quota.as_dict(args.margin), indent=2))
    if gpu.mig_enabled:
        _say("MIG is enabled on this GPU: allocation check NOT RUN (CUDA sees MIG instances, not the GPU)")
        return 0
    try:
        ok, lines = torch_allocation_check(env, args.margin, args.index)
    except QuotaError as exc:
        _say(f"gpu-check: FAILED: {exc}")
        return 1
    for line in lines:
        _say(line)
    _say("gpu-check: " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
