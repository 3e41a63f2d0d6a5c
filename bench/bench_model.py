"""What the operator's model of the cluster costs per event and per object, with no cluster.

    python bench/bench_model.py --nodes 5000 --pods 10000 --pending 500 --rounds 3 \
        --operator-src before=/tmp/before/operator --operator-src after=operator

Each side is a source root of the ``gpushare`` package (``git archive <commit> operator``); the
benchmark itself imports nothing of it. For every round and side, in alternation, a fresh child
process (``--child``) builds the same synthetic objects as JSON (kwok-like GPU nodes with the
conditions and nodeInfo a kwok node has, Running GPU pods bound to them, Pending GPU pods aimed at
a pool), decodes each as the watch does, and hands them to the process's model exactly as
``gpushare run`` wires it (``handlers.watch.Feeds`` into the ``Reconciler`` and the demand loop's
``DemandTracker``). It reports

* **CPU µs per event:** process CPU over the feed of every node and pod event, each decoded from
  its JSON as the watch does, without tracemalloc; and the same less the floor's (the model's own
  work);
* **retained bytes per object:** what the model keeps once everything is fed and listed
  (``tracemalloc``, a second feed in the same child, after ``gc.collect()``).

Nothing runs beside it: no apiserver, no operator, no watch connection. The floor is no model at
all: the same loop decoding the events and handing them to nothing (reported as its CPU per
event). Prints a Markdown table: the median and range over the rounds per side.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

GPU_MEM = "aliyun.com/gpu-mem"
GPU_COUNT = "aliyun.com/gpu-count"
POOL_LABEL = "gpushare.io/pool"
STAMP = "2026-12-04T00:00:00Z"


def node_body(i: int) -> dict[str, Any]:
    name = f"gpu-node-{i:05d}"
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti",
                 GPU_MEM: "32", GPU_COUNT: "2"}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": STAMP,
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64", "type": "kwok",
                "alibabacloud.com/nodepool-id": f"np-{i % 4}",
            },  # fmt: skip
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {"type": t, "status": "True" if t == "Ready" else "False", "lastHeartbeatTime": STAMP,
                 "lastTransitionTime": STAMP, "reason": "KubeletReady", "message": "kubelet is posting ready status"}
                for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
            ],  # fmt: skip
            "nodeInfo": {"architecture": "amd64", "kubeletVersion": "fake", "operatingSystem": "linux"},
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"}],
        },
    }


def pod_body(i: int, node: str | None) -> dict[str, Any]:
    name = f"job-{i:06d}"
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"limits": {GPU_MEM: "4"}, "requests": {"cpu": "1"}}}],
    }  # fmt: skip
    if node is None:
        spec["nodeSelector"] = {POOL_LABEL: "bench"}
        status: dict[str, Any] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": "0/5000 nodes are available: 5000 Insufficient aliyun.com/gpu-mem.",
                            "lastTransitionTime": STAMP}],
        }  # fmt: skip
    else:
        spec["nodeName"] = node
        status = {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": STAMP}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                   "state": {"running": {"startedAt": STAMP}}}],
        }  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "bench", "uid": f"11111111-0000-0000-0000-{i:012d}",
            "resourceVersion": str(100000 + i), "creationTimestamp": STAMP, "labels": {"app": "bench"},
        },  # fmt: skip
        "spec": spec,
        "status": status,
    }


def events(nodes: int, pods: int, pending: int) -> tuple[list[bytes], list[bytes]]:
    node_events = [json.dumps(node_body(i)).encode() for i in range(nodes)]
    pod_events = [json.dumps(pod_body(i, f"gpu-node-{i % nodes:05d}")).encode() for i in range(pods)]
    pod_events += [json.dumps(pod_body(pods + i, None)).encode() for i in range(pending)]
    return node_events, pod_events


def model() -> tuple[Any, Any]:
    """The model as ``gpushare run`` wires it (handlers.lifecycle), on this side's code."""
    from gpushare.demand_loop import DemandTracker
    from gpushare.handlers.watch import Feeds
    from gpushare.reconcile import Reconciler

    rec = Reconciler(cluster=None)  # type: ignore[arg-type]
    takes_model = "model" in inspect.signature(DemandTracker).parameters
    demand = DemandTracker(None, rec) if takes_model else DemandTracker(None)  # type: ignore[arg-type]
    keep = (rec, demand)
    return Feeds(rec, [], [demand], [demand]), keep


def feed(feeds: Any, node_events: list[bytes], pod_events: list[bytes]) -> None:
    names = set()
    for raw in node_events:
        obj = json.loads(raw)
        names.add(obj["metadata"]["name"])
        feeds.node("ADDED", obj)
    feeds.nodes_listed(names)
    keys = set()
    for raw in pod_events:
        obj = json.loads(raw)
        keys.add(obj["metadata"]["uid"])  # the watch's key of a namespaced object (k8s.watch.object_key)
        feeds.pod("ADDED", obj)
    feeds.pods_listed(keys)


class Nothing:
    """The floor: every event decoded and handed to nothing."""

    def node(self, type_: str, obj: Any) -> None: ...
    def nodes_listed(self, names: set[str]) -> None: ...
    def pod(self, type_: str, obj: Any) -> None: ...
    def pods_listed(self, keys: set[str]) -> None: ...


def child(args: argparse.Namespace) -> None:
    node_events, pod_events = events(args.nodes, args.pods, args.pending)
    n_events = len(node_events) + len(pod_events)
    import gpushare.handlers.watch  # noqa: F401 - imports outside the timings

    out: dict[str, float] = {}
    gc.collect()
    t0 = time.process_time()
    feed(Nothing(), node_events, pod_events)
    out["floor_us_per_event"] = (time.process_time() - t0) / n_events * 1e6
    feeds, keep = model()
    gc.collect()
    t0 = time.process_time()
    feed(feeds, node_events, pod_events)
    out["cpu_us_per_event"] = (time.process_time() - t0) / n_events * 1e6
    del feeds, keep
    gc.collect()
    tracemalloc.start(1)
    before = tracemalloc.take_snapshot()
    feeds, keep = model()
    feed(feeds, node_events, pod_events)
    gc.collect()
    after = tracemalloc.take_snapshot()
    retained = sum(s.size_diff for s in after.compare_to(before, "filename"))
    out["retained_mib"] = retained / 2**20
    out["retained_b_per_object"] = retained / n_events
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000, help="Running GPU pods, bound round-robin")
    parser.add_argument("--pending", type=int, default=500, help="Pending GPU pods aimed at a pool")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--operator-src", action="append", default=[], metavar="NAME=DIR",
                        help="a side: its name and the source root of its gpushare package (repeat)")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    sides = [s.split("=", 1) for s in args.operator_src] or [["this tree", "operator"]]
    for side in sides:
        # A tree's root instead of its operator/ would silently run this checkout's package.
        if len(side) != 2 or not (Path(side[1]) / "gpushare" / "__init__.py").is_file():
            parser.error(f"--operator-src {'='.join(side)}: want NAME=DIR, DIR holding the gpushare package")
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for name, src in order:
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
            cmd = [sys.executable, __file__, "--child", "--nodes", str(args.nodes), "--pods", str(args.pods),
                   "--pending", str(args.pending)]  # fmt: skip
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {name}: {results[name][-1]}", file=sys.stderr, flush=True)

    def cell(rows: list[dict[str, float]], key: str, fmt: str) -> str:
        values = [row[key] for row in rows]
        return f"{statistics.median(values):{fmt}} ({min(values):{fmt}} .. {max(values):{fmt}})"

    print(f"{args.nodes} nodes, {args.pods} Running GPU pods, {args.pending} Pending GPU pods; "
          f"{args.rounds} rounds, sides alternated; median (min .. max)\n")  # fmt: skip
    print("| side | CPU µs / event | floor (decode only) | the model's own (less the floor) | model retains MiB | bytes / object |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        for row in rows:
            row["own_us_per_event"] = row["cpu_us_per_event"] - row["floor_us_per_event"]
        print(f"| {name} | {cell(rows, 'cpu_us_per_event', '.1f')} | {cell(rows, 'floor_us_per_event', '.1f')} "
              f"| {cell(rows, 'own_us_per_event', '.1f')} | {cell(rows, 'retained_mib', '.2f')} "
              f"| {cell(rows, 'retained_b_per_object', '.0f')} |")  # fmt: skip


if __name__ == "__main__":
    main()
