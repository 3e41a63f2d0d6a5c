"""How much GPU memory may this container use? (pools without cGPU memory isolation)

In a ``share`` pool, or a ``cgpu`` pool with ``cgpu.disable.isolation=true``, every container
sees the whole GPU and must limit itself. The gpushare device plugin tells it its share
through environment variables (ack-gpu-sharing.md §3):

=============================== ================================================
``ALIYUN_COM_GPU_MEM_CONTAINER`` this container's ``aliyun.com/gpu-mem`` (required)
``ALIYUN_COM_GPU_MEM_DEV``       memory of one GPU, floored to whole units (required)
``ALIYUN_COM_GPU_MEM_POD``       the pod's total gpu-mem (optional)
``ALIYUN_COM_GPU_MEM_IDX``       host GPU index; ``-1`` when allocation failed (optional)
``CGPU_DISABLE``                 ``true`` when the node's isolation is disabled (optional)
``NVIDIA_VISIBLE_DEVICES``       ``no-gpu-has-<N><unit>-to-run`` when allocation failed
=============================== ================================================

The unit is GiB unless the plugin runs with ``--memory-unit=MiB`` (the pool's
``spec.devicePlugin.memoryUnit``; pass it as ``GPUSHARE_MEMORY_UNIT`` or ``--unit``). Without
either, a ``ALIYUN_COM_GPU_MEM_DEV`` of 1024 or more is taken as MiB (no GPU has 1 TiB).
Pure core: :func:`read_quota` validates and returns a :class:`Quota`; :func:`apply_torch`
and :func:`apply_tensorflow` import their framework lazily and do nothing when it is absent.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from gpushare.api.quantity import integer_or_none

Unit = Literal["GiB", "MiB"]
UNIT_BYTES: Final[dict[str, int]] = {"GiB": 1024**3, "MiB": 1024**2}
MiB: Final = 1024**2

ENV_CONTAINER: Final = "ALIYUN_COM_GPU_MEM_CONTAINER"
ENV_DEV: Final = "ALIYUN_COM_GPU_MEM_DEV"
ENV_POD: Final = "ALIYUN_COM_GPU_MEM_POD"
ENV_IDX: Final = "ALIYUN_COM_GPU_MEM_IDX"
ENV_CGPU_DISABLE: Final = "CGPU_DISABLE"
ENV_VISIBLE: Final = "NVIDIA_VISIBLE_DEVICES"
#: Our own knob: the plugin's --memory-unit.
ENV_UNIT: Final = "GPUSHARE_MEMORY_UNIT"
#: Our own knob: the safety margin (fraction of the share kept free), default DEFAULT_MARGIN.
ENV_MARGIN: Final = "GPUSHARE_MEMORY_MARGIN"

#: Keep 5 % of the share free by default (allocator fragmentation, CUDA context not counted
#: by the frameworks). ACK's user guide uses 0.7 for TensorFlow's old fraction option,
#: i.e. a margin of 0.3; with an explicit memory_limit that much is not needed.
DEFAULT_MARGIN: Final = 0.05
ALLOCATION_FAILED_PREFIX: Final = "no-gpu-has-"


class QuotaError(ValueError):
    """The environment does not describe a usable share (message names the variable and value)."""


@dataclass(frozen=True)
class Quota:
    unit: Unit
    #: this container's share, in ``unit``
    container: int
    #: one GPU as the device plugin reports it (floored), in ``unit``
    device: int
    pod: int | None = None
    #: host GPU index; inside the container the GPU is CUDA device 0
    index: int | None = None
    #: CGPU_DISABLE=true: the node runs without memory isolation
    cgpu_disabled: bool = False
    #: the real device memory from NVML (bytes), when cross-checked
    nvml_device_bytes: int | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def container_bytes(self) -> int:
        return self.container * UNIT_BYTES[self.unit]

    @property
    def device_bytes(self) -> int:
        return self.device * UNIT_BYTES[self.unit]

    @property
    def fraction(self) -> float:
        """container / device as the plugin reports them, in (0, 1]."""
        return self.container / self.device

    @property
    def real_device_bytes(self) -> int:
        """NVML's device memory when known, else the plugin's (floored) value."""
        return self.nvml_device_bytes or self.device_bytes

    @property
    def effective_fraction(self) -> float:
        """The share as a fraction of the real device (what frameworks multiply their total by)."""
        return min(1.0, self.container_bytes / self.real_device_bytes)

    def fraction_with_margin(self, margin: float = DEFAULT_MARGIN) -> float:
        """The fraction a framework multiplies the real device by, never above the share in bytes.

        A 6-decimal fraction such as 0.51248 (3203 of 6250) is not exact in binary floating point,
        and times the device size it can exceed the share by a byte: step down until it does not.
        """
        safe = floor6(self.effective_fraction * (1.0 - check_margin(margin)))
        while safe > 0.0 and safe * self.real_device_bytes > self.container_bytes:
            safe = max(0.0, round(safe - 0.000001, 6))
        return safe

    def memory_limit_mib(self, margin: float = DEFAULT_MARGIN) -> int:
        """The share minus the margin, in whole MiB (TensorFlow's ``memory_limit``)."""
        return math.floor(self.container_bytes * (1.0 - check_margin(margin)) / MiB)

    @property
    def isolated(self) -> str:
        """``false`` when CGPU_DISABLE=true, else ``unknown`` (the env cannot prove isolation)."""
        return "false" if self.cgpu_disabled else "unknown"

    def with_nvml(self, device_bytes: int) -> Quota:
        """Cross-check with NVML's real device memory; mismatches become warnings."""
        warnings = list(self.warnings)
        if device_bytes <= 0:
            raise QuotaError(f"NVML reports {device_bytes} bytes of device memory")
        floored = device_bytes // UNIT_BYTES[self.unit]
        if floored != self.device:
            warnings.append(
                f"{ENV_DEV}={self.device} {self.unit} but NVML reports {device_bytes // MiB} MiB "
                f"({floored} {self.unit} floored): the device plugin assumes every GPU equals the first one, "
                "so this GPU is mis-reported; the fraction uses NVML's value"
            )
        if self.container_bytes > device_bytes:
            warnings.append(
                f"{ENV_CONTAINER}={self.container} {self.unit} is more than the real GPU "
                f"({device_bytes // MiB} MiB): the share cannot be honoured"
            )
        return replace(self, nvml_device_bytes=device_bytes, warnings=tuple(warnings))

    def as_dict(self, margin: float = DEFAULT_MARGIN) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "container": self.container,
            "device": self.device,
            "pod": self.pod,
            "index": self.index,
            "cgpuDisabled": self.cgpu_disabled,
            "isolated": self.isolated,
            "containerBytes": self.container_bytes,
            "deviceBytes": self.device_bytes,
            "nvmlDeviceBytes": self.nvml_device_bytes,
            "fraction": floor6(self.fraction),
            "effectiveFraction": floor6(self.effective_fraction),
            "margin": margin,
            "fractionWithMargin": self.fraction_with_margin(margin),
            "memoryLimitMiB": self.memory_limit_mib(margin),
            "warnings": list(self.warnings),
        }


def floor6(x: float) -> float:
    """Round down to 6 decimals: a printed fraction never exceeds the share."""
    return math.floor(x * 1_000_000) / 1_000_000


def check_margin(margin: float) -> float:
    if not (isinstance(margin, int | float) and 0.0 <= margin < 1.0) or math.isnan(margin):
        raise QuotaError(f"safety margin must be in [0, 1), got {margin!r}")
    return float(margin)


def parse_unit(text: str | None) -> Unit:
    value = (text or "GiB").strip()
    for unit in UNIT_BYTES:
        if value.lower() == unit.lower():
            return "GiB" if unit == "GiB" else "MiB"
    raise QuotaError(f"memory unit must be GiB or MiB (the device plugin's --memory-unit), got {text!r}")


def parse_margin(text: str | None) -> float:
    if text is None or not text.strip():
        return DEFAULT_MARGIN
    try:
        value = float(text)
    except ValueError:
        raise QuotaError(f"safety margin {text!r} is not a number") from None
    return check_margin(value)


def _int(environ: Mapping[str, str], name: str, *, required: bool) -> int | None:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        if required:
            raise QuotaError(
                f"{name} is not set: this container requested no aliyun.com/gpu-mem, "
                "or it was not started through the gpushare device plugin"
            )
        return None
    value = integer_or_none(raw)
    if value is None:
        raise QuotaError(f"{name}={raw!r} is not a whole number")
    return value


def _positive(name: str, value: int | None) -> int:
    if value is None or value <= 0:
        raise QuotaError(f"{name}={value} must be a positive number of memory units")
    return value


#: A GPU memory of this many units or more cannot be GiB (no GPU has 1 TiB): the plugin counts MiB.
MIB_EVIDENCE = 1024


def read_quota(environ: Mapping[str, str], unit: str | None = None) -> Quota:
    """Validate the device plugin's variables. ``unit`` beats ``GPUSHARE_MEMORY_UNIT`` (set it to the
    pool's ``spec.devicePlugin.memoryUnit``); without either, GiB unless ``ALIYUN_COM_GPU_MEM_DEV``
    is 1024 or more, which only a MiB-counting device plugin reports."""
    given = unit if unit is not None else environ.get(ENV_UNIT)
    if given is None or not given.strip():
        dev = integer_or_none(environ.get(ENV_DEV))
        given = "MiB" if dev is not None and dev >= MIB_EVIDENCE else "GiB"
    the_unit = parse_unit(given)
    visible = environ.get(ENV_VISIBLE, "")
    if visible.startswith(ALLOCATION_FAILED_PREFIX):
        raise QuotaError(
            f"{ENV_VISIBLE}={visible!r}: the device plugin could not allocate GPU memory for this container"
        )
    index = _int(environ, ENV_IDX, required=False)
    if index is not None and index < 0:
        raise QuotaError(
            f"{ENV_IDX}={index}: the device plugin could not allocate a GPU for this pod"
            if index == -1
            else f"{ENV_IDX}={index} is not a GPU index"
        )
    container = _positive(ENV_CONTAINER, _int(environ, ENV_CONTAINER, required=True))
    device = _positive(ENV_DEV, _int(environ, ENV_DEV, required=True))
    if container > device:
        raise QuotaError(
            f"{ENV_CONTAINER}={container} is larger than {ENV_DEV}={device} (one GPU, in {the_unit}): "
            "a container's share must fit on one GPU"
        )
    pod = _int(environ, ENV_POD, required=False)
    if pod is not None and pod < container:
        raise QuotaError(f"{ENV_POD}={pod} is smaller than {ENV_CONTAINER}={container}")
    raw_disable = environ.get(ENV_CGPU_DISABLE, "").strip().lower()
    if raw_disable not in ("", "true", "false"):
        raise QuotaError(f"{ENV_CGPU_DISABLE}={environ[ENV_CGPU_DISABLE]!r} must be true or false")
    return Quota(
        unit=the_unit,
        container=container,
        device=device,
        pod=pod,
        index=index,
        cgpu_disabled=raw_disable == "true",
    )


# --- frameworks (optional; never dependencies) -------------------------------------------


def _optional(name: str) -> Any:
    """The module, or None when it is not installed (ImportError of the module itself only)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


def apply_torch(quota: Quota, margin: float = DEFAULT_MARGIN, device: int = 0) -> float | None:
    """``torch.cuda.set_per_process_memory_fraction`` for this container's share.

    The fraction is relative to the device's real total memory as PyTorch sees it, so the
    plugin's GiB flooring does not inflate it. ``device`` is the CUDA index inside the
    container (0: the plugin exposes only the allocated GPU). Returns the fraction applied,
    or ``None`` when PyTorch is not installed.
    """
    check_margin(margin)
    torch = _optional("torch")
    if torch is None:
        return None
    if not torch.cuda.is_available():
        raise QuotaError("PyTorch is installed but sees no CUDA device")
    total = int(torch.cuda.get_device_properties(device).total_memory)
    fraction = quota.with_nvml(total).fraction_with_margin(margin)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


@dataclass(frozen=True)
class TensorFlowSettings:
    """What to pass to TensorFlow::

    tf.config.set_logical_device_configuration(
        gpus[device], [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mib)])
    """

    memory_limit_mib: int
    device: int = 0


def tensorflow_settings(quota: Quota, margin: float = DEFAULT_MARGIN, device: int = 0) -> TensorFlowSettings:
    return TensorFlowSettings(memory_limit_mib=quota.memory_limit_mib(margin), device=device)


def apply_tensorflow(quota: Quota, margin: float = DEFAULT_MARGIN, device: int = 0) -> int | None:
    """Limit TensorFlow's GPU ``device`` to the share; call before TensorFlow touches the GPU.

    Returns the memory limit in MiB, or ``None`` when TensorFlow is not installed.
    """
    settings = tensorflow_settings(quota, margin, device)
    tf = _optional("tensorflow")
    if tf is None:
        return None
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) <= device:
        raise QuotaError(f"TensorFlow sees {len(gpus)} GPU(s); cannot configure GPU {device}")
    tf.config.set_logical_device_configuration(
        gpus[device], [tf.config.LogicalDeviceConfiguration(memory_limit=settings.memory_limit_mib)]
    )
    return settings.memory_limit_mib
