"""The GPU inventory of one node: read through NVML, published as node labels and an annotation.

Pure module: :func:`collect_inventory` takes any :class:`~gpushare.gpu.nvml.NVML` (the real
``pynvml`` backend or a stand-in), :func:`desired_node_metadata` turns an inventory into the
labels and annotation the agent wants on its Node, :func:`node_metadata_patch` computes the
merge patch (``None`` when nothing changed), and :func:`isolation_state` /
:func:`inventory_from_annotations` are the read side used by the operator and ``inspect``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gpushare import constants as c
from gpushare.gpu.nvml import NVML, MiB, MigDeviceInfo, NVMLError

State = Literal["ok", "unknown"]
Isolation = Literal["active", "absent", "unknown"]

STATE_OK: Final = "ok"
STATE_UNKNOWN: Final = "unknown"
ISOLATION_ACTIVE: Final = "active"
ISOLATION_ABSENT: Final = "absent"
ISOLATION_UNKNOWN: Final = "unknown"
ISOLATION_VALUES: Final = (ISOLATION_ACTIVE, ISOLATION_ABSENT, ISOLATION_UNKNOWN)

#: Every node label the agent writes (and the only ones it ever touches).
AGENT_LABELS: Final = (c.LABEL_GPU_COUNT, c.LABEL_GPU_PRODUCT, c.LABEL_GPU_MEMORY_MIB, c.LABEL_CGPU_ISOLATION)
#: Every node annotation the agent writes.
AGENT_ANNOTATIONS: Final = (c.ANNOTATION_INVENTORY,)

#: gpu.product value when the GPUs of a node are not all the same model.
PRODUCT_MIXED: Final = "mixed"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")


class MigDevice(_Model):
    """One MIG device of a GPU: its profile as NVIDIA names it ("1g.5gb"), its ``MIG-...`` UUID."""

    profile: str
    uuid: str
    gpu_instance_id: int = Field(ge=0)
    compute_instance_id: int = Field(ge=0)
    memory_mib: int = Field(ge=0, alias="memoryMiB")


class GPU(_Model):
    index: int
    uuid: str
    name: str
    memory_mib: int = Field(ge=0, alias="memoryMiB")
    mig_enabled: bool = False
    #: By GPU-instance then compute-instance id. Left out of the JSON when empty, so the
    #: annotation of a GPU without MIG devices is what it was before the field existed.
    mig_devices: tuple[MigDevice, ...] = ()


class Inventory(_Model):
    """What the agent knows about its node. No timestamps: same GPUs → same JSON → no write."""

    state: State = STATE_UNKNOWN
    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: tuple[GPU, ...] = ()
    cgpu_isolation: Isolation = ISOLATION_UNKNOWN

    def to_json(self) -> str:
        """Compact, key-sorted JSON: the value of the ``gpushare.io/gpu-inventory`` annotation."""
        data = self.model_dump(by_alias=True, mode="json")
        for gpu in data["gpus"]:
            if not gpu["migDevices"]:
                del gpu["migDevices"]
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @property
    def smallest_memory_mib(self) -> int | None:
        return min((g.memory_mib for g in self.gpus), default=None)


def format_cuda_version(encoded: int) -> str:
    """NVML's 12040 → "12.4"."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def collect_inventory(nvml: NVML, *, isolation: Isolation = ISOLATION_UNKNOWN) -> Inventory:
    """Read the node's GPUs through ``nvml``. Never raises for NVML failures.

    Init failure (no library, no driver) or zero GPUs → ``state=unknown`` with ``error``.
    A failure on one device (reading its MIG devices included) → ``state=unknown``, the error
    names the device and call, and the GPUs read before it are kept for diagnosis. ``shutdown``
    is always attempted after a successful ``init``.
    """
    try:
        nvml.init()
    except NVMLError as exc:
        return Inventory(state=STATE_UNKNOWN, error=f"NVML init failed: {exc}", cgpu_isolation=isolation)
    try:
        return _read(nvml, isolation)
    finally:
        with contextlib.suppress(NVMLError):
            nvml.shutdown()


def _read(nvml: NVML, isolation: Isolation) -> Inventory:
    try:
        driver = nvml.driver_version()
        cuda = format_cuda_version(nvml.cuda_driver_version())
        count = nvml.device_count()
    except NVMLError as exc:
        return Inventory(state=STATE_UNKNOWN, error=f"NVML: {exc}", cgpu_isolation=isolation)
    gpus: list[GPU] = []
    base: dict[str, Any] = {
        "driver_version": driver,
        "cuda_driver_version": cuda,
        "cgpu_isolation": isolation,
    }
    for index in range(count):
        try:
            gpus.append(_read_gpu(nvml, index))
        except NVMLError as exc:
            return Inventory(state=STATE_UNKNOWN, error=f"GPU {index}: {exc}", gpus=tuple(gpus), **base)
    if not gpus:
        return Inventory(state=STATE_UNKNOWN, error="NVML reports no GPU on this node", **base)
    return Inventory(state=STATE_OK, gpus=tuple(gpus), **base)


def _read_gpu(nvml: NVML, index: int) -> GPU:
    gpu = GPU(
        index=index,
        uuid=nvml.device_uuid(index),
        name=nvml.device_name(index),
        memory_mib=nvml.device_memory_total(index) // MiB,
        mig_enabled=nvml.device_mig_enabled(index),
    )
    if not gpu.mig_enabled:
        return gpu
    return gpu.model_copy(update={"mig_devices": _mig_devices(nvml.device_mig_devices(index))})


def mig_profile(name: str) -> str:
    """NVML's name of a MIG device → its profile: "NVIDIA A100-SXM4-40GB MIG 1g.5gb" → "1g.5gb"."""
    return name.rsplit(" ", 1)[-1]


def _mig_devices(infos: list[MigDeviceInfo]) -> tuple[MigDevice, ...]:
    devices = (
        MigDevice(
            profile=mig_profile(info.name),
            uuid=info.uuid,
            gpu_instance_id=info.gpu_instance_id,
            compute_instance_id=info.compute_instance_id,
            memory_mib=info.memory_total // MiB,
        )
        for info in infos
    )
    return tuple(sorted(devices, key=lambda d: (d.gpu_instance_id, d.compute_instance_id)))


_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def label_value(text: str) -> str:
    """A valid label value from free text: "NVIDIA H200" → "NVIDIA-H200" (≤63 chars, may be "")."""
    value = _LABEL_EDGE.sub("", _LABEL_BAD.sub("-", text.strip()))
    return _LABEL_EDGE.sub("", value[:63])


def desired_node_metadata(inventory: Inventory) -> tuple[dict[str, str | None], dict[str, str]]:
    """The agent's labels and annotation for ``inventory``.

    A label mapped to ``None`` must be absent (a merge patch deletes it): count, product and
    memory are only published when the inventory is ``ok``, so a broken driver never leaves a
    stale capacity label behind. ``gpu.product`` is the model when all GPUs are the same,
    ``mixed`` otherwise; ``gpu.memory-mib`` is the smallest GPU.
    """
    labels: dict[str, str | None] = dict.fromkeys(AGENT_LABELS)
    labels[c.LABEL_CGPU_ISOLATION] = inventory.cgpu_isolation
    if inventory.state == STATE_OK and inventory.gpus:
        names = {g.name for g in inventory.gpus}
        product = label_value(names.pop()) if len(names) == 1 else PRODUCT_MIXED
        labels[c.LABEL_GPU_COUNT] = str(len(inventory.gpus))
        labels[c.LABEL_GPU_PRODUCT] = product or None
        labels[c.LABEL_GPU_MEMORY_MIB] = str(inventory.smallest_memory_mib)
    return labels, {c.ANNOTATION_INVENTORY: inventory.to_json()}


def node_metadata_patch(
    current_labels: Mapping[str, str] | None,
    current_annotations: Mapping[str, str] | None,
    labels: Mapping[str, str | None],
    annotations: Mapping[str, str | None],
) -> dict[str, Any] | None:
    """A JSON merge patch with only the keys that differ, or ``None`` when nothing changed."""
    cur_l = current_labels or {}
    cur_a = current_annotations or {}
    meta: dict[str, Any] = {}
    changed_l = {k: v for k, v in labels.items() if cur_l.get(k) != v}
    changed_a = {k: v for k, v in annotations.items() if cur_a.get(k) != v}
    if changed_l:
        meta["labels"] = changed_l
    if changed_a:
        meta["annotations"] = changed_a
    return {"metadata": meta} if meta else None


def inventory_from_annotations(annotations: Mapping[str, str] | None) -> Inventory | None:
    """The inventory an agent published on a node, or ``None`` (no agent, or unreadable JSON)."""
    raw = (annotations or {}).get(c.ANNOTATION_INVENTORY)
    if not raw:
        return None
    try:
        return Inventory.model_validate_json(raw)
    except ValidationError:
        return None


def isolation_state(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None = None) -> str:
    """``active`` | ``absent`` | ``unknown``: whether cGPU isolation is active, as the agent saw it.

    The label wins; the annotation is the fallback; no agent data (or a value we do not know)
    is ``unknown``. The operator turns ``absent`` on a node of a pool that demands memory
    isolation into Degraded / ``IsolationUnavailable``.
    """
    value = (labels or {}).get(c.LABEL_CGPU_ISOLATION)
    if value in ISOLATION_VALUES:
        return value
    inventory = inventory_from_annotations(annotations)
    if inventory is not None:
        return inventory.cgpu_isolation
    return ISOLATION_UNKNOWN


def gpu_memory_mib(annotations: Mapping[str, str] | None) -> list[int] | None:
    """Per-GPU memory (MiB, by index) from a healthy agent inventory, else ``None`` (use allocatable)."""
    inventory = inventory_from_annotations(annotations)
    if inventory is None or inventory.state != STATE_OK or not inventory.gpus:
        return None
    return [g.memory_mib for g in sorted(inventory.gpus, key=lambda g: g.index)]
