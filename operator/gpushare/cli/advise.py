"""``gpushare advise``: which idle nodes, moved from which pools, would let which waiting pods schedule.

Live (the default): reads the cluster's GPUSharePools, Nodes and unfinished Pods through the
kubeconfig (list only). Offline: ``--pools``/``--nodes``/``--pods`` files (``kubectl get ... -o
yaml``). Nothing is written: it prints, per move, the node, the pool it leaves and the pool it
joins, the waiting pods that would fit on it (per GPU, as ACK's plugin and scheduler see it; in
slots, replicas x GPUs, for an NVIDIA pool; in devices per profile for a MIG pool), the
label changes and device-plugin restart the move implies (the operator's own planner), then the
pods that stay pending and why. ``spec.lending.keepIdle`` of a pool is honoured; ``--keep-idle``
applies one number to every pool. Exit 0; 2 on unreadable or invalid input or an unreachable
cluster (one line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends import backend_for
from gpushare.cli import CLIError, add_cluster_sources
from gpushare.cli.inspect import _from_files, _live
from gpushare.policy.advise import Advice, Placement, advise
from gpushare.policy.demand import PoolDemand, Snapshot, snapshot

ABSENT = "<none>"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "advise",
        help="which idle nodes of which pools would let waiting GPU pods schedule (read-only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_sources(p)
    p.add_argument(
        "--keep-idle", type=int, default=None, metavar="N",
        help="idle nodes every pool keeps (default: its spec.lending.keepIdle, else 0)",
    )  # fmt: skip
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def _demand_line(d: PoolDemand, pool: GPUSharePool | None) -> str:
    oldest = d.oldest
    since = f", the oldest since {oldest.strftime('%Y-%m-%dT%H:%M:%SZ')}" if oldest else ""
    words = (
        backend_for(pool.spec).describe_requests(pool.spec, {r: d.requested(r) for r in d.resources})
        if pool is not None
        else ", ".join(f"{r} {d.requested(r)}" for r in d.resources)
    )
    return f"pool {d.pool}: {len(d.waiting)} pod(s) wait for GPU ({words}){since}"


def _slots(snap: Snapshot, pool: str) -> tuple[str, ...]:
    """The resource each entry of a node's room counts in the pool (NVIDIA's slots, a MIG pool's
    devices per profile); empty for an ACK pool (per GPU)."""
    spec = next((p.spec for p in snap.pools if p.name == pool), None)
    return backend_for(spec).entry_resources(spec) if spec is not None else ()


def render_text(snap: Snapshot, advice: Advice) -> str:
    lines = [f"warning: {w}" for w in snap.warnings]
    by_name = {p.name: p for p in snap.pools}
    lines.extend(
        _demand_line(d, by_name.get(d.pool))
        for d in sorted(snap.demand.values(), key=lambda d: d.pool)
        if d.waiting
    )
    for m in advice.moves:
        lines.append(f"move node {m.node} from pool {m.lender} to pool {m.borrower}:")
        borrower = by_name[m.borrower]
        for pl in m.placements:
            took = backend_for(borrower.spec).describe_take(borrower.spec, pl.gpus)
            lines.append(f"    schedules {pl.pod} ({took})")
        if m.plan is not None:
            node = snap.nodes[m.node]
            for key, value in sorted(m.plan.label_patch.items()):
                lines.append(f"    {key}: {node.labels.get(key) or ABSENT} -> {value or ABSENT}")
            if m.plan.restart_plugin:
                lines.append("    restart device plugin")
    lines.extend(f"stays pending: {s.pod.ref} (pool {', '.join(s.pools)}): {s.why}" for s in advice.pending)
    waiting = sum(len(d.waiting) for d in snap.demand.values())
    if not waiting:
        lines.append("No GPU pod waits for want of GPU resources.")
    placed = sum(len(m.placements) for m in advice.moves)
    lines.append(
        f"{len(advice.moves)} move(s): {placed} pod(s) would schedule, {len(advice.pending)} stay pending"
    )
    return "\n".join(lines)


def to_json(snap: Snapshot, advice: Advice) -> dict[str, Any]:
    return {
        "demand": {name: d.status() for name, d in sorted(snap.demand.items())},
        "moves": [
            {
                "node": m.node,
                "from": m.lender,
                "to": m.borrower,
                "pods": [_placement_json(snap, m.borrower, pl) for pl in m.placements],
                "labels": [
                    {"key": k, "from": snap.nodes[m.node].labels.get(k), "to": v}
                    for k, v in sorted((m.plan.label_patch if m.plan else {}).items())
                ],
                "restartPlugin": bool(m.plan and m.plan.restart_plugin),
            }
            for m in advice.moves
        ],
        "pending": [{"pod": s.pod.ref, "pools": list(s.pools), "why": s.why} for s in advice.pending],
        "warnings": list(snap.warnings),
    }


def _placement_json(snap: Snapshot, borrower: str, pl: Placement) -> dict[str, Any]:
    """One pod's placement: per GPU (ACK), or its slots of the pool's resources (NVIDIA's, a MIG
    pool's per profile)."""
    names = _slots(snap, borrower)
    if names:
        slots: dict[str, int] = {}
        for i, (n, _) in sorted(pl.gpus.items()):
            name = names[min(i, len(names) - 1)]
            slots[name] = slots.get(name, 0) + n
        return {"pod": pl.pod, "slots": slots}
    gpus = [{"gpu": i, "gpuMem": mem, "gpuCore": core} for i, (mem, core) in sorted(pl.gpus.items())]
    return {"pod": pl.pod, "gpus": gpus}


def run(args: argparse.Namespace) -> int:
    if args.keep_idle is not None and args.keep_idle < 0:
        raise CLIError(f"--keep-idle {args.keep_idle}: must be 0 or more")
    offline = bool(args.nodes or args.pods or args.pools)
    if offline:
        if not args.nodes:
            raise CLIError(
                "--nodes FILE is required offline (with --pools/--pods); omit all three to read the cluster"
            )
        if not args.pools:
            raise CLIError("--pools FILE is required offline (the GPUSharePools to advise on)")
        nodes, pods, pools = _from_files(args)
        if not pools:
            raise CLIError(f"--pools {' '.join(args.pools)}: no {c.KIND} found")
        warnings: list[str] = []
    else:
        nodes, pods, pools, warnings = asyncio.run(_live(args.kubeconfig))
    now = datetime.now(UTC)
    snap = snapshot(nodes, pods, pools, now=now)
    if warnings:
        snap = Snapshot(
            snap.pools, snap.nodes, snap.plan, snap.demand, snap.waiting, (*snap.warnings, *warnings)
        )
    keep = {p.name: args.keep_idle for p in snap.pools} if args.keep_idle is not None else None
    advice = advise(snap.pools, snap.demand, snap.nodes, now=now, keep_idle=keep)
    if args.output == "json":
        print(json.dumps(to_json(snap, advice), indent=2))
    else:
        print(render_text(snap, advice))
    return 0
