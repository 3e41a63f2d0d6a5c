"""`make gpu-check` logic (python -m gpushare.gpu.check) with stand-ins for NVML and PyTorch."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from gpushare.gpu import check
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.gpu.nvml import MiB, NVMLError


class _OOM(RuntimeError):
    pass


def _fake_torch(total: int, *, enforce: bool = True) -> ModuleType:
    """A tiny PyTorch: the caching allocator refuses allocations beyond fraction * total."""
    torch = ModuleType("torch")
    limit: dict[str, float] = {"fraction": 1.0}

    def set_fraction(fraction: float, device: int) -> None:
        limit["fraction"] = fraction

    def empty(n: int, dtype: Any = None, device: str = "") -> object:
        if enforce and n > limit["fraction"] * total:
            raise _OOM(f"CUDA out of memory. Tried to allocate {n // MiB} MiB")
        return object()

    torch.__version__ = "2.9.0"  # type: ignore[attr-defined]
    torch.uint8 = "uint8"  # type: ignore[attr-defined]
    torch.empty = empty  # type: ignore[attr-defined]
    torch.cuda = SimpleNamespace(  # type: ignore[attr-defined]
        OutOfMemoryError=_OOM,
        is_available=lambda: True,
        set_device=lambda i: None,
        get_device_properties=lambda i: SimpleNamespace(total_memory=total),
        set_per_process_memory_fraction=set_fraction,
        empty_cache=lambda: None,
    )
    return torch


H100 = FakeGPU(name="NVIDIA H100 80GB HBM3", memory_mib=81559)


def test_no_driver_exits_2_with_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.run([], nvml=FakeNVML.missing_library()) == 2
    assert "no NVIDIA driver/NVML found" in capsys.readouterr().out


def test_other_nvml_init_error_fails(capsys: pytest.CaptureFixture[str]) -> None:
    nvml = FakeNVML(init_error=NVMLError("Insufficient Permissions", kind="no-permission", call="nvmlInit"))
    assert check.run([], nvml=nvml) == 1
    assert "FAILED: NVML error: nvmlInit: Insufficient Permissions" in capsys.readouterr().out


def test_inventory_and_quota_without_torch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert check.run([], nvml=FakeNVML(gpus=[H100, H100])) == 0
    out = capsys.readouterr().out
    assert "gpushare.io/gpu.count=2" in out
    assert "gpushare.io/gpu.product=NVIDIA-H100-80GB-HBM3" in out
    assert "'ALIYUN_COM_GPU_MEM_CONTAINER': '19', 'ALIYUN_COM_GPU_MEM_DEV': '79'" in out
    assert "allocation check NOT RUN" in out


def test_torch_enforcing_fraction_passes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(81559 * MiB))
    assert check.run(["--share-gib", "10"], nvml=FakeNVML(gpus=[H100])) == 0
    out = capsys.readouterr().out
    assert "(half the share): ok" in out
    assert "refused as expected" in out
    assert out.rstrip().endswith("gpu-check: passed")


def test_torch_not_enforcing_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(81559 * MiB, enforce=False))
    assert check.run([], nvml=FakeNVML(gpus=[H100])) == 1
    assert "FAILED, it was allowed" in capsys.readouterr().out


def test_broken_inventory_fails(capsys: pytest.CaptureFixture[str]) -> None:
    nvml = FakeNVML(gpus=[H100], device_errors={(0, "device_uuid"): NVMLError("Unknown Error", call="x")})
    assert check.run([], nvml=nvml) == 1
    assert "FAILED: inventory state unknown" in capsys.readouterr().out


def test_real_module_entry_point() -> None:
    """`python -m gpushare.gpu.check` here: a clear 'no NVIDIA driver' exit 2, or a real pass/fail."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpushare.gpu.check"], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode == 2:
        assert "gpu-check: no NVIDIA driver/NVML found" in proc.stdout
    else:
        assert "== agent inventory (real NVML) ==" in proc.stdout
