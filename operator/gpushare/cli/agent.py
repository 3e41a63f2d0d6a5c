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
from typing import Any

import structlog

from gpushare import lazy_client
from gpushare.agent import DEFAULT_INTERVAL, run_agent
from gpushare.cli import CLIError
from gpushare.gpu.nvml import PynvmlBackend
from gpushare.k8s import KubeConfigError, make_api_client
from gpushare.log import LOG_FORMATS, configure_logging

log = structlog.get_logger("gpushare.agent")


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
    log.info("agent starting", node=node_name, interval=args.interval, once=args.once, **lazy_client.state())
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
