"""Benchmark of demand and lending (issue 23) on the local control plane (kwok nodes).

N-1 idle cgpu nodes form pool ``lender`` (``spec.lending: {to: [core], keepIdle: 1}``), one node
pool ``core`` (computeAllocation), filled by a running pod; both with ``devicePlugin.restart:
Never`` and static GPU resources (no plugin pods: this measures the demand loop, not restarts).
With the operator started and both pools Ready:

1. steady state with lending on: writes of any kind during ``--steady`` seconds (expect 0);
2. a core pod is created; kube-scheduler marks it Unschedulable; the time from this process
   seeing that (a pod watch) to seeing the loan's annotation on a node (a node watch), and from
   the pod's creation;
3. the operator's writes during (2), and its peak RSS.

Usage: ``python bench/bench_lending.py --nodes 1000 [--steady 20]``. Prints one Markdown table;
nothing is asserted. The load average is printed (the machine may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from kubernetes_asyncio import client, watch

from gpushare import constants as c
from gpushare.devcluster import DevCluster
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.fakes import POOL_LABEL, create_gpu_nodes
from gpushare.k8s.client import make_api_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_operator import metrics, peak_rss_mib, total, wait

REPO = Path(__file__).resolve().parents[1]


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def writes(port: int) -> float:
    return total(metrics(port), "gpushare_api_writes_total")


async def ready(custom: client.CustomObjectsApi, name: str) -> bool:
    obj = await custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(x["type"] == "Ready" and x["status"] == "True" for x in conds)


async def run(n: int, steady: float) -> dict[str, Any]:
    result: dict[str, Any] = {"nodes": n, "load_start": loadavg()}
    workdir = Path(tempfile.mkdtemp(prefix=f"gpushare-bench-lending-{n}-"))
    limit = 300 + n * 0.6
    with DevCluster(workdir) as info:
        api = await make_api_client(str(info.kubeconfig))
        async with api:
            await install_crd_files(api, sorted((REPO / "crds").glob("*.yaml")))
            t0 = time.monotonic()
            await create_gpu_nodes(
                api, n - 1, prefix="lend", pool_labels={POOL_LABEL: "np-lend"}, timeout_s=limit
            )
            (core_node,) = await create_gpu_nodes(
                api,
                1,
                prefix="core",
                pool_labels={POOL_LABEL: "np-core"},
                core_percentage=True,
                timeout_s=limit,
            )
            print(f"[{n}] nodes created in {time.monotonic() - t0:.1f}s (load {loadavg()})", flush=True)
            port = _free_port()
            log = (workdir / "operator.log").open("wb")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gpushare", "run", "--kubeconfig", str(info.kubeconfig),
                "--metrics-port", str(port), "--log-format", "json", stdout=log, stderr=log,
            )  # fmt: skip
            try:
                custom = client.CustomObjectsApi(api)
                core = client.CoreV1Api(api)
                never = {"devicePlugin": {"restart": "Never"}}
                for name, np, extra in (
                    (
                        "lender",
                        "np-lend",
                        {"lending": {"to": ["core"], "keepIdle": 1, "returnAfterSeconds": 600}},
                    ),
                    ("core", "np-core", {"computeAllocation": True}),
                ):
                    body = {
                        "apiVersion": c.API_VERSION,
                        "kind": c.KIND,
                        "metadata": {"name": name},
                        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: np}}, **never, **extra},
                    }
                    await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)
                await wait(lambda: ready(custom, "lender"), limit, "lender Ready", interval=0.5)
                await wait(lambda: ready(custom, "core"), limit, "core Ready", interval=0.5)
                limits = {c.RES_GPU_MEM: "16", c.RES_GPU_CORE: "100"}
                fill = {
                    "metadata": {"name": "fill"},
                    "spec": {
                        "nodeName": core_node,
                        "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
                    },
                }
                await core.create_namespaced_pod("default", cast(Any, fill))
                await asyncio.sleep(5)  # the demand loop settles (status.demand written once)
                before = writes(port)
                await asyncio.sleep(steady)
                result["steady_s"] = steady
                result["steady_writes"] = writes(port) - before
                print(
                    f"[{n}] steady with lending on: {result['steady_writes']:.0f} writes in {steady:.0f}s",
                    flush=True,
                )

                before = writes(port)
                seen: dict[str, float] = {}
                job = {
                    "metadata": {"name": "wait", "labels": {"bench": "lending"}},
                    "spec": {
                        "nodeSelector": {c.LABEL_POOL: "core"},
                        "containers": [
                            {
                                "name": "c",
                                "image": "x",
                                "resources": {"limits": {c.RES_GPU_MEM: "4", c.RES_GPU_CORE: "50"}},
                            }
                        ],
                    },
                }

                async def pods() -> None:
                    w = watch.Watch()
                    async for ev in w.stream(
                        core.list_namespaced_pod, "default", label_selector="bench=lending"
                    ):
                        pod = ev["object"]
                        for cond in pod.status.conditions or []:
                            if cond.type == "PodScheduled" and cond.reason == "Unschedulable":
                                seen.setdefault("unschedulable", time.monotonic())

                async def nodes() -> None:
                    w = watch.Watch()
                    async for ev in w.stream(core.list_node, label_selector=f"{POOL_LABEL}=np-lend"):
                        if c.ANNOTATION_LOAN in (ev["object"].metadata.annotations or {}):
                            seen.setdefault("loan", time.monotonic())

                tasks = [asyncio.create_task(pods()), asyncio.create_task(nodes())]
                await asyncio.sleep(2)  # both watches running
                seen["created"] = time.monotonic()
                await core.create_namespaced_pod("default", cast(Any, job))

                async def both() -> bool:
                    return "loan" in seen and "unschedulable" in seen

                await wait(both, limit, "the pod Unschedulable and a loan written", interval=0.05)
                for t in tasks:
                    t.cancel()
                result["unschedulable_to_loan_s"] = seen["loan"] - seen["unschedulable"]
                result["created_to_loan_s"] = seen["loan"] - seen["created"]
                await asyncio.sleep(3)
                result["loan_writes"] = writes(port) - before
                result["peak_rss_mib"] = peak_rss_mib(proc.pid)
            finally:
                proc.terminate()
                await proc.wait()
    result["load_end"] = loadavg()
    return result


def _free_port() -> int:
    from gpushare.devcluster.cluster import free_port

    return free_port()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--steady", type=float, default=20.0)
    args = parser.parse_args()
    r = asyncio.run(run(args.nodes, args.steady))
    print("| nodes | writes in steady state (lending on) | unschedulable → loan written | pod created → loan | "
          "writes for it | peak RSS | load avg start → end |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| {r['nodes']} | {r['steady_writes']:.0f} in {r['steady_s']:.0f} s | {r['unschedulable_to_loan_s']:.2f} s | "
        f"{r['created_to_loan_s']:.2f} s | {r['loan_writes']:.0f} | {r['peak_rss_mib']:.0f} MiB | "
        f"{r['load_start']} → {r['load_end']} |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
