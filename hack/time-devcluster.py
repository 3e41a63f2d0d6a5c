"""Time warm starts of the local control plane and its memory once running with fake nodes.

Usage: .venv/bin/python hack/time-devcluster.py [runs] [nodes]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from gpushare.devcluster import DevCluster, create_gpu_nodes, ensure_device_plugin_daemonset
from gpushare.k8s.client import make_api_client


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def populate(kubeconfig: str, nodes: int) -> float:
    t = time.monotonic()
    async with await make_api_client(kubeconfig) as api:
        await ensure_device_plugin_daemonset(api)
        await create_gpu_nodes(api, nodes, prefix="bench")
    return time.monotonic() - t


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    starts, stops = [], []
    for i in range(runs):
        t0 = time.monotonic()
        dev = DevCluster()
        info = dev.start()
        starts.append(time.monotonic() - t0)
        if i == runs - 1:
            took = asyncio.run(populate(str(info.kubeconfig), nodes))
            time.sleep(15)  # let the components settle
            print(f"{nodes} fake nodes + device-plugin DS ready in {took:.1f}s; RSS after 15s:")
            for name, pid in info.pids.items():
                print(f"  {name:26s} {rss_mib(pid):7.1f} MiB")
            print(f"  {'total':26s} {sum(rss_mib(p) for p in info.pids.values()):7.1f} MiB")
        t1 = time.monotonic()
        dev.stop()
        stops.append(time.monotonic() - t1)
    print(
        "start to ready (s): " + ", ".join(f"{s:.1f}" for s in starts),
        f"median {statistics.median(starts):.1f}",
    )
    print("stop (s): " + ", ".join(f"{s:.1f}" for s in stops), f"median {statistics.median(stops):.1f}")


if __name__ == "__main__":
    main()
