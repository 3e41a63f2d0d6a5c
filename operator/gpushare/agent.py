"""The node agent's loop: publish this node's GPU inventory (NVML) and cGPU isolation on its Node.

``gpushare agent`` (:mod:`gpushare.cli.agent`) runs it with the real NVML; the local demo
(``gpushare.devcluster.demo``) and the tests run the same cycle with a stand-in. Every ``interval``
seconds it reads NVML and the cGPU probe off the event loop, computes the desired ``gpushare.io/``
labels and inventory annotation, and merge-patches its own Node (through
:mod:`gpushare.k8s.agent`) only when something differs. NVML failures (no driver, no GPU, an error
on one device) are logged and published as ``state=unknown``; they never stop the loop. API errors
are logged and retried on the next period.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import structlog

from gpushare.gpu.inventory import Inventory, collect_inventory, desired_node_metadata, node_metadata_patch
from gpushare.gpu.isolation import IsolationPaths, detect_cgpu_isolation
from gpushare.gpu.nvml import NVML
from gpushare.k8s import agent as k8s_agent
from gpushare.k8s.agent import NodeAccessError

log = structlog.get_logger("gpushare.agent")

DEFAULT_INTERVAL = 60.0


@dataclass(frozen=True)
class CycleResult:
    inventory: Inventory
    isolation_reason: str
    #: the merge patch sent, or None when the node was already up to date.
    patch: dict[str, Any] | None = None

    @property
    def patched(self) -> bool:
        return self.patch is not None


@dataclass
class AgentState:
    """What the loop remembers between cycles (only to avoid repeating log lines)."""

    last_inventory: Inventory | None = None
    cycles: int = 0
    writes: int = 0
    errors: int = 0
    results: list[CycleResult] = field(default_factory=list)


async def run_cycle(api: Any, node_name: str, nvml: NVML, paths: IsolationPaths) -> CycleResult:
    """One read-compare-patch round. Raises NodeAccessError for API problems only."""
    isolation = await asyncio.to_thread(detect_cgpu_isolation, paths)
    inventory = await asyncio.to_thread(collect_inventory, nvml, isolation=isolation.state)
    current = await k8s_agent.read_node_metadata(api, node_name)
    labels, annotations = desired_node_metadata(inventory)
    patch = node_metadata_patch(current.labels, current.annotations, labels, annotations)
    if patch is not None:
        await k8s_agent.patch_node_metadata(api, node_name, patch)
    return CycleResult(inventory=inventory, isolation_reason=isolation.reason, patch=patch)


def _log_result(result: CycleResult, state: AgentState, node_name: str) -> None:
    inv = result.inventory
    if inv != state.last_inventory:
        if inv.state == "ok":
            log.info(
                "gpu inventory",
                node=node_name,
                gpus=len(inv.gpus),
                products=sorted({g.name for g in inv.gpus}),
                smallest_memory_mib=inv.smallest_memory_mib,
                driver=inv.driver_version,
                cuda=inv.cuda_driver_version,
                cgpu_isolation=inv.cgpu_isolation,
                isolation_check=result.isolation_reason,
            )
        else:
            log.warning(
                "gpu inventory unknown; publishing state=unknown and retrying every period",
                node=node_name,
                error=inv.error,
                cgpu_isolation=inv.cgpu_isolation,
                isolation_check=result.isolation_reason,
            )
        state.last_inventory = inv
    if result.patch is not None:
        meta = result.patch["metadata"]
        log.info(
            "node patched",
            node=node_name,
            labels=sorted(meta.get("labels", {})),
            annotations=sorted(meta.get("annotations", {})),
        )
    else:
        log.debug("node up to date", node=node_name)


async def run_agent(
    api: Any,
    node_name: str,
    nvml: NVML,
    *,
    paths: IsolationPaths | None = None,
    interval: float = DEFAULT_INTERVAL,
    once: bool = False,
    stop: asyncio.Event | None = None,
    state: AgentState | None = None,
) -> int:
    """The agent loop. With ``once`` returns 0 when the node is up to date, 1 on an API error."""
    paths = paths or IsolationPaths()
    stop = stop or asyncio.Event()
    state = state if state is not None else AgentState()
    while True:
        state.cycles += 1
        try:
            result = await run_cycle(api, node_name, nvml, paths)
        except NodeAccessError as exc:
            state.errors += 1
            log.error("cannot update node; retrying next period", node=node_name, error=str(exc))
            if once:
                return 1
        else:
            state.results.append(result)
            state.writes += int(result.patched)
            _log_result(result, state, node_name)
            if once:
                return 0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        if stop.is_set():
            log.info("agent stopping", node=node_name, cycles=state.cycles, writes=state.writes)
            return 0
