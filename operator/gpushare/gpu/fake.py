"""An in-memory :class:`~gpushare.gpu.nvml.NVML` stand-in, for tests and the local demo only.

Production code never selects it: the agent CLI always uses
:class:`~gpushare.gpu.nvml.PynvmlBackend`; tests and the demo call the agent's
``run_cycle`` / ``run_agent`` with a ``FakeNVML`` explicitly. Left out of the wheel
(pyproject.toml): only the editable install of ``make setup`` has it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpushare.gpu.nvml import KIND_LIBRARY_NOT_FOUND, MiB, MigDeviceInfo, NVMLError


@dataclass(frozen=True)
class FakeMigDevice:
    """A MIG device; NVML names it "<GPU name> MIG <profile>"."""

    profile: str = "1g.5gb"
    gpu_instance_id: int = 1
    compute_instance_id: int = 0
    memory_mib: int = 4864
    #: "" = a UUID made from the GPU's index and the instance ids.
    uuid: str = ""


@dataclass
class FakeGPU:
    name: str = "NVIDIA H200"
    memory_mib: int = 143771
    uuid: str = ""
    #: None = the GPU does not support MIG (NVML raises NotSupported).
    mig: bool | None = None
    #: What NVML enumerates while ``mig`` is True (none while MIG mode is off).
    mig_devices: tuple[FakeMigDevice, ...] = ()


@dataclass
class FakeNVML:
    gpus: list[FakeGPU] = field(default_factory=list)
    driver: str = "550.54.15"
    cuda: int = 12040
    #: raised by init() when set (e.g. library not found).
    init_error: NVMLError | None = None
    #: (index, method name) → error raised by that per-device call.
    device_errors: dict[tuple[int, str], NVMLError] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    initialised: bool = False

    @classmethod
    def missing_library(cls) -> FakeNVML:
        return cls(init_error=NVMLError("NVML Shared Library Not Found", kind=KIND_LIBRARY_NOT_FOUND))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FakeNVML:
        """``{"driver": ..., "cuda": 12040, "gpus": [{"name", "memoryMiB", "uuid", "mig", "migDevices"}]}``,
        each of ``migDevices`` ``{"profile", "gpuInstanceId", "computeInstanceId", "memoryMiB", "uuid"}``."""
        gpus = [
            FakeGPU(
                name=str(g.get("name", "NVIDIA H200")),
                memory_mib=int(g.get("memoryMiB", 143771)),
                uuid=str(g.get("uuid", "")),
                mig=g.get("mig"),
                mig_devices=tuple(
                    FakeMigDevice(
                        profile=str(m.get("profile", "1g.5gb")),
                        gpu_instance_id=int(m.get("gpuInstanceId", 1)),
                        compute_instance_id=int(m.get("computeInstanceId", 0)),
                        memory_mib=int(m.get("memoryMiB", 4864)),
                        uuid=str(m.get("uuid", "")),
                    )
                    for m in g.get("migDevices", [])
                ),
            )
            for g in data.get("gpus", [])
        ]
        return cls(gpus=gpus, driver=str(data.get("driver", "550.54.15")), cuda=int(data.get("cuda", 12040)))

    def _device(self, index: int, method: str) -> FakeGPU:
        self.calls.append(f"{method}({index})")
        if not self.initialised:
            raise NVMLError("Uninitialized", kind="uninitialized", call=method)
        error = self.device_errors.get((index, method))
        if error is not None:
            raise error
        if not 0 <= index < len(self.gpus):
            raise NVMLError("Invalid Argument", kind="invalid-argument", call=method)
        return self.gpus[index]

    def init(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise self.init_error
        self.initialised = True

    def shutdown(self) -> None:
        self.calls.append("shutdown")
        self.initialised = False

    def driver_version(self) -> str:
        self.calls.append("driver_version")
        return self.driver

    def cuda_driver_version(self) -> int:
        self.calls.append("cuda_driver_version")
        return self.cuda

    def device_count(self) -> int:
        self.calls.append("device_count")
        return len(self.gpus)

    def device_uuid(self, index: int) -> str:
        gpu = self._device(index, "device_uuid")
        return gpu.uuid or f"GPU-00000000-0000-0000-0000-{index:012d}"

    def device_name(self, index: int) -> str:
        return self._device(index, "device_name").name

    def device_memory_total(self, index: int) -> int:
        return self._device(index, "device_memory_total").memory_mib * MiB

    def device_mig_enabled(self, index: int) -> bool:
        gpu = self._device(index, "device_mig_enabled")
        if gpu.mig is None:
            return False  # what PynvmlBackend returns for NVMLError_NotSupported
        return gpu.mig

    def device_mig_devices(self, index: int) -> list[MigDeviceInfo]:
        gpu = self._device(index, "device_mig_devices")
        if not gpu.mig:
            return []  # NVML finds no MIG device handle while MIG mode is off
        return [
            MigDeviceInfo(
                name=f"{gpu.name} MIG {m.profile}",
                uuid=m.uuid
                or f"MIG-{index:08d}-0000-0000-{m.gpu_instance_id:04d}-{m.compute_instance_id:012d}",
                gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=m.compute_instance_id,
                memory_total=m.memory_mib * MiB,
            )
            for m in gpu.mig_devices
        ]
