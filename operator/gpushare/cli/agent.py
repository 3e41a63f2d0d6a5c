"""``gpushare agent``: publish this node's GPU inventory (NVML) and cGPU isolation on its Node.

Runs as a DaemonSet on GPU nodes. Every ``--interval`` seconds it reads NVML and the cGPU
probe off the event loop, computes the desired ``gpushare.io/`` labels and inventory
annotation, and merge-patches its own Node only when something differs. NVML failures
(no driver, no GPU, an error on one device) are logged and published as ``state=unknown``;
they never stop the loop. API errors are logged and retried on the next period.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from typing import Any

import structlog

from gpushare.cli import CLIError
from gpushare.gpu.inventory import Inventory, collect_inventory, desired_node_metadata, node_metadata_patch
from gpushare.gpu.isolation import IsolationPaths, detect_cgpu_isolation
from gpushare.gpu.nvml import NVML, PynvmlBackend
from gpushare.k8s import KubeConfigError, make_api_client
from gpushare.k8s import agent as k8s_agent
from gpushare.k8s.agent import NodeAccessError
from gpushare.log import LOG_FORMATS, configure_logging

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


def resolve_node_name(arg: str | None, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    name = (arg or env.get("NODE_NAME") or "").strip()
    if not name:
        raise CLIError(
            "no node name: pass --node-name or set NODE_NAME "
            "(in a DaemonSet: env NODE_NAME from fieldRef spec.nodeName)"
        )
    return name


async def _main(args: argparse.Namespace, node_name: str) -> int:
    try:
        api = await make_api_client(args.kubeconfig)
    except KubeConfigError as exc:
        raise CLIError(str(exc)) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with api:
        return await run_agent(
            api, node_name, PynvmlBackend(), interval=args.interval, once=args.once, stop=stop
        )


def cmd_agent(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise CLIError(f"--interval must be a positive number of seconds, got {args.interval}")
    node_name = resolve_node_name(args.node_name)
    configure_logging(args.log_format)
    log.info("agent starting", node=node_name, interval=args.interval, once=args.once)
    return asyncio.run(_main(args, node_name))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "agent",
        help="publish this node's GPU inventory and cGPU isolation state on its Node (DaemonSet)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--node-name", help="this node's name (default: env NODE_NAME, from the downward API)")
    p.add_argument(
        "--interval", type=float, default=DEFAULT_INTERVAL, help="seconds between refreshes (default 60)"
    )
    p.add_argument("--once", action="store_true", help="refresh once and exit (0 = node up to date)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else KUBECONFIG)")
    p.add_argument("--log-format", choices=LOG_FORMATS, default="json", help="log format (default json)")
    p.set_defaults(func=cmd_agent)
