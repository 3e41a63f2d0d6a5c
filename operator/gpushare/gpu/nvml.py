"""The NVML surface the agent needs, behind a Protocol, and its real ``pynvml`` implementation.

Everything above this module (``collect_inventory``, the agent, ``gpushare quota --nvml``,
``make gpu-check``) talks to an :class:`NVML` object and only ever sees :class:`NVMLError`,
never a ``pynvml`` exception, so tests inject a stand-in (``gpushare.gpu.fake.FakeNVML``)
and no code path outside this file imports ``pynvml``.

The calls are blocking C calls: async callers wrap them in ``asyncio.to_thread``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

MiB = 1024 * 1024


class NVMLError(Exception):
    """An NVML call failed. ``kind`` is a stable short name, ``call`` the NVML function."""

    def __init__(self, message: str, *, kind: str = "error", call: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.call = call

    def __str__(self) -> str:
        message = super().__str__()
        return f"{self.call}: {message}" if self.call else message


#: kind of the error raised when ``libnvidia-ml.so.1`` cannot be loaded.
KIND_LIBRARY_NOT_FOUND = "library-not-found"
#: the kernel driver is not loaded (library present, no ``nvidia`` module).
KIND_DRIVER_NOT_LOADED = "driver-not-loaded"
#: the call is not supported on this GPU (e.g. MIG mode on a non-MIG GPU).
KIND_NOT_SUPPORTED = "not-supported"
#: the driver is too old to know the function.
KIND_FUNCTION_NOT_FOUND = "function-not-found"
#: the pynvml package itself is not importable.
KIND_NO_BINDINGS = "no-bindings"
#: nothing at that index (e.g. an empty MIG device slot).
KIND_NOT_FOUND = "not-found"


@dataclass(frozen=True)
class MigDeviceInfo:
    """One MIG device of a GPU, as NVML reports it on the MIG device's handle."""

    #: ``nvmlDeviceGetName``: "NVIDIA A100-SXM4-40GB MIG 1g.5gb" (the profile is the last word).
    name: str
    #: ``nvmlDeviceGetUUID``: "MIG-...".
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    #: ``nvmlDeviceGetMemoryInfo(...).total`` in bytes.
    memory_total: int


@runtime_checkable
class NVML(Protocol):
    """What the agent reads from NVML. Every method may raise :class:`NVMLError`."""

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def driver_version(self) -> str: ...

    def cuda_driver_version(self) -> int:
        """CUDA driver API version as NVML encodes it: 1000 * major + 10 * minor (12040 = 12.4)."""
        ...

    def device_count(self) -> int: ...

    def device_uuid(self, index: int) -> str: ...

    def device_name(self, index: int) -> str: ...

    def device_memory_total(self, index: int) -> int:
        """Total memory of the GPU in bytes."""
        ...

    def device_mig_enabled(self, index: int) -> bool:
        """Current MIG mode; False on GPUs that do not support MIG."""
        ...

    def device_mig_devices(self, index: int) -> list[MigDeviceInfo]:
        """The MIG devices of a GPU in MIG mode (empty when it has none)."""
        ...


def _text(value: Any) -> str:
    """pynvml returns ``str`` in current releases and ``bytes`` in old ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


_KINDS = {
    "NVMLError_LibraryNotFound": KIND_LIBRARY_NOT_FOUND,
    "NVMLError_DriverNotLoaded": KIND_DRIVER_NOT_LOADED,
    "NVMLError_NotSupported": KIND_NOT_SUPPORTED,
    "NVMLError_FunctionNotFound": KIND_FUNCTION_NOT_FOUND,
    "NVMLError_NotFound": KIND_NOT_FOUND,
}

_HINTS = {
    KIND_LIBRARY_NOT_FOUND: (
        "libnvidia-ml.so.1 not found: no NVIDIA driver on this node, or the container was not started "
        "by the NVIDIA container runtime (NVIDIA_VISIBLE_DEVICES / driver capabilities)"
    ),
    KIND_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
}


class PynvmlBackend:
    """:class:`NVML` on top of ``pynvml`` (package nvidia-ml-py). Handles are looked up per call."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
                raise NVMLError(f"pynvml is not importable: {exc}", kind=KIND_NO_BINDINGS) from None
            self._nvml = pynvml
        return self._nvml

    def _call(self, name: str, *args: Any) -> Any:
        nvml = self._module()
        try:
            return getattr(nvml, name)(*args)
        except nvml.NVMLError as exc:
            kind = _KINDS.get(type(exc).__name__, "error")
            message = _HINTS.get(kind) or _text(str(exc))
            raise NVMLError(message, kind=kind, call=name) from None

    def _handle(self, index: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def init(self) -> None:
        self._call("nvmlInit")

    def shutdown(self) -> None:
        self._call("nvmlShutdown")

    def driver_version(self) -> str:
        return _text(self._call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> int:
        return int(self._call("nvmlSystemGetCudaDriverVersion"))

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def device_uuid(self, index: int) -> str:
        return _text(self._call("nvmlDeviceGetUUID", self._handle(index)))

    def device_name(self, index: int) -> str:
        return _text(self._call("nvmlDeviceGetName", self._handle(index)))

    def device_memory_total(self, index: int) -> int:
        return int(self._call("nvmlDeviceGetMemoryInfo", self._handle(index)).total)

    def device_mig_enabled(self, index: int) -> bool:
        handle = self._handle(index)
        try:
            current, _pending = self._call("nvmlDeviceGetMigMode", handle)
        except NVMLError as exc:
            if exc.kind in (KIND_NOT_SUPPORTED, KIND_FUNCTION_NOT_FOUND):
                return False
            raise
        return int(current) == int(self._module().NVML_DEVICE_MIG_ENABLE)

    def device_mig_devices(self, index: int) -> list[MigDeviceInfo]:
        handle = self._handle(index)
        devices: list[MigDeviceInfo] = []
        for slot in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            except NVMLError as exc:
                if exc.kind == KIND_NOT_FOUND:  # an empty slot
                    continue
                raise
            devices.append(
                MigDeviceInfo(
                    name=_text(self._call("nvmlDeviceGetName", mig)),
                    uuid=_text(self._call("nvmlDeviceGetUUID", mig)),
                    gpu_instance_id=int(self._call("nvmlDeviceGetGpuInstanceId", mig)),
                    compute_instance_id=int(self._call("nvmlDeviceGetComputeInstanceId", mig)),
                    memory_total=int(self._call("nvmlDeviceGetMemoryInfo", mig).total),
                )
            )
        return devices
