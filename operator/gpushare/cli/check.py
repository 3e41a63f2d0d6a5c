"""``gpushare check``: run the admission rules on manifests.

Context (the pools and nodes the pool rules need): the live cluster's GPUSharePools and Nodes,
read through the kubeconfig (get/list only), unless ``--pools``/``--nodes`` files are given or
``--offline`` says to use only what ``-f`` holds (for CI without a cluster).

Exit codes: 0 nothing denied (warnings allowed), 1 something denied, 2 unreadable input. A file
that cannot be read (bad YAML, a Helm template, too deep or too large) is reported on stderr in
one line and the other files are still checked; the exit code is then 2.
Output: ``-o text`` (default) prints one line per finding, ``VERDICT RULE-ID MESSAGE`` (the message
starts with ``Kind/namespace/name``), then a summary line; ``-o json`` prints one JSON list of
finding objects (keys: rule_id, verdict, object, container, field, value, message).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from gpushare import constants as c
from gpushare.admission import (
    DEFAULT_TABLE,
    Context,
    Finding,
    KindsError,
    KindTable,
    WorkloadKind,
    evaluate,
    is_denied,
    load_kinds,
    node_info,
    object_name,
    table_with,
)
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.cli import CLIError
from gpushare.k8s.readonly import LiveReadError, read_live_sync
from gpushare.objectfiles import collect_files, load_files


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="check pods, workloads and GPUSharePools against the GPU-sharing admission rules",
        description=(
            "Check manifests against the admission rules the webhook enforces, with the live cluster's "
            "GPUSharePools and Nodes as context (read-only), or --pools/--nodes files, or --offline. "
            "GPUSharePools and Nodes found in -f files are also used as context. Exit 0 when nothing is "
            "denied, 1 when something is, 2 when input or the cluster cannot be read."
        ),
    )
    parser.add_argument(
        "-f", "--filename", dest="files", action="append", required=True, metavar="FILE",
        help="YAML/JSON manifest, directory or '-' for stdin (repeatable; multi-document and List kinds)",
    )  # fmt: skip
    parser.add_argument(
        "--pools", action="append", default=[], metavar="FILE",
        help="GPUSharePools to check against (e.g. `kubectl get gsp -o yaml`)",
    )  # fmt: skip
    parser.add_argument(
        "--nodes", action="append", default=[], metavar="FILE",
        help="Nodes to check against (e.g. `kubectl get nodes -o yaml`)",
    )  # fmt: skip
    parser.add_argument(
        "--offline", action="store_true",
        help="do not read the cluster: only -f (and --pools/--nodes) files give context",
    )  # fmt: skip
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, else KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument(
        "--kinds", action="append", default=[], metavar="FILE",
        help="extra workload kinds and where their pod templates are"
        " (YAML; docs/reference/workload-kinds.md)",
    )  # fmt: skip
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def _context_objects(paths: list[str], option: str) -> tuple[list[GPUSharePool], list[dict[str, Any]]]:
    pools: list[GPUSharePool] = []
    nodes: list[dict[str, Any]] = []
    errors: list[str] = []  # every bad pool or object, a line each
    for obj in load_files(paths):
        kind = obj.get("kind")
        if kind == c.KIND:
            try:
                pools.append(parse_pool(obj))
            except PoolValidationError as exc:
                errors.append(f"{option}: {exc}")
        elif kind == "Node":
            nodes.append(obj)
        else:
            errors.append(f"{option}: {object_name(obj)} is neither a GPUSharePool nor a Node")
    if errors:
        raise CLIError("\n".join(errors))
    return pools, nodes


def check_objects(
    objects: list[dict[str, Any]], ctx: Context, table: KindTable = DEFAULT_TABLE
) -> list[Finding]:
    findings: list[Finding] = []
    for obj in objects:
        findings.extend(evaluate(obj, ctx, table))
    return findings


def kinds_table(paths: list[str]) -> KindTable:
    """Built-in workload kinds plus those of every ``--kinds FILE``."""
    if not paths:
        return DEFAULT_TABLE
    configured: list[WorkloadKind] = []
    for path in paths:
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CLIError(f"--kinds {path}: cannot read: {exc}") from None
        try:
            configured.extend(load_kinds(text, f"--kinds {path}"))
        except KindsError as exc:
            raise CLIError(str(exc)) from None
    return table_with(configured)


def build_context(
    objects: list[dict[str, Any]], pools: list[GPUSharePool], nodes: list[dict[str, Any]]
) -> Context:
    """Context pools: --pools, then valid pools from -f (a pool in -f replaces the same name)."""
    by_name = {p.name: p for p in pools}
    node_objs = list(nodes)
    for obj in objects:
        if obj.get("kind") == c.KIND:
            try:
                pool = parse_pool(obj)
            except PoolValidationError:
                continue
            by_name[pool.name] = pool
        elif obj.get("kind") == "Node":
            node_objs.append(obj)
    by_node = {info.name: info for info in (node_info(n) for n in node_objs)}
    return Context.build(list(by_name.values()), list(by_node.values()))


def _live_context(kubeconfig: str | None) -> tuple[list[GPUSharePool], list[dict[str, Any]]]:
    """The cluster's valid pools and its nodes (an invalid stored pool is skipped, as the webhook does)."""
    try:
        state = read_live_sync(kubeconfig, with_pods=False)
    except LiveReadError as exc:
        raise CLIError(f"{exc}; to check without a cluster use --offline or --pools/--nodes files") from None
    pools: list[GPUSharePool] = []
    for obj in state.pools:
        with contextlib.suppress(PoolValidationError):
            pools.append(parse_pool(obj))
    return pools, state.nodes


def run(args: argparse.Namespace) -> int:
    table = kinds_table(args.kinds)
    objects, errors = collect_files(args.files)  # a bad file is reported; the others are still checked
    if errors and not objects:
        return _report_errors(errors)  # nothing to check: no context needed
    try:
        if args.pools or args.nodes or args.offline:
            pools, nodes = _context_objects(args.pools, "--pools")
            more_pools, more_nodes = _context_objects(args.nodes, "--nodes")
        else:
            pools, nodes = _live_context(args.kubeconfig)
            more_pools, more_nodes = [], []
    except CLIError:
        _report_errors(errors)
        raise
    ctx = build_context(objects, pools + more_pools, nodes + more_nodes)
    findings = check_objects(objects, ctx, table)
    if args.output == "json":
        print(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        for f in findings:
            print(f"{f.verdict.upper():4} {f.rule_id} {f.message}")
        denied = sum(1 for f in findings if f.verdict == "deny")
        warned = len(findings) - denied
        unread = f", {len(errors)} file(s) unreadable" if errors else ""
        print(f"checked {len(objects)} object(s): {denied} denied, {warned} warning(s){unread}")
    if errors:
        return _report_errors(errors)
    return 1 if is_denied(findings) else 0


def _report_errors(errors: list[str]) -> int:
    """One line per unreadable file on stderr; the exit code for unreadable input."""
    for error in errors:
        print(f"gpushare check: error: {error}", file=sys.stderr)
    return 2
