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

from gpushare.gpu.nvml import KIND_LIBRARY_NOT_FOUND, MiB, NVMLError


@dataclass
class FakeGPU:
    name: str = "NVIDIA H200"
    memory_mib: int = 143771
    uuid: str = ""
    #: None = the GPU does not support MIG (NVML raises NotSupported).
    mig: bool | None = None


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
        """``{"driver": ..., "cuda": 12040, "gpus": [{"name", "memoryMiB", "uuid", "mig"}]}``."""
        gpus = [
            FakeGPU(
                name=str(g.get("name", "NVIDIA H200")),
                memory_mib=int(g.get("memoryMiB", 143771)),
                uuid=str(g.get("uuid", "")),
                mig=g.get("mig"),
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
