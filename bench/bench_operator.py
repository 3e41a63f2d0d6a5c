"""Benchmark of the gpushare operator on the local control plane (kwok nodes), issue 4 "Measure".

For each node count N (one ACK node pool of N fake GPU nodes, each with a device-plugin pod):

1. labels only: ``kubectl label nodes -l <pool> ... --overwrite`` (timed), labels removed again;
   then a GPUSharePool with ``devicePlugin.restart: Never``, timed from creation to Ready=True.
2. API writes per node during (1), from the operator's metrics (expect 1 label patch per node).
3. steady state: writes of any kind during --steady seconds with nothing changing (expect 0).
4. pool deletion (cleanup Restore) timed until the finalizer is gone.
5. full rollout: ``kubectl label`` + ``kubectl delete pod`` of the plugin pods, timed until every
   plugin pod is replaced and Ready; then a pool with restarts at ``maxUnavailable: 100%``,
   timed from creation to Ready=True (every plugin replaced and Ready).
6. peak resident memory of the operator process (VmHWM).

Usage: ``python bench/bench_operator.py --nodes 100,1000 [--steady 60] [--json out.json]``
(``make bench``). Prints a Markdown table. Nothing is asserted: these are measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import DevCluster
from gpushare.devcluster.cluster import free_port
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.fakes import (
    POOL_LABEL,
    create_gpu_nodes,
    ensure_device_plugin_daemonset,
    pod_running_and_ready,
)
from gpushare.k8s.client import make_api_client

REPO = Path(__file__).resolve().parents[1]
NODEPOOL = "np-bench"
LABELS = {
    c.LABEL_CGPU: "true",
    c.LABEL_DISABLE_ISOLATION: "false",
    c.LABEL_SCHEDULE: "cgpu",
    c.LABEL_PLACEMENT: "binpack",
}
PLUGIN_SELECTOR = ",".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())


def kubectl(kubeconfig: Path, *args: str) -> float:
    """Run kubectl; return its wall time in seconds."""
    start = time.monotonic()
    subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("gpushare_"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def total(samples: dict[str, float], prefix: str, **labels: str) -> float:
    return sum(
        v
        for k, v in samples.items()
        if k.startswith(prefix + "{") and all(f'{lk}="{lv}"' in k for lk, lv in labels.items())
    )


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


#: kwok under heavy load now and then leaves a bound pod Pending for good; such a pod is deleted
#: (its DaemonSet recreates it) after this long, and reported.
STUCK_AFTER_S = 60.0
kicked: list[str] = []


async def plugin_pods_ready(api: client.ApiClient, n: int, after: float | None = None) -> bool:
    core = client.CoreV1Api(api)
    pods = await core.list_namespaced_pod(c.DEFAULT_PLUGIN_NAMESPACE, label_selector=PLUGIN_SELECTOR)
    ok = 0
    now = time.time()
    for pod in pods.items:
        if not pod_running_and_ready(pod):
            created = pod.metadata.creation_timestamp.timestamp()
            stuck = pod.status.phase == "Pending" and pod.spec.node_name and now - created > STUCK_AFTER_S
            if stuck and pod.metadata.deletion_timestamp is None:
                kicked.append(pod.metadata.name)
                await core.delete_namespaced_pod(pod.metadata.name, c.DEFAULT_PLUGIN_NAMESPACE)
            continue
        if after is not None and pod.metadata.creation_timestamp.timestamp() < after:
            continue
        ok += 1
    return ok >= n


async def wait(check: Any, limit_s: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + limit_s
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


class Pool:
    def __init__(self, api: client.ApiClient, name: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.name = name

    async def create(self, **spec: Any) -> None:
        body = {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": self.name},
            "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: NODEPOOL}}, **spec},
        }
        await self.custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)

    async def ready(self) -> bool:
        obj = await self.custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, self.name)
        status = obj.get("status") or {}
        if status.get("observedGeneration") != obj["metadata"]["generation"]:
            return False
        return any(x["type"] == "Ready" and x["status"] == "True" for x in status.get("conditions") or [])

    async def gone(self) -> bool:
        try:
            await self.custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, self.name)
        except client.exceptions.ApiException as exc:
            return exc.status == 404
        return False

    async def delete(self) -> None:
        await self.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, self.name)


def label_args() -> list[str]:
    return [f"{k}={v}" for k, v in LABELS.items()] + [f"{c.LABEL_POOL}=kubectl"]


def unlabel_args() -> list[str]:
    return [f"{k}-" for k in (*LABELS, c.LABEL_POOL)]


async def run_size(n: int, steady: float, log: Any) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"gpushare-bench-{n}-"))
    result: dict[str, Any] = {"nodes": n}
    with DevCluster(workdir) as info:
        kubeconfig = info.kubeconfig
        api = await make_api_client(str(kubeconfig))
        async with api:
            await install_crd_files(api, sorted((REPO / "crds").glob("*.yaml")))
            await ensure_device_plugin_daemonset(api)
            t0 = time.monotonic()
            await create_gpu_nodes(api, n, prefix="bench", pool_labels={POOL_LABEL: NODEPOOL}, timeout_s=600)
            await wait(lambda: plugin_pods_ready(api, n), 900, f"{n} device plugin pods Ready")
            log(f"[{n}] {n} nodes and plugin pods ready in {time.monotonic() - t0:.1f}s")

            port = free_port()
            op_log = workdir / "operator.log"
            with op_log.open("wb") as out:
                proc = subprocess.Popen(  # noqa: ASYNC220 - started once, never waited on here
                    [sys.executable, "-m", "gpushare", "run", "--kubeconfig", str(kubeconfig),
                     "--metrics-port", str(port), "--log-format", "json"],
                    stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
            try:
                await wait(lambda: _serving(port), 60, "operator metrics")
                await asyncio.sleep(3)  # indexes filled

                # 1. labels only
                selector = f"{POOL_LABEL}={NODEPOOL}"
                result["kubectl_label_s"] = kubectl(
                    kubeconfig, "label", "nodes", "-l", selector, *label_args(), "--overwrite"
                )
                kubectl(kubeconfig, "label", "nodes", "-l", selector, *unlabel_args())
                await asyncio.sleep(2)
                before = metrics(port)
                pool = Pool(api, "bench-labels")
                t = time.monotonic()
                await pool.create(devicePlugin={"restart": "Never"})
                await wait(pool.ready, 900, "pool Ready (labels only)", interval=0.05)
                result["operator_labels_s"] = time.monotonic() - t
                after = metrics(port)
                result["label_patches_per_node"] = (
                    total(after, "gpushare_label_patches_total")
                    - total(before, "gpushare_label_patches_total")
                ) / n
                result["node_writes_per_node"] = (
                    total(after, "gpushare_api_writes_total", resource="nodes")
                    - total(before, "gpushare_api_writes_total", resource="nodes")
                ) / n
                k_s, o_s = result["kubectl_label_s"], result["operator_labels_s"]
                log(f"[{n}] labels: kubectl {k_s:.2f}s, operator {o_s:.2f}s")

                # 3. steady state
                await asyncio.sleep(5)  # let the last status write land
                quiet = metrics(port)
                await asyncio.sleep(steady)
                later = metrics(port)
                result["steady_s"] = steady
                result["steady_writes"] = total(later, "gpushare_api_writes_total") - total(
                    quiet, "gpushare_api_writes_total"
                )
                log(f"[{n}] steady state: {result['steady_writes']:.0f} writes in {steady:.0f}s")

                # 4. cleanup
                t = time.monotonic()
                await pool.delete()
                await wait(pool.gone, 900, "pool deleted", interval=0.05)
                result["operator_restore_s"] = time.monotonic() - t
                kubectl(kubeconfig, "label", "nodes", "-l", selector, f"{c.LABEL_SCHEDULE}-")

                # 5. full rollout
                t = time.monotonic()
                start_wall = time.time()
                kubectl(kubeconfig, "label", "nodes", "-l", selector, *label_args(), "--overwrite")
                kubectl(
                    kubeconfig,
                    "delete",
                    "pods",
                    "-n",
                    c.DEFAULT_PLUGIN_NAMESPACE,
                    "-l",
                    PLUGIN_SELECTOR,
                    "--wait=false",
                )
                await wait(
                    lambda: plugin_pods_ready(api, n, after=int(start_wall)),
                    900,
                    "plugin pods replaced",
                    interval=0.25,
                )
                result["kubectl_rollout_s"] = time.monotonic() - t
                kubectl(kubeconfig, "label", "nodes", "-l", selector, *unlabel_args())
                await asyncio.sleep(2)
                pool = Pool(api, "bench-rollout")
                t = time.monotonic()
                await pool.create(rollout={"maxUnavailable": "100%"})

                async def ready_kicking() -> bool:
                    await plugin_pods_ready(api, 0)  # only to unstick kwok, see STUCK_AFTER_S
                    return await pool.ready()

                await wait(ready_kicking, 900, "pool Ready (rollout)", interval=0.25)
                result["operator_rollout_s"] = time.monotonic() - t
                k_s, o_s = result["kubectl_rollout_s"], result["operator_rollout_s"]
                log(f"[{n}] rollout: kubectl {k_s:.2f}s, operator {o_s:.2f}s")
                result["operator_peak_rss_mib"] = peak_rss_mib(proc.pid)
                await pool.delete()
                await wait(pool.gone, 900, "pool deleted", interval=0.1)
            finally:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return result


async def _serving(port: int) -> bool:
    try:
        metrics(port)
    except OSError:
        return False
    return True


COLUMNS = (
    ("nodes", "{nodes}"),
    ("kubectl label", "{kubectl_label_s:.2f} s"),
    ("operator, labels only (create → Ready)", "{operator_labels_s:.2f} s"),
    ("ratio", "{labels_ratio:.2f}x"),
    ("label patches / node", "{label_patches_per_node:.2f}"),
    ("node writes / node", "{node_writes_per_node:.2f}"),
    ("writes in steady state", "{steady_writes:.0f} in {steady_s:.0f} s"),
    ("restore (delete → gone)", "{operator_restore_s:.2f} s"),
    ("kubectl label + delete plugin pods (→ all Ready)", "{kubectl_rollout_s:.2f} s"),
    ("operator rollout, maxUnavailable 100% (create → Ready)", "{operator_rollout_s:.2f} s"),
    ("ratio", "{rollout_ratio:.2f}x"),
    ("operator peak RSS", "{operator_peak_rss_mib:.0f} MiB"),
)


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| " + " | ".join(name for name, _ in COLUMNS) + " |", "|" + "---:|" * len(COLUMNS)]
    for r in results:
        values = {
            **r,
            "labels_ratio": r["operator_labels_s"] / r["kubectl_label_s"],
            "rollout_ratio": r["operator_rollout_s"] / r["kubectl_rollout_s"],
        }
        rows.append("| " + " | ".join(fmt.format(**values) for _, fmt in COLUMNS) + " |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="100,1000", help="comma-separated node counts")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state to watch")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results = [asyncio.run(run_size(int(n), args.steady, log)) for n in args.nodes.split(",")]
    if kicked:
        log(f"kwok left {len(kicked)} plugin pod(s) Pending; deleted them for the DaemonSet to recreate")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"cpus: {os.cpu_count()}; kwok nodes, local kube-apiserver/etcd/kcm/scheduler")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
