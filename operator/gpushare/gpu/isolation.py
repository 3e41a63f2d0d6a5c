"""Is Alibaba cGPU memory isolation active on this node? (``active`` | ``absent`` | ``unknown``)

cGPU isolation is a closed-source kernel module, ``cgpu_km`` (installed by ACK's
``ack-ai-installer`` / the cGPU installer). When it is loaded:

* ``/proc/modules`` lists a module named ``cgpu_km`` (``lsmod | grep cgpu``), and
* it creates the procfs directory ``/proc/cgpu_km`` (per-GPU policy files, ``version``).

The check, in order:

1. ``/proc/cgpu_km`` exists → ``active``;
2. ``/proc/modules`` is readable and has a line whose first field is ``cgpu_km`` → ``active``;
3. ``/proc/modules`` is readable and has no such line → ``absent``;
4. ``/proc/modules`` cannot be read → ``unknown`` (with the reason).

``/proc/modules`` is not namespaced, so the agent's container sees the host's modules
without any extra privilege or host mount. What this does *not* prove: that the device
plugin hands isolated devices to pods (ACK's isolation label turns isolation off per node at
the plugin: ``spec.memoryIsolation`` of the node's pool) — that is the operator's part.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpushare.gpu.inventory import ISOLATION_ABSENT, ISOLATION_ACTIVE, ISOLATION_UNKNOWN, Isolation

MODULE_NAME = "cgpu_km"


@dataclass(frozen=True)
class IsolationPaths:
    """Where to look; tests point these at a temporary directory."""

    proc_modules: Path = Path("/proc/modules")
    proc_cgpu: Path = Path("/proc/cgpu_km")


@dataclass(frozen=True)
class IsolationResult:
    state: Isolation
    reason: str


def detect_cgpu_isolation(paths: IsolationPaths | None = None) -> IsolationResult:
    """Blocking file reads: call through ``asyncio.to_thread`` from async code."""
    p = paths or IsolationPaths()
    if p.proc_cgpu.exists():
        return IsolationResult(ISOLATION_ACTIVE, f"{p.proc_cgpu} exists")
    try:
        text = p.proc_modules.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return IsolationResult(ISOLATION_UNKNOWN, f"cannot read {p.proc_modules}: {exc.strerror or exc}")
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == MODULE_NAME:
            return IsolationResult(ISOLATION_ACTIVE, f"kernel module {MODULE_NAME} is loaded")
    return IsolationResult(
        ISOLATION_ABSENT, f"kernel module {MODULE_NAME} is not loaded and {p.proc_cgpu} does not exist"
    )
