# ruff: noqa: A005  -- the dispatcher maps sub-command "inspect" to gpushare.cli.inspect
"""``gpushare inspect`` (also ``kubectl gpushare inspect``): GPU sharing per pool and per node.

Live from the cluster (``--kubeconfig``, else in-cluster, else ``KUBECONFIG``/~/.kube/config) or
offline from files (``--nodes``/``--pods``/``--pools``, e.g. saved ``kubectl get -o yaml``).
Read-only: needs list on nodes, pods and gpusharepools.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import aiohttp

from gpushare import constants as c
from gpushare.api.v1alpha1 import PoolValidationError, parse_pool
from gpushare.cli import CLIError, add_cluster_sources
from gpushare.inspection import Report, build_report, render_text
from gpushare.k8s import KubeConfigError, make_api_client
from gpushare.k8s.inspect_read import InspectReadError, read_cluster
from gpushare.objectfiles import load_files

Objects = list[dict[str, Any]]


def _from_files(args: argparse.Namespace) -> tuple[Objects, Objects, Objects]:
    def kind(paths: list[str], wanted: str) -> Objects:
        return [o for o in load_files(paths) if o.get("kind") == wanted] if paths else []

    nodes, pods, pools = kind(args.nodes, "Node"), kind(args.pods, "Pod"), kind(args.pools, c.KIND)
    errors = []  # pools given by file must all be valid (a stored invalid pool is only a warning)
    for obj in pools:
        try:
            parse_pool(obj)
        except PoolValidationError as exc:
            errors.append(f"--pools: {exc}")
    if errors:
        raise CLIError("\n".join(errors))
    return nodes, pods, pools


async def _live(kubeconfig: str | None) -> tuple[Objects, Objects, Objects, list[str]]:
    try:
        api = await make_api_client(kubeconfig)
    except KubeConfigError as exc:
        raise CLIError(str(exc)) from None
    async with api:
        try:
            return await read_cluster(api)
        except InspectReadError as exc:
            raise CLIError(str(exc)) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise CLIError(f"cannot reach the API server: {exc}") from None


def make_report(args: argparse.Namespace) -> Report:
    offline = bool(args.nodes or args.pods or args.pools)
    if offline:
        nodes, pods, pools = _from_files(args)
        extra: list[str] = []
    else:
        nodes, pods, pools, extra = asyncio.run(_live(args.kubeconfig))
    report = build_report(nodes, pods, pools)
    if args.pool:
        known = {p.name for p in report.pools if p.name is not None}
        missing = sorted(set(args.pool) - known)
        if missing:
            raise CLIError(
                f"no GPUSharePool named {', '.join(missing)} (known: {', '.join(sorted(known)) or 'none'})"
            )
        report = Report(
            pools=tuple(p for p in report.pools if p.name in args.pool),
            warnings=report.warnings,
        )
    if extra:
        report = Report(pools=report.pools, unpooled=report.unpooled, warnings=(*report.warnings, *extra))
    return report


def cmd_inspect(args: argparse.Namespace) -> int:
    report = make_report(args)
    if args.output == "json":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(render_text(report, details=args.details))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="per pool and node: mode, isolation, GPUs, gpu-mem/gpu-core allocated, pending GPU pods, phase",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("pool", nargs="*", help="only these pools (default: all, plus GPU nodes in no pool)")
    p.add_argument("-d", "--details", action="store_true", help="list the GPU pods on each node")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    add_cluster_sources(p)
    p.set_defaults(func=cmd_inspect)
