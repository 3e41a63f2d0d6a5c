"""How long the real-node tier takes to come up (issue 20): ``DevCluster(real_nodes=1).start()``
(etcd, kube-apiserver, kcm, scheduler, kwok, containerd, a real kubelet, images imported) until
the real node is Ready, against the same control plane with kwok only, in alternating runs.

Usage: ``python bench/bench_realnode.py [--runs 3]`` (``make bench``; root and cgroups needed for
the real node: without them it says so in one line and times kwok only). Prints a Markdown table.
Nothing is asserted: these are measurements.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpushare.devcluster import DevCluster
from gpushare.devcluster.realnode import RealNodeUnavailable, preflight


def timed_start(real_nodes: int) -> float:
    """Seconds from ``start()`` to a ready cluster (with its real node Ready); then it is stopped."""
    dev = DevCluster(Path(tempfile.mkdtemp(prefix="gpushare-bench-realnode-")), real_nodes=real_nodes)
    started = time.monotonic()
    try:
        dev.start()
        return time.monotonic() - started
    finally:
        dev.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="starts of each kind")
    args = parser.parse_args()
    kinds = {"kwok only": 0, "with one real kubelet node": 1}
    try:
        preflight(1)
    except RealNodeUnavailable as exc:
        print(f"bench_realnode: no real node on this host ({exc}); timing kwok only", file=sys.stderr)
        del kinds["with one real kubelet node"]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for run in range(args.runs):
        for kind, n in kinds.items():
            times[kind].append(timed_start(n))
            print(f"# run {run + 1}: {kind} ready in {times[kind][-1]:.1f} s", file=sys.stderr)
    print("| cluster up to ready | runs | median | min | max |")
    print("|---|---:|---:|---:|---:|")
    for kind, values in times.items():
        print(
            f"| {kind} | {len(values)} | {statistics.median(values):.1f} s | {min(values):.1f} s |"
            f" {max(values):.1f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
