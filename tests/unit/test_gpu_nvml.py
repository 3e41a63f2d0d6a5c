"""PynvmlBackend: pynvml's return types and exceptions become str/int/bool and NVMLError.

The bindings are the real ``pynvml`` exception classes; only the C calls are replaced
(there is no NVIDIA driver on the test machines; ``make gpu-check`` covers the real one).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpushare.gpu.inventory import collect_inventory
from gpushare.gpu.nvml import (
    KIND_DRIVER_NOT_LOADED,
    KIND_LIBRARY_NOT_FOUND,
    NVMLError,
    PynvmlBackend,
)


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _raise(exc: BaseException) -> Any:
    def fn(*_: Any) -> Any:
        raise exc

    return fn


def _bindings(**overrides: Any) -> SimpleNamespace:
    memory = SimpleNamespace(total=16 * 1024**3 + 160 * 1024**2, free=0, used=0)
    ns = SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        NVML_DEVICE_MIG_ENABLE=pynvml.NVML_DEVICE_MIG_ENABLE,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: b"535.161.08",  # old pynvml returned bytes
        nvmlSystemGetCudaDriverVersion=lambda: 12020,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetUUID=lambda h: f"GPU-{h[1]}",
        nvmlDeviceGetName=lambda h: b"Tesla V100-SXM2-16GB" if h[1] == 0 else "Tesla V100-SXM2-16GB",
        nvmlDeviceGetMemoryInfo=lambda h: memory,
        nvmlDeviceGetMigMode=_raise(_err(pynvml.NVML_ERROR_NOT_SUPPORTED)),
    )
    for key, value in overrides.items():
        setattr(ns, key, value)
    return ns


def _backend(**overrides: Any) -> PynvmlBackend:
    backend = PynvmlBackend()
    backend._nvml = _bindings(**overrides)
    return backend


def test_bytes_and_str_results_and_mig_not_supported() -> None:
    inv = collect_inventory(_backend())
    assert inv.state == "ok", inv.error
    assert inv.driver_version == "535.161.08"
    assert inv.cuda_driver_version == "12.2"
    assert [g.name for g in inv.gpus] == ["Tesla V100-SXM2-16GB"] * 2
    assert [g.memory_mib for g in inv.gpus] == [16544, 16544]
    assert [g.mig_enabled for g in inv.gpus] == [False, False]


def test_mig_mode_enabled() -> None:
    backend = _backend(nvmlDeviceGetMigMode=lambda h: [pynvml.NVML_DEVICE_MIG_ENABLE, 0])
    assert backend.device_mig_enabled(0) is True
    backend = _backend(nvmlDeviceGetMigMode=lambda h: [pynvml.NVML_DEVICE_MIG_DISABLE, 1])
    assert backend.device_mig_enabled(0) is False


def test_mig_mode_other_error_propagates() -> None:
    backend = _backend(nvmlDeviceGetMigMode=_raise(_err(pynvml.NVML_ERROR_GPU_IS_LOST)))
    with pytest.raises(NVMLError) as info:
        backend.device_mig_enabled(0)
    assert info.value.call == "nvmlDeviceGetMigMode"


def _mig_bindings() -> dict[str, Any]:
    """GPU 0 in MIG mode with MIG devices in slots 0 and 2 of 7 (the others empty: NotFound)."""
    gib = 1024**3

    def mig_handle(h: Any, slot: int) -> Any:
        if slot not in (0, 2):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", h[1], slot)

    def name(h: Any) -> Any:
        if h[0] == "mig":
            return b"NVIDIA A100-SXM4-40GB MIG 3g.20gb" if h[2] == 0 else "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
        return "NVIDIA A100-SXM4-40GB"

    return {
        "nvmlDeviceGetMigMode": lambda h: [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE],
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
        "nvmlDeviceGetName": name,
        "nvmlDeviceGetUUID": lambda h: f"MIG-{h[1]}-{h[2]}" if h[0] == "mig" else f"GPU-{h[1]}",
        "nvmlDeviceGetGpuInstanceId": lambda h: {0: 2, 2: 9}[h[2]],
        "nvmlDeviceGetComputeInstanceId": lambda h: 0,
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(
            total=(20 if h[2] == 0 else 5) * gib if h[0] == "mig" else 40 * gib
        ),
    }


def test_mig_devices_skip_empty_slots() -> None:
    inv = collect_inventory(_backend(**_mig_bindings()))
    assert inv.state == "ok", inv.error
    for gpu in inv.gpus:
        assert gpu.mig_enabled and gpu.memory_mib == 40960
        assert [
            (d.profile, d.uuid, d.gpu_instance_id, d.compute_instance_id, d.memory_mib)
            for d in gpu.mig_devices
        ] == [
            ("3g.20gb", f"MIG-{gpu.index}-0", 2, 0, 20480),
            ("1g.5gb", f"MIG-{gpu.index}-2", 9, 0, 5120),
        ]


def test_a_mig_read_error_other_than_not_found_is_the_gpus_error() -> None:
    bindings = {**_mig_bindings(), "nvmlDeviceGetGpuInstanceId": _raise(_err(pynvml.NVML_ERROR_GPU_IS_LOST))}
    backend = _backend(**bindings)
    with pytest.raises(NVMLError) as info:
        backend.device_mig_devices(0)
    assert info.value.call == "nvmlDeviceGetGpuInstanceId"
    inv = collect_inventory(backend)
    assert inv.state == "unknown"
    assert inv.error is not None and inv.error.startswith("GPU 0: nvmlDeviceGetGpuInstanceId: ")


@pytest.mark.parametrize(
    ("code", "kind", "text"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, KIND_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, KIND_DRIVER_NOT_LOADED, "kernel driver is not loaded"),
    ],
)
def test_init_errors_translated(code: int, kind: str, text: str) -> None:
    backend = _backend(nvmlInit=_raise(_err(code)))
    with pytest.raises(NVMLError) as info:
        backend.init()
    assert info.value.kind == kind
    assert text in str(info.value)
    inv = collect_inventory(backend)
    assert inv.state == "unknown"
    assert inv.error is not None
    assert text in inv.error


def test_real_pynvml_without_driver_is_a_clear_error_or_a_real_inventory() -> None:
    """Against the real library: on a machine without NVIDIA driver this must be 'unknown'."""
    inv = collect_inventory(PynvmlBackend())
    if inv.state == "ok":  # a GPU machine: the real inventory is well formed
        assert inv.gpus
        assert all(g.memory_mib > 0 for g in inv.gpus)
    else:
        assert inv.error is not None
        assert inv.error.startswith(("NVML init failed", "NVML", "GPU "))
