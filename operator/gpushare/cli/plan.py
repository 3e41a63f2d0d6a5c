"""``gpushare plan``: the dry run of what the operator would do to each node.

Live (the default): reads the cluster's GPUSharePools, Nodes and GPU pods through the kubeconfig
(get/list only) and shows what applying the pools in ``-f`` files (or deleting ``--delete`` pools)
would change, as ``kubectl diff`` does: per pool the spec fields that change, then per node the
label changes (``key: old -> new``), device-plugin restarts, held mode switches with the pods that
block them, conflicts and skips. Offline: ``--pools``/``--nodes``/``--pods`` files (``kubectl get
... -o yaml`` Lists or manifests; other kinds are ignored, so ``--pools examples/`` works) stand in
for the cluster. Nothing is written. Exit 0; 2 on unreadable or invalid input or an unreachable
cluster (one line naming the object or source and the problem).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.backends import backend_for
from gpushare.cli import CLIError
from gpushare.k8s.readonly import LiveReadError, LiveState, read_live_sync
from gpushare.objectfiles import load_files
from gpushare.policy import Action, ClusterPlan, NodePlan, NodeView, PodView, plan
from gpushare.policy.pooldiff import PoolChange, diff_pools, show
from gpushare.policy.restart import is_plugin_pod
from gpushare.policy.status import no_nodes_message

ABSENT = "<none>"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="preview the node labels, plugin restarts, holds and conflicts the operator would produce",
        description=(
            "Dry run of the operator, like `kubectl diff`: what applying the GPUSharePools in -f files "
            "(or deleting --delete pools) would change, per pool and per node. Reads the live cluster "
            "through the kubeconfig (get/list only), or, offline, --pools/--nodes/--pods files. "
            "Nothing is written."
        ),
    )
    parser.add_argument(
        "-f", "--filename", dest="files", action="append", default=[], metavar="FILE",
        help="GPUSharePools to preview applying (file, directory or '-'; repeatable; other kinds are "
        "ignored); they replace the pools of the same name",
    )  # fmt: skip
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, else KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument(
        "--pools", action="append", default=[], metavar="FILE",
        help="offline: the current GPUSharePools instead of the cluster's (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--nodes", action="append", default=[], metavar="FILE",
        help="offline: Nodes, e.g. `kubectl get nodes -o yaml` (repeatable; required offline)",
    )  # fmt: skip
    parser.add_argument(
        "--pods", action="append", default=[], metavar="FILE",
        help="offline: Pods, e.g. `kubectl get pods -A -o yaml` (running GPU pods can hold a mode switch)",
    )  # fmt: skip
    parser.add_argument(
        "--delete", action="append", default=[], metavar="POOL",
        help="preview deleting this pool (its cleanup policy applies to its nodes; repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "-a", "--all", action="store_true", help="also list nodes that stay unchanged or belong to no pool"
    )
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def _objects(paths: list[str], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in load_files(paths) if obj.get("kind") == kind]


def _parse_pools(objs: list[dict[str, Any]], option: str) -> list[GPUSharePool]:
    pools: list[GPUSharePool] = []
    errors: list[str] = []
    for obj in objs:
        try:
            pools.append(parse_pool(obj))
        except PoolValidationError as exc:
            errors.append(f"{option}: {exc}")
    if errors:  # every bad pool, a line each
        raise CLIError("\n".join(errors))
    seen: set[str] = set()
    for p in pools:
        if p.name in seen:
            raise CLIError(f"{option}: {c.KIND}/{p.name} is given twice")
        seen.add(p.name)
    return pools


def load_inputs(
    pool_files: list[str], node_files: list[str], pod_files: list[str], *, pools_required: bool = True
) -> tuple[list[GPUSharePool], list[NodeView], list[PodView]]:
    pools = _parse_pools(_objects(pool_files, c.KIND), "--pools") if pool_files else []
    if not pools and pools_required:
        raise CLIError(f"--pools {' '.join(pool_files)}: no {c.KIND} found")
    nodes = [NodeView.from_obj(obj) for obj in _objects(node_files, "Node")]
    if not nodes:
        raise CLIError(f"--nodes {' '.join(node_files)}: no Node found")
    pods = [PodView.from_obj(obj) for obj in _objects(pod_files, "Pod")] if pod_files else []
    return pools, nodes, pods


def _plugin_pods(pool: GPUSharePool | None, node: str, pods: list[PodView]) -> list[PodView]:
    if pool is None:
        return [p for p in pods if p.node_name == node and is_plugin_pod(p.labels)]
    dp = pool.spec.device_plugin
    return [
        p
        for p in pods
        if p.node_name == node and p.namespace == dp.namespace and dp.pod_selector.matches(p.labels)
    ]


def _label_changes(node: NodeView, patch: Mapping[str, str | None]) -> list[dict[str, str | None]]:
    return [{"key": k, "from": node.labels.get(k), "to": v} for k, v in sorted(patch.items())]


def plan_json(
    cp: ClusterPlan, nodes: Mapping[str, NodeView], pools: Mapping[str, GPUSharePool], pods: list[PodView]
) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for p in cp.nodes:
        n = nodes[p.node]
        out.append(
            {
                "node": p.node,
                "pool": p.pool,
                "action": p.action.value,
                "reason": p.reason,
                "message": p.message,
                "labels": _label_changes(n, p.label_patch),
                "annotations": dict(p.annotation_patch),
                "cordon": p.cordon,
                "uncordon": p.uncordon,
                "restartPlugin": p.restart_plugin,
                "pluginPods": [x.ref for x in _plugin_pods(pools.get(p.pool or ""), p.node, pods)]
                if p.restart_plugin
                else [],
                "pluginRestartPending": p.plugin_restart_pending,
                "modeSwitch": {"from": p.mode_switch[0], "to": p.mode_switch[1]} if p.mode_switch else None,
                "hold": p.hold,
                "blockingPods": [x.ref for x in p.blocking_pods],
                "conflictPools": list(p.conflict_pools),
                "drift": p.drift,
            }
        )
    return {"nodes": out, "invalidPools": dict(cp.invalid_pools), "summary": summary(cp)}


def summary(cp: ClusterPlan) -> dict[str, int]:
    def n(action: Action) -> int:
        return sum(1 for p in cp.nodes if p.action is action)

    return {
        "nodes": len(cp.nodes),
        "changed": len(cp.changes()),
        "pluginRestarts": sum(1 for p in cp.nodes if p.restart_plugin),
        "held": n(Action.HOLD),
        "conflicts": n(Action.CONFLICT),
        "skipped": n(Action.SKIP),
        "restored": n(Action.RESTORE) + n(Action.RETAIN),
        "unchanged": sum(1 for p in cp.nodes if not p.changed and p.action is Action.NOOP),
    }


def _text_node(p: NodePlan, node: NodeView, pool: GPUSharePool | None, pods: list[PodView]) -> list[str]:
    where = f" (pool {p.pool})" if p.pool else ""
    lines = [
        f"{p.node}: {p.action.value}{where}: {p.message}"
        if p.message
        else f"{p.node}: {p.action.value}{where}"
    ]
    backend = backend_for(pool.spec if pool else None)
    for change in _label_changes(node, p.label_patch):
        tag = "   [mode switch]" if change["key"] == backend.mode_label and p.mode_switch else ""
        lines.append(f"    {change['key']}: {change['from'] or ABSENT} -> {change['to'] or ABSENT}{tag}")
    if p.action is Action.HOLD and p.mode_switch:
        lines.append(
            f"    held: {backend.mode_label} {p.mode_switch[0]} -> {p.mode_switch[1]} (modeSwitch {p.hold})"
        )
        held = backend.shared_resource
        lines.extend(f"    blocking pod: {x.ref} ({held}={x.requests.get(held, 0)})" for x in p.blocking_pods)
        if p.cordon:
            lines.append("    cordon the node (gpushare.io/cordoned-by) while waiting")
        if p.evict_pods:
            lines.append("    evict the blocking pods (Eviction API, PodDisruptionBudgets honoured)")
    if p.force:
        lines.append(
            f"    WARNING: forced mode switch with running pods: {', '.join(x.ref for x in p.blocking_pods)}"
        )
    if p.uncordon:
        lines.append("    uncordon (gpushare cordoned it)")
    if p.restart_plugin:
        plugin = _plugin_pods(pool, p.node, pods)
        names = ", ".join(x.ref for x in plugin) if plugin else "no device plugin pod found in --pods"
        lines.append(f"    restart device plugin: {names}")
    elif p.plugin_restart_pending:
        lines.append("    device plugin restart still pending from an earlier change")
    if p.drift:
        lines.append("    drift: managed labels were edited by hand")
    return lines


#: The actions of a node that is (or stays) in its pool.
_IN_POOL_ACTIONS = (Action.APPLY, Action.NOOP, Action.HOLD)


def render_text(
    cp: ClusterPlan,
    nodes: Mapping[str, NodeView],
    pools: Mapping[str, GPUSharePool],
    pods: list[PodView],
    show_all: bool,
    deleting: frozenset[str] = frozenset(),
) -> str:
    lines: list[str] = []
    for name, why in sorted(cp.invalid_pools.items()):
        lines.append(f"pool {name} is invalid and ignored: {why}")
    for p in cp.nodes:
        quiet = p.action is Action.NOOP and not p.changed and not p.plugin_restart_pending
        if quiet and not show_all:
            continue
        lines.extend(_text_node(p, nodes[p.node], pools.get(p.pool or ""), pods))
    for pool in pools.values():
        members = [p for p in cp.nodes if p.pool == pool.name and p.restart_plugin]
        if members and pool.spec.device_plugin.restart == "Rolling":
            batch = pool.spec.rollout.max_unavailable_for(
                sum(
                    1
                    for p in cp.nodes
                    if p.pool == pool.name and p.action in (Action.APPLY, Action.NOOP, Action.HOLD)
                )
            )
            limit = pool.spec.rollout.max_unavailable
            lines.append(
                f"pool {pool.name}: {len(members)} device plugin restart(s), "
                f"at most {batch} node(s) at a time (rollout.maxUnavailable {limit})"
            )
    for pool in pools.values():  # a pool on no node says so, with its selector (as its status will)
        if pool.name in deleting or pool.name in cp.invalid_pools:
            continue
        if not any(p.pool == pool.name and p.action in _IN_POOL_ACTIONS for p in cp.nodes):
            shared = sum(1 for p in cp.nodes if p.action is Action.CONFLICT and pool.name in p.conflict_pools)
            skipped = sum(1 for p in cp.nodes if p.pool == pool.name and p.action is Action.SKIP)
            lines.append(f"pool {pool.name}: {no_nodes_message(pool, shared, skipped)}")
    s = summary(cp)
    lines.append(
        f"{s['nodes']} node(s): {s['changed']} to change, {s['pluginRestarts']} plugin restart(s), "
        f"{s['held']} held, {s['conflicts']} conflict(s), {s['skipped']} skipped, {s['restored']} restored, "
        f"{s['unchanged']} unchanged"
    )
    return "\n".join(lines)


def render_pool_changes(changes: list[PoolChange], pools: Mapping[str, GPUSharePool]) -> list[str]:
    """``kubectl diff`` for the pools: created / configured (field: old -> new) / unchanged / deleted."""
    lines: list[str] = []
    for ch in changes:
        ref = f"{c.KIND}/{ch.name}"
        if ch.change == "delete":
            cleanup = pools[ch.name].spec.cleanup if ch.name in pools else "Restore"
            lines.append(f"{ref}: would be deleted (cleanup {cleanup})")
        elif ch.change == "unchanged":
            lines.append(f"{ref}: unchanged")
        elif ch.change == "create":
            lines.append(f"{ref}: would be created")
            lines.extend(f"    {f.path}: {show(f.new)}" for f in ch.fields)
        else:
            lines.append(f"{ref}: would be configured")
            lines.extend(f"    {f.path}: {show(f.old)} -> {show(f.new)}" for f in ch.fields)
    return lines


def _live_inputs(
    kubeconfig: str | None,
) -> tuple[LiveState, list[GPUSharePool], dict[str, str], list[NodeView], list[PodView]]:
    """The cluster's pools (valid ones; invalid ones by name -> why), nodes and bound pods."""
    try:
        state = read_live_sync(kubeconfig)
    except LiveReadError as exc:
        raise CLIError(str(exc)) from None
    pools: list[GPUSharePool] = []
    invalid: dict[str, str] = {}
    for obj in state.pools:
        try:
            pools.append(parse_pool(obj))
        except PoolValidationError as exc:  # stored before a rule existed: the operator ignores it too
            invalid[exc.name] = "; ".join(exc.problems)
    nodes = [NodeView.from_obj(obj) for obj in state.nodes]
    pods = [PodView.from_obj(obj) for obj in state.pods]
    return state, pools, invalid, nodes, pods


def _relevant_pods(pods: list[PodView], pools: list[GPUSharePool]) -> list[PodView]:
    """GPU pods (they can hold a mode switch) and device plugin pods (they get restarted)."""

    def plugin(p: PodView) -> bool:
        if is_plugin_pod(p.labels):
            return True
        return any(
            p.namespace == pool.spec.device_plugin.namespace
            and pool.spec.device_plugin.pod_selector.matches(p.labels)
            for pool in pools
        )

    return [p for p in pods if p.requests or plugin(p)]


def run(args: argparse.Namespace) -> int:
    applied = _parse_pools(_objects(args.files, c.KIND), "-f") if args.files else []
    if args.files and not applied:
        raise CLIError(f"-f {' '.join(args.files)}: no {c.KIND} found")
    offline = bool(args.pools or args.nodes or args.pods)
    invalid: dict[str, str] = {}
    header: list[str] = []
    being_deleted: set[str] = set()
    if offline:
        if not args.nodes:
            raise CLIError(
                "--nodes FILE is required offline (with --pools/--pods); omit all three to read the cluster"
            )
        current, nodes, pods = load_inputs(args.pools, args.nodes, args.pods, pools_required=not applied)
        source = "--pools or -f"
    else:
        state, current, invalid, nodes, all_pods = _live_inputs(args.kubeconfig)
        # pools already being deleted (finalizer pending) are planned as the operator does: cleanup
        being_deleted = {
            str(obj["metadata"]["name"])
            for obj in state.pools
            if (obj.get("metadata") or {}).get("deletionTimestamp")
        }
        pods = _relevant_pods(all_pods, [*current, *applied])
        source = "the cluster or -f"
        header = [
            f"live: {state.server}: {len(current) + len(invalid)} pool(s), {len(nodes)} node(s), "
            f"{len(pods)} GPU or device plugin pod(s)",
            *(f"warning: {w}" for w in state.warnings),
        ]
    by_pool = {p.name: p for p in current}
    by_pool.update({p.name: p for p in applied})
    for name in by_pool:
        invalid.pop(name, None)  # a pool in -f replaces the invalid stored one
    pools = list(by_pool.values())
    unknown = [name for name in args.delete if name not in by_pool]
    if unknown:
        raise CLIError(f"--delete {unknown[0]}: no such {c.KIND} in {source}")
    deleting = frozenset(args.delete) | frozenset(being_deleted & set(by_pool))
    cp = plan(pools, nodes, pods, now=datetime.now(UTC), deleting=deleting, invalid=invalid)
    changes = diff_pools(current, applied, args.delete) if (applied or args.delete) else []
    by_node = {n.name: n for n in nodes}
    if args.output == "json":
        out = plan_json(cp, by_node, by_pool, pods)
        out["pools"] = [ch.to_dict() for ch in changes]
        print(json.dumps(out, indent=2))
    else:
        lines = [
            *header,
            *render_pool_changes(changes, by_pool),
            render_text(cp, by_node, by_pool, pods, args.all, deleting),
        ]
        print("\n".join(lines))
    return 0
