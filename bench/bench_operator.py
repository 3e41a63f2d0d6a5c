"""Benchmark of the gpushare operator on the local control plane (kwok nodes), issue 10.

For each node count N (one ACK node pool of N fake GPU nodes, each with a device-plugin pod; the
nodes carry ``bench-half=a|b`` so that two pools can split them), in one run:

1. labels only, three ways, each timed until every node carries the labels:
   ``kubectl label nodes -l <pool> ... --overwrite``; a plain async loop (one JSON merge patch
   per node, ``--loop-concurrency`` in flight, the baseline the operator should match); the
   operator: a GPUSharePool with ``devicePlugin.restart: Never``, timed from creation to its
   first node write, to every node labelled (a node watch in this process) and to Ready=True.
   The floors are measured fairly: kubectl and the loop run while no operator process is alive
   (an operator watching every Node would slow them down on a shared machine), and the loop
   reads its answers as raw JSON on the same kind of client as the operator's. The loop is timed
   twice: until its last patch returned, and until the benchmark's node watch saw every node
   labelled, as the operator is timed (÷ loop uses the latter: the same observer for both).
   Then the operator is started, and the pool is created once its log says it has listed every
   Node and Pod. Each round also prints CPU seconds until all were labelled: this process's
   during the loop (its patches and replies, and the observer's watch) against the operator
   process's plus this process's (the observer) during the operator's run: on a shared machine
   the time ratio moves with the load, the CPU ratio much less. ``--rounds K`` repeats this
   comparison K times on the same cluster (the loop with no operator alive, then a fresh
   operator and a pool, deleted again), so that a run on a shared machine gives a range of
   ratios measured side by side; ``--labels-only`` stops after it (steps 1, 2 and 7).
   ``--operator-src`` given more than once (an A/B of commits): the rounds take the sources in
   turn on the one cluster, and a table per source gives the median of its rounds (one cluster
   for both sides: at 5000 nodes the loop's own time differs by half from one fresh cluster to
   the next).
2. writes per node during (1), from the operator's metrics (expect exactly 1 label patch).
3. steady state: writes of any kind during --steady seconds with nothing changing (expect 0).
4. pool deletion (cleanup Restore) timed until the finalizer is gone.
5. two pools of N/2 (the two halves) created together, timed until both are Ready.
6. full rollout: ``kubectl label`` + ``kubectl delete pod`` of the plugin pods, timed until every
   plugin pod is replaced and Ready; then a pool with restarts at ``maxUnavailable: 100%``,
   timed from creation to Ready=True (every plugin replaced and Ready).
7. peak resident memory of the operator process (VmHWM).

``--nvidia`` (with ``--labels-only``): the same comparison for an NVIDIA pool. The nodes are kwok
nodes of NVIDIA's simulated plugin (``create_gpu_nodes(plugin="nvidia")``: 2 x A100-SXM4-40GB each,
GPU Feature Discovery's and the agent's labels, a stand-in of NVIDIA's DaemonSet and its ConfigMap
of named configs); the pool is TimeSlicing with 4 replicas, so the operator writes two labels per
node (``nvidia.com/device-plugin.config`` and ``gpushare.io/pool``), as the loop does (the loop
names ``ts4``, a key of the ConfigMap with the same document, so that the simulated plugin does the
same work for both), and the pool is Ready once every node advertises 4 x 2 ``nvidia.com/gpu``.
The pool's ``rollout.maxUnavailable`` is 100%, as the loop writes every node at once and the nodes
run no pod (with the default of 1, the operator waits for each node to advertise its new count
before the next: 100 nodes took 71 s after the wait here, about 0.7 s a node).
The operator writes its config into the ConfigMap first and labels no node before
``configPropagationSeconds`` have passed: ``--config-propagation`` (default 90, what a user keeps at
1000 or 5000 nodes: the wait covers each kubelet's own sync of its pods' ConfigMap volumes, the
``syncFrequency`` of 1 minute plus up to half of it in jitter, which does not grow with the number
of nodes; a shorter one lets some config-manager fail on a name it cannot see yet, and the node
falls back to the default config). ÷ loop is then taken on the labelling after that wait
(all labelled minus the wait) and CPU from a second before its end; the output says so, with
the operator's CPU during the wait.

``--mig`` (with ``--labels-only``): the same for a MIG pool over the same nodes (NVIDIA's MIG
manager simulated beside the plugin, its ConfigMap with the chart's configs; every node starts at
``nvidia.com/mig.config=all-disabled``). The pool's geometry is that of the chart's
``all-balanced`` (2 x 1g.5gb, 2g.10gb, 3g.20gb per GPU, advertised under the mixed strategy), so
the operator writes three labels per node (``nvidia.com/device-plugin.config``,
``nvidia.com/mig.config`` and ``gpushare.io/pool``) and the loop the same three, naming a plugin
key of the same document as the operator's and the chart's ``all-1g.5gb``: the simulated manager
and plugin do the same work for both (pending, success, the plugin advertising the slices), and
what a node advertised under the loop's geometry is never the pool's. Between the ways every node
is set back to ``all-disabled`` and the run waits until the manager reports ``success`` for it.
The pool is Ready once every node reports ``success`` for the pool's config and advertises 2 x
(2, 1, 1) ``nvidia.com/mig-*``; ``--ready-limit`` bounds that wait (past it, Ready is reported nan
and the nodes Ready then are logged). ``--config-propagation`` as for ``--nvidia``: the operator
writes its two configs (the plugin's key, the MIG manager's entry of ``config.yaml``) in one
pass and waits for their propagation side by side.

Usage: ``python bench/bench_operator.py --nodes 1000,3000 [--steady 60] [--json out.json]``
or ``python bench/bench_operator.py --nodes 1000 --labels-only --rounds 3``
or ``python bench/bench_operator.py --nodes 5000 --labels-only --rounds 4 --operator-src A --operator-src B``
(``make bench``). Prints Markdown tables. Nothing is asserted: these are measurements. The load
average at the start and end of each size is printed (the machine may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpushare import constants as c
from gpushare.api.v1alpha1 import Nvidia
from gpushare.backends.nvidia import config as nvidia_config
from gpushare.devcluster import DevCluster
from gpushare.devcluster.cluster import free_port
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.demo import NVIDIA_CONFIGS, NVIDIA_NODE_POOL
from gpushare.devcluster.fakes import (
    POOL_LABEL,
    create_gpu_nodes,
    ensure_device_plugin_daemonset,
    ensure_mig_manager,
    ensure_nvidia_plugin,
)
from gpushare.devcluster.nvidiasim import SIMULATED_VALUE as NVIDIA_PLUGIN
from gpushare.gpu.fake import FakeGPU
from gpushare.k8s.client import make_api_client
from gpushare.policy import PodView

REPO = Path(__file__).resolve().parents[1]
NODEPOOL = "np-bench"
LABELS = {
    c.LABEL_CGPU: "true",
    c.LABEL_DISABLE_ISOLATION: "false",
    c.LABEL_SCHEDULE: "cgpu",
    c.LABEL_PLACEMENT: "binpack",
}
PLUGIN_SELECTOR = ",".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())


@dataclass(frozen=True)
class Backend:
    """What differs between an ACK and an NVIDIA pool in the labels comparison."""

    #: The labels the loop writes (with ``gpushare.io/pool``), as many as the operator writes.
    labels: dict[str, str]
    plugin_namespace: str
    plugin_selector: str
    #: The pool's spec beside its nodeSelector.
    pool_spec: dict[str, Any]
    #: Seconds the operator waits before its first node label (the config's propagation).
    wait_s: float = 0.0
    #: Labels set back to these values between the ways (not removed); the nodes start with them.
    reset: tuple[tuple[str, str], ...] = ()
    #: The named plugin configs beside NVIDIA's (the loop's key), and whether the MIG manager runs.
    plugin_configs: tuple[tuple[str, str], ...] = ()
    mig: bool = False


ACK = Backend(LABELS, c.DEFAULT_PLUGIN_NAMESPACE, PLUGIN_SELECTOR, {"devicePlugin": {"restart": "Never"}})


def nvidia_backend(propagation_s: int) -> Backend:
    spec = {"strategy": "TimeSlicing", "replicas": 4, "configPropagationSeconds": propagation_s}
    selector = ",".join(f"{k}={v}" for k, v in c.NVIDIA_PLUGIN_LABELS.items())
    # every node at once, as the loop writes them: the nodes run no pod, so nothing is disrupted
    pool = {"nvidia": spec, "rollout": {"maxUnavailable": "100%"}}
    return Backend({c.LABEL_NVIDIA_CONFIG: "ts4"}, c.NVIDIA_PLUGIN_NAMESPACE, selector, pool, propagation_s)


#: A MIG pool's geometry: that of the chart's ``all-balanced`` (per GPU), under the mixed strategy.
MIG_PROFILES = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
#: The loop's MIG config: another geometry of the chart's (7 x 1g.5gb per GPU), the same work for the
#: simulated manager and plugin, whose devices are never the pool's (what a node advertised under it
#: cannot be taken for the pool's geometry).
MIG_CHART_CONFIG = "all-1g.5gb"
MIG_DISABLED = "all-disabled"


def mig_backend(propagation_s: int) -> Backend:
    spec = {
        "strategy": "MIG",
        "mig": {"geometry": [{"profiles": MIG_PROFILES}]},
        "configPropagationSeconds": propagation_s,
    }
    # the plugin's config of such a pool, under a key of the loop's own (the same document)
    document = nvidia_config.document(Nvidia.model_validate({"strategy": "MIG", "mig": spec["mig"]}))
    selector = ",".join(f"{k}={v}" for k, v in c.NVIDIA_PLUGIN_LABELS.items())
    pool = {"nvidia": spec, "rollout": {"maxUnavailable": "100%"}}
    labels = {c.LABEL_NVIDIA_CONFIG: "mig-mixed", c.LABEL_MIG_CONFIG: MIG_CHART_CONFIG}
    # Two keys (the plugin's config, the MIG manager's), written in one pass: one propagation wait.
    return Backend(
        labels, c.NVIDIA_PLUGIN_NAMESPACE, selector, pool, propagation_s,
        reset=((c.LABEL_MIG_CONFIG, MIG_DISABLED),), plugin_configs=(("mig-mixed", document),), mig=True,
    )  # fmt: skip


#: ``--ready-limit``: seconds to wait for the pool's Ready after its labels (0: the default).
READY_LIMIT: list[float] = [0.0]
#: The backend of this run (``--nvidia``, ``--mig``).
BACKEND: list[Backend] = [ACK]


async def kubectl(kubeconfig: Path, *args: str) -> float:
    """Run kubectl (without blocking the node watch); return its wall time in seconds."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(kubeconfig), *args, stdout=asyncio.subprocess.DEVNULL
    )
    if await proc.wait() != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed")
    return time.monotonic() - start


def metrics(port: int) -> list[Sample]:
    """Every sample the operator exposes (parsed with prometheus_client's parser)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


#: kwok under heavy load now and then leaves a bound pod Pending (or Running, not Ready) for good;
#: such a pod is deleted
#: (its DaemonSet recreates it) after this long, and reported.
STUCK_AFTER_S = 60.0
kicked: list[str] = []


async def plugin_pods_ready(api: client.ApiClient, n: int, after: float | None = None) -> bool:
    """At least ``n`` plugin pods Running and Ready (created after ``after``); read as raw JSON
    (at 5000 pods, client models cost the benchmark seconds of CPU per poll) into the operator's
    own ``PodView``."""
    core = client.CoreV1Api(api)
    backend = BACKEND[0]
    resp: Any = await core.list_namespaced_pod(
        backend.plugin_namespace, label_selector=backend.plugin_selector, _preload_content=False
    )
    try:
        pods = [PodView.from_obj(p) for p in json.loads(await resp.read())["items"]]
    finally:
        resp.release()
    ok = 0
    now = time.time()
    for pod in pods:
        created = datetime.fromisoformat(pod.created).timestamp()
        if pod.deletion or pod.phase != "Running" or not pod.ready:
            # Pending, or Running but never Ready (both seen with kwok under load)
            stuck = pod.phase in ("Pending", "Running") and pod.node_name and now - created > STUCK_AFTER_S
            if stuck and not pod.deletion:
                kicked.append(pod.name)
                await core.delete_namespaced_pod(pod.name, backend.plugin_namespace)
            continue
        if after is not None and created < after:
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

    async def ready_nodes(self) -> float:
        obj = await self.custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, self.name)
        return float(((obj.get("status") or {}).get("nodes") or {}).get("ready", 0))

    async def gone(self) -> bool:
        try:
            await self.custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, self.name)
        except client.exceptions.ApiException as exc:
            return exc.status == 404
        return False

    async def delete(self) -> None:
        await self.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, self.name)


def label_args() -> list[str]:
    return [f"{k}={v}" for k, v in BACKEND[0].labels.items()] + [f"{c.LABEL_POOL}=kubectl"]


def unlabel_args() -> list[str]:
    reset = dict(BACKEND[0].reset)
    return [f"{k}={reset[k]}" if k in reset else f"{k}-" for k in (*BACKEND[0].labels, c.LABEL_POOL)]


async def settled(api: client.ApiClient, selector: str, n: int) -> bool:
    """With ``--mig``: whether the MIG manager applied the reset config on ``n`` nodes (``success``
    for it); always True otherwise. Raw JSON. The plugin's advertising is not waited for (the
    simulated plugin re-advertised 1000 nodes in minutes, or stalled): what a node still advertises
    of the loop's geometry is never the pool's."""
    if not BACKEND[0].mig:
        return True
    resp: Any = await client.CoreV1Api(api).list_node(label_selector=selector, _preload_content=False)
    try:
        items = json.loads(await resp.read())["items"]
    finally:
        resp.release()
    want = dict(BACKEND[0].reset)
    done = 0
    for node in items:
        labels = node["metadata"].get("labels") or {}
        if all(labels.get(k) == v for k, v in want.items()):
            done += labels.get(c.LABEL_MIG_CONFIG_STATE) == "success"
    return done >= n


HALF = "bench-half"
#: The operator's log line once its Node and Pod watches have listed everything (handlers/watch.py).
LISTED = "Listed Nodes and Pods"
#: ``--operator-src``: the operator runs from this source root (e.g. an older commit's
#: ``git archive`` ``operator/``), put first on its PYTHONPATH; the benchmark itself does not.
#: Several: round i runs the operator from source i modulo their number (``source_of``).
OPERATOR_SRCS: list[Path] = []


def source_of(round_: int) -> Path | None:
    """The source root of the operator in round ``round_`` (1-based): the sources in turn."""
    return OPERATOR_SRCS[(round_ - 1) % len(OPERATOR_SRCS)] if OPERATOR_SRCS else None


class LabelWatch:
    """Counts nodes whose ``gpushare.io/pool`` label has a given value, from a raw node watch
    (JSON only, no client models: the bench shares the CPUs with what it measures).

    Entering it lists the nodes once and returns when the watch from that list's version is
    open, so that a write made right after is seen as soon as the apiserver sends it (before,
    it listed the nodes twice as client models and only then watched: at 1000 nodes on the
    loaded machine the first label written was seen seconds after it was written)."""

    def __init__(self, api: client.ApiClient, selector: str) -> None:
        self.core = client.CoreV1Api(api)
        self.selector = selector
        self.values: dict[str, str | None] = {}
        self.changed = asyncio.Event()
        self.watching = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LabelWatch:
        rv = await self._list()
        self._task = asyncio.create_task(self._run(rv))
        await asyncio.wait_for(self.watching.wait(), timeout=60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _list(self) -> str:
        resp: Any = await self.core.list_node(label_selector=self.selector, _preload_content=False)
        try:
            listed = json.loads(await resp.read())
        finally:
            resp.release()
        self.values = {
            str(node["metadata"]["name"]): (node["metadata"].get("labels") or {}).get(c.LABEL_POOL)
            for node in listed.get("items") or ()
        }
        self.changed.set()
        return str(listed["metadata"]["resourceVersion"])

    async def _run(self, rv: str = "") -> None:
        while True:  # the apiserver drops a watch that falls behind: list and watch again
            try:
                rv = rv or await self._list()
                rv = await self._watch(rv)
            except (client.exceptions.ApiException, OSError, ValueError, TimeoutError) as exc:
                print(f"node watch: {exc!r}; listing again", file=sys.stderr)
                rv = ""
                await asyncio.sleep(0.2)

    async def _watch(self, rv: str) -> str:
        """Follow the watch from ``rv``; returns the last resourceVersion ("" to list again)."""
        resp: Any = await self.core.list_node(
            label_selector=self.selector,
            watch=True,
            resource_version=rv,
            timeout_seconds=3600,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        self.watching.set()
        async with resp:
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    meta = event["object"].get("metadata") or {}
                    if event.get("type") == "ERROR":
                        return ""
                    rv = str(meta.get("resourceVersion") or rv)
                    if event.get("type") == "BOOKMARK":
                        continue
                    name = str(meta.get("name"))
                    if event.get("type") == "DELETED":
                        self.values.pop(name, None)
                    else:
                        self.values[name] = (meta.get("labels") or {}).get(c.LABEL_POOL)
                    self.changed.set()
        return rv

    def count(self, value: str | set[str]) -> int:
        wanted = {value} if isinstance(value, str) else value
        return sum(1 for v in self.values.values() if v in wanted)

    async def times(self, value: str | set[str], n: int, t0: float, limit_s: float) -> tuple[float, float]:
        """(seconds to the first node labelled, seconds to ``n`` labelled) since ``t0``."""
        first: float | None = None
        deadline = time.monotonic() + limit_s
        while True:
            have = self.count(value)
            if have and first is None:
                first = time.monotonic() - t0
            if have >= n:
                return first or 0.0, time.monotonic() - t0
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{have}/{n} nodes labelled {value}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=min(left, 1.0))


async def plain_loop(api: client.ApiClient, names: list[str], concurrency: int) -> float:
    """One JSON merge patch per node, ``concurrency`` in flight; seconds until all returned."""
    core = client.CoreV1Api(api)
    sem = asyncio.Semaphore(concurrency)
    body = {"metadata": {"labels": {**BACKEND[0].labels, c.LABEL_POOL: "loop"}}}

    async def one(name: str) -> None:
        async with sem:  # raw JSON, as the operator reads its writes (gpushare.k8s.cluster._json)
            resp: Any = await core.patch_node(  # type: ignore[call-arg]
                name, body, _content_type="application/merge-patch+json", _preload_content=False
            )
            try:
                json.loads(await resp.read())
            finally:
                resp.release()

    t = time.monotonic()
    await asyncio.gather(*(one(n) for n in names))
    return time.monotonic() - t


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def run_size(
    n: int,
    steady: float,
    log: Any,
    loop_concurrency: int,
    *,
    rollout: bool = True,
    labels_only: bool = False,
    extra_rounds: int = 0,
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"gpushare-bench-{n}-"))
    result: dict[str, Any] = {"nodes": n, "load_start": loadavg()}
    limit = 300 + n * 0.6  # generous: the machine is shared
    with DevCluster(workdir) as info:
        kubeconfig = info.kubeconfig
        api = await make_api_client(str(kubeconfig))
        async with api:
            await install_crd_files(api, sorted((REPO / "crds").glob("*.yaml")))
            await ensure_device_plugin_daemonset(api)
            nodes: dict[str, Any] = {}
            if BACKEND[0] is not ACK:
                await ensure_nvidia_plugin(api, {**NVIDIA_CONFIGS, **dict(BACKEND[0].plugin_configs)})
                if BACKEND[0].mig:
                    await ensure_mig_manager(api)
                gpu = FakeGPU(NVIDIA_NODE_POOL.gpu_name, NVIDIA_NODE_POOL.gpu_mem_mib, mig=False)
                nodes = {
                    "simulate_plugin": True,
                    "plugin": NVIDIA_PLUGIN,
                    "gpus": [gpu] * NVIDIA_NODE_POOL.gpus,
                    "extra_labels": dict(BACKEND[0].reset),
                }
            t0 = time.monotonic()
            half = n // 2
            names = await create_gpu_nodes(
                api,
                half,
                prefix="bench-a",
                pool_labels={POOL_LABEL: NODEPOOL, HALF: "a"},
                timeout_s=limit,
                **nodes,
            )
            names += await create_gpu_nodes(
                api,
                n - half,
                prefix="bench-b",
                pool_labels={POOL_LABEL: NODEPOOL, HALF: "b"},
                timeout_s=limit,
                **nodes,
            )
            await wait(lambda: plugin_pods_ready(api, n), limit, f"{n} device plugin pods Ready", interval=1)
            selector = f"{POOL_LABEL}={NODEPOOL}"
            await wait(lambda: settled(api, selector, n), limit, "the MIG manager's first pass", interval=1)
            log(f"[{n}] {n} nodes and plugin pods ready in {time.monotonic() - t0:.1f}s (load {loadavg()})")

            async def unlabel() -> None:
                await kubectl(kubeconfig, "label", "nodes", "-l", selector, *unlabel_args(), "--overwrite")
                await asyncio.sleep(2)
                await wait(
                    lambda: settled(api, selector, n), limit, f"{n} nodes back at {MIG_DISABLED}", interval=1
                )

            # 1a. the floors, with no operator process alive (it would watch every write they make);
            # the benchmark's own label watch runs, as it does while the operator is timed.
            async with LabelWatch(api, selector) as watch:
                result["kubectl_label_s"] = await kubectl(
                    kubeconfig, "label", "nodes", "-l", selector, *label_args(), "--overwrite"
                )
                await unlabel()
                result.update(await loop_floor(api, watch, names, loop_concurrency, limit))
                await unlabel()
            log(
                f"[{n}] labels, no operator running: kubectl {result['kubectl_label_s']:.2f}s, loop "
                f"{result['loop_label_s']:.2f}s (seen by the watch: {result['loop_seen_s']:.2f}s)"
            )

            proc, port, listed_s = await start_operator(
                workdir / "operator.log", kubeconfig, limit, source_of(1)
            )
            try:
                result["operator_listed_s"] = listed_s
                log(f"[{n}] operator started and listed {n} nodes in {listed_s:.1f}s")

                async with LabelWatch(api, selector) as watch:
                    # 1b. the operator: a pool over the same nodes
                    before = metrics(port)
                    pool = Pool(api, "bench-labels")
                    result.update(await operator_labels(pool, watch, n, limit, proc.pid))
                    first, labelled = result["operator_first_write_s"], result["operator_labelled_s"]
                    after = metrics(port)
                    result["label_patches_per_node"] = (
                        total(after, "gpushare_label_patches_total")
                        - total(before, "gpushare_label_patches_total")
                    ) / n
                    result["node_writes_per_node"] = (
                        total(after, "gpushare_api_writes_total", resource="nodes")
                        - total(before, "gpushare_api_writes_total", resource="nodes")
                    ) / n
                    log(
                        f"[{n}] operator: first write {first:.2f}s, all labelled {labelled:.2f}s, "
                        f"Ready {result['operator_ready_s']:.2f}s"
                    )

                    result["rounds"] = [{**_round(result), "source": _source_name(1)}]
                    if labels_only:
                        result["operator_peak_rss_labels_mib"] = peak_rss_mib(proc.pid)
                        # as the later rounds read it: after the labels, before the restore
                        result["rounds"][0]["operator_peak_rss_mib"] = result["operator_peak_rss_labels_mib"]
                        await pool.delete()
                        await wait(pool.gone, limit, "pool deleted", interval=0.05)
                result["operator_peak_rss_mib"] = peak_rss_mib(proc.pid)
                if not labels_only:
                    await other_steps(
                        result, api, kubeconfig, proc, port, pool, n, steady, limit, log, rollout
                    )
            finally:
                stop_operator(proc)
            for i in range(2, extra_rounds + 2):
                await asyncio.sleep(2)
                more = await labels_round(workdir, kubeconfig, api, names, i, loop_concurrency, limit, log)
                result["rounds"].append(more)
                result["operator_peak_rss_mib"] = max(
                    result["operator_peak_rss_mib"], more["operator_peak_rss_mib"]
                )
    result["load_end"] = loadavg()
    return result


async def other_steps(
    result: dict[str, Any],
    api: client.ApiClient,
    kubeconfig: Path,
    proc: subprocess.Popen[bytes],
    port: int,
    pool: Pool,
    n: int,
    steady: float,
    limit: float,
    log: Any,
    rollout: bool,
) -> None:
    """Steps 3-6 with the operator of step 1 (its pool ``pool`` is Ready)."""
    selector = f"{POOL_LABEL}={NODEPOOL}"

    async def unlabel() -> None:
        await kubectl(kubeconfig, "label", "nodes", "-l", selector, *unlabel_args())
        await asyncio.sleep(2)

    async with LabelWatch(api, selector) as watch:
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
        result["operator_peak_rss_labels_mib"] = peak_rss_mib(proc.pid)

        # 4. cleanup
        t = time.monotonic()
        await pool.delete()
        await wait(pool.gone, limit, "pool deleted", interval=0.05)
        result["operator_restore_s"] = time.monotonic() - t
        await kubectl(kubeconfig, "label", "nodes", "-l", selector, f"{c.LABEL_SCHEDULE}-")
        await asyncio.sleep(2)

        # 5. two pools of n/2, created together
        halves = [Pool(api, "bench-half-a"), Pool(api, "bench-half-b")]
        t = time.monotonic()
        await asyncio.gather(
            *(
                p.create(nodeSelector={"matchLabels": {HALF: x}}, devicePlugin={"restart": "Never"})
                for p, x in zip(halves, "ab", strict=True)
            )
        )
        _, labelled = await watch.times({p.name for p in halves}, n, t, limit)
        result["two_pools_labelled_s"] = labelled

        async def both_ready() -> bool:
            return all([await p.ready() for p in halves])

        await wait(both_ready, limit, "both pools Ready", interval=0.05)
        result["two_pools_ready_s"] = time.monotonic() - t
        log(
            f"[{n}] two pools of {n // 2}: labelled {labelled:.2f}s, Ready {result['two_pools_ready_s']:.2f}s"
        )
        for p in halves:
            await p.delete()
        for p in halves:
            await wait(p.gone, limit, "pool deleted", interval=0.1)
        await kubectl(kubeconfig, "label", "nodes", "-l", selector, f"{c.LABEL_SCHEDULE}-")

    result["operator_peak_rss_mib"] = peak_rss_mib(proc.pid)
    if not rollout:
        return
    # 6. full rollout
    t = time.monotonic()
    start_wall = time.time()
    await kubectl(kubeconfig, "label", "nodes", "-l", selector, *label_args(), "--overwrite")
    await kubectl(
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
        limit,
        "plugin pods replaced",
        interval=0.25 + n / 4000,
    )
    result["kubectl_rollout_s"] = time.monotonic() - t
    await unlabel()
    pool = Pool(api, "bench-rollout")
    t = time.monotonic()
    await pool.create(rollout={"maxUnavailable": "100%"})

    async def ready_kicking() -> bool:
        await plugin_pods_ready(api, 0)  # only to unstick kwok, see STUCK_AFTER_S
        return await pool.ready()

    await wait(ready_kicking, limit, "pool Ready (rollout)", interval=0.25 + n / 4000)
    result["operator_rollout_s"] = time.monotonic() - t
    k_s, o_s = result["kubectl_rollout_s"], result["operator_rollout_s"]
    log(f"[{n}] rollout: kubectl {k_s:.2f}s, operator {o_s:.2f}s")
    result["operator_peak_rss_mib"] = peak_rss_mib(proc.pid)
    await pool.delete()
    await wait(pool.gone, limit, "pool deleted", interval=0.1)


async def loop_floor(
    api: client.ApiClient, watch: LabelWatch, names: list[str], concurrency: int, limit: float
) -> dict[str, float]:
    """The plain loop, timed until its last patch returned and until ``watch`` saw every node
    labelled (as the operator is timed: the same observer for both)."""
    t, cpu = time.monotonic(), time.process_time()
    seen = asyncio.create_task(watch.times("loop", len(names), t, limit))
    returned = await plain_loop(api, names, concurrency)
    _, seen_s = await seen
    # This process's CPU: the loop's patches and replies, and the observer's watch events.
    return {"loop_label_s": returned, "loop_seen_s": seen_s, "loop_cpu_s": time.process_time() - cpu}


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def operator_labels(pool: Pool, watch: LabelWatch, n: int, limit: float, pid: int) -> dict[str, float]:
    """Create ``pool`` (labels only); seconds to its first node labelled, to all ``n``, to Ready;
    the CPU seconds the operator process ``pid`` and this process (the observer) spent until all
    were labelled. An NVIDIA pool labels nothing before its config's propagation wait: the CPU is
    counted from a second before that wait ends (``operator_wait_cpu_s``: the operator's during it)."""
    t, cpu, op_cpu = time.monotonic(), time.process_time(), process_cpu_s(pid)
    wait_s = BACKEND[0].wait_s
    waited: dict[str, float] = {}

    async def after_wait() -> None:
        await asyncio.sleep(max(0.0, wait_s - 1))
        waited.update(cpu=time.process_time(), op_cpu=process_cpu_s(pid))

    timer = asyncio.create_task(after_wait()) if wait_s > 0 else None
    await pool.create(**BACKEND[0].pool_spec)
    created = time.monotonic() - t
    first, labelled = await watch.times(pool.name, n, t, limit)
    if timer is not None:
        await timer
    wait_cpu = waited.get("op_cpu", op_cpu) - op_cpu
    op_cpu = process_cpu_s(pid) - waited.get("op_cpu", op_cpu)
    cpu = time.process_time() - waited.get("cpu", cpu)
    # A MIG pool is Ready once the simulated MIG manager applied the geometry on every node and the
    # simulated plugin advertises it there: at 1000 nodes that took longer than the labels' limit.
    ready_limit = READY_LIMIT[0] or limit * (3 if BACKEND[0].mig else 1)
    ready_nodes = float("nan")
    try:
        await wait(pool.ready, ready_limit, "pool Ready (labels only)", interval=0.05)
        ready_s = time.monotonic() - t
    except TimeoutError:  # reported as nan, the run goes on (the labels' figures stand)
        ready_s = float("nan")
        ready_nodes = await pool.ready_nodes()
        print(
            f"pool {pool.name} not Ready {ready_limit:.0f} s after it was labelled: "
            f"{ready_nodes:.0f} node(s) Ready",
            file=sys.stderr,
        )
    return {
        "pool_create_call_s": created,
        "operator_first_write_s": first,
        "operator_labelled_s": labelled,
        "operator_ready_s": ready_s,
        "operator_ready_nodes_at_limit": ready_nodes,
        "operator_cpu_s": op_cpu,
        "operator_wait_cpu_s": wait_cpu,
        "observer_cpu_s": cpu,
    }


def _operator_env(src: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
    return env


async def start_operator(
    op_log: Path, kubeconfig: Path, limit: float, src: Path | None = None
) -> tuple[subprocess.Popen[bytes], int, float]:
    """Start ``gpushare run``; returns once its Node and Pod watches have listed everything
    (the process, its metrics port, seconds from start to listed)."""
    port = free_port()
    with op_log.open("wb") as out:
        proc = subprocess.Popen(  # noqa: ASYNC220 - started once, never waited on here
            [sys.executable, "-m", "gpushare", "run", "--kubeconfig", str(kubeconfig),
             "--metrics-port", str(port), "--log-format", "json"],
            stdout=out, stderr=subprocess.STDOUT, env=_operator_env(src),
        )  # fmt: skip
    started = time.monotonic()
    try:
        await wait(lambda: _serving(port), 60, "operator metrics")

        async def listed() -> bool:  # the operator's Node and Pod watches have listed once
            return LISTED in op_log.read_text(errors="replace")  # noqa: ASYNC240 - a small local file

        await wait(listed, limit, "the operator's first list of Nodes and Pods", interval=0.2)
    except BaseException:
        stop_operator(proc)
        raise
    return proc, port, time.monotonic() - started


def stop_operator(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _round(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("loop_label_s", "loop_seen_s", "operator_first_write_s", "operator_labelled_s")
    out = {k: r[k] for k in keys}
    # an NVIDIA pool labels no node before its config's propagation wait (``--config-propagation``)
    out["ratio"] = (r["operator_labelled_s"] - BACKEND[0].wait_s) / r["loop_seen_s"]
    # CPU, which a busy machine does not stretch as it stretches time: the loop's process (its
    # patches and the observer's watch) against the operator's process plus the observer's.
    out["loop_cpu_s"] = r["loop_cpu_s"]
    out["operator_cpu_s"] = r["operator_cpu_s"] + r["observer_cpu_s"]
    out["cpu_ratio"] = out["operator_cpu_s"] / r["loop_cpu_s"]
    return out


async def labels_round(
    workdir: Path,
    kubeconfig: Path,
    api: client.ApiClient,
    names: list[str],
    i: int,
    concurrency: int,
    limit: float,
    log: Any,
) -> dict[str, Any]:
    """One more labels-only comparison on the same cluster: the loop with no operator alive, then
    a fresh operator and a pool (deleted again, so the nodes are as before)."""
    n = len(names)
    selector = f"{POOL_LABEL}={NODEPOOL}"
    async with LabelWatch(api, selector) as watch:
        r: dict[str, Any] = await loop_floor(api, watch, names, concurrency, limit)
    await kubectl(kubeconfig, "label", "nodes", "-l", selector, *unlabel_args(), "--overwrite")
    await asyncio.sleep(2)
    await wait(lambda: settled(api, selector, n), limit, f"{n} nodes back at {MIG_DISABLED}", interval=1)
    proc, _, _ = await start_operator(workdir / f"operator-{i}.log", kubeconfig, limit, source_of(i))
    try:
        async with LabelWatch(api, selector) as watch:
            pool = Pool(api, f"bench-labels-{i}")
            r.update(await operator_labels(pool, watch, n, limit, proc.pid))
            r["operator_peak_rss_mib"] = peak_rss_mib(proc.pid)
            await pool.delete()
            await wait(pool.gone, limit, "pool deleted", interval=0.05)
    finally:
        stop_operator(proc)
    out = {**_round(r), "operator_peak_rss_mib": r["operator_peak_rss_mib"], "source": _source_name(i)}
    log(
        f"[{n}] round {i} ({out['source']}): loop {r['loop_label_s']:.2f}s (seen {r['loop_seen_s']:.2f}s), "
        f"operator first write {r['operator_first_write_s']:.2f}s, "
        f"all labelled {r['operator_labelled_s']:.2f}s ({out['ratio']:.2f}x the loop; "
        f"CPU {out['loop_cpu_s']:.2f} / {out['operator_cpu_s']:.2f} s, {out['cpu_ratio']:.2f}x) "
        f"(load {loadavg()})"
    )
    return out


def _source_name(round_: int) -> str:
    src = source_of(round_)
    return "this tree" if src is None else str(src)


def by_source(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (size, source): its rounds' count and the medians of their figures."""
    rows = []
    for r in results:
        rounds = r.get("rounds") or []
        for source in dict.fromkeys(x["source"] for x in rounds):
            mine = [x for x in rounds if x["source"] == source]
            row: dict[str, Any] = {"nodes": r["nodes"], "source": source, "count": len(mine)}
            for key in ("ratio", "cpu_ratio", "operator_cpu_s", "operator_peak_rss_mib"):
                values = [x[key] for x in mine if key in x]
                if values:
                    row[key] = statistics.median(values)
                    row[f"{key}_all"] = ", ".join(f"{v:.2f}" for v in values)
            rows.append(row)
    return rows


async def _serving(port: int) -> bool:
    try:
        metrics(port)
    except OSError:
        return False
    return True


LABEL_COLUMNS = (
    ("nodes", "{nodes}"),
    ("kubectl label", "{kubectl_label_s:.2f} s"),
    ("plain loop (64 in flight): returned / seen", "{loop_label_s:.2f} / {loop_seen_s:.2f} s"),
    ("operator: first write", "{operator_first_write_s:.2f} s"),
    ("operator: all labelled", "{operator_labelled_s:.2f} s"),
    ("÷ loop", "{labels_ratio:.2f}x"),
    ("÷ loop, every round (median)", "{rounds_ratios}"),
    ("CPU ÷ loop, every round (median)", "{rounds_cpu_ratios}"),
    ("operator: Ready", "{operator_ready_s:.2f} s"),
    ("label patches / node", "{label_patches_per_node:.2f}"),
    ("node writes / node", "{node_writes_per_node:.2f}"),
    ("writes in steady state", "{steady_writes:.0f} in {steady_s:.0f} s"),
    (
        "peak RSS: labels only / whole run",
        "{operator_peak_rss_labels_mib:.0f} / {operator_peak_rss_mib:.0f} MiB",
    ),
    ("load avg start → end", "{load_start} → {load_end}"),
)
ROUND_COLUMNS = (
    ("nodes", "{nodes}"),
    ("round", "{round}"),
    ("operator from", "{source}"),
    ("plain loop: returned / seen", "{loop_label_s:.2f} / {loop_seen_s:.2f} s"),
    ("operator: first write", "{operator_first_write_s:.2f} s"),
    ("operator: all labelled", "{operator_labelled_s:.2f} s"),
    ("÷ loop", "{ratio:.2f}x"),
    ("CPU: loop / operator + observer", "{loop_cpu_s:.2f} / {operator_cpu_s:.2f} s"),
    ("CPU ÷ loop", "{cpu_ratio:.2f}x"),
)
SOURCE_COLUMNS = (
    ("nodes", "{nodes}"),
    ("operator from", "{source}"),
    ("rounds", "{count}"),
    ("all labelled ÷ loop, rounds (median)", "{ratio_all} ({ratio:.2f}x)"),
    ("CPU ÷ loop, rounds (median)", "{cpu_ratio_all} ({cpu_ratio:.2f}x)"),
    ("operator + observer CPU, rounds (median)", "{operator_cpu_s_all} ({operator_cpu_s:.2f} s)"),
    ("peak RSS, rounds (median)", "{operator_peak_rss_mib_all} ({operator_peak_rss_mib:.1f} MiB)"),
)
OTHER_COLUMNS = (
    ("nodes", "{nodes}"),
    ("restore (delete → gone)", "{operator_restore_s:.2f} s"),
    ("2 pools of N/2: all labelled", "{two_pools_labelled_s:.2f} s"),
    ("2 pools: both Ready", "{two_pools_ready_s:.2f} s"),
    ("÷ 1 pool Ready", "{two_pools_ratio:.2f}x"),
    ("kubectl label + delete plugin pods", "{kubectl_rollout_s:.2f} s"),
    ("operator rollout, maxUnavailable 100%", "{operator_rollout_s:.2f} s"),
    ("÷ kubectl", "{rollout_ratio:.2f}x"),
    ("load avg start → end", "{load_start} → {load_end}"),
)


def table(results: list[dict[str, Any]], columns: tuple[tuple[str, str], ...]) -> str:
    rows = ["| " + " | ".join(name for name, _ in columns) + " |", "|" + "---:|" * len(columns)]
    for r in results:
        values = {**r}
        if "operator_labelled_s" in r and "loop_seen_s" in r:
            values["labels_ratio"] = (r["operator_labelled_s"] - BACKEND[0].wait_s) / r["loop_seen_s"]
        if "two_pools_ready_s" in r:
            values["two_pools_ratio"] = r["two_pools_ready_s"] / r["operator_ready_s"]
        for key, out in (("ratio", "rounds_ratios"), ("cpu_ratio", "rounds_cpu_ratios")):
            ratios = [x[key] for x in r.get("rounds") or () if key in x]
            if ratios:
                values[out] = ", ".join(f"{x:.2f}" for x in ratios) + f" ({statistics.median(ratios):.2f}x)"
        if "operator_rollout_s" in r:
            values["rollout_ratio"] = r["operator_rollout_s"] / r["kubectl_rollout_s"]
        cells = []
        for _, fmt in columns:
            try:
                cells.append(fmt.format(**values))
            except KeyError:
                cells.append("not run")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--nodes", default="100,1000", help="comma-separated node counts (e.g. 1000,3000,5000)"
    )
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state to watch")
    parser.add_argument(
        "--loop-concurrency", type=int, default=64, help="patches in flight in the plain loop"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--skip-rollout", action="store_true", help="skip the full rollout (6.), e.g. for large N on 2 CPUs"
    )
    parser.add_argument(
        "--labels-only", action="store_true", help="only the labels comparison (1., 2. and peak RSS)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the labels comparison (the loop with no operator alive, then a fresh operator) "
        "this many times on the same cluster; each round's ratio is printed",
    )
    parser.add_argument(
        "--operator-src", type=Path, action="append", default=[], metavar="DIR",
        help="run the operator from this source root (A/B against another commit: "
        "git archive COMMIT operator | tar -x -C DIR, then DIR/operator); more than once: "
        "the rounds take them in turn on one cluster",
    )  # fmt: skip
    parser.add_argument(
        "--nvidia",
        action="store_true",
        help="an NVIDIA TimeSlicing pool (4 replicas) over kwok nodes of NVIDIA's simulated plugin, "
        "instead of an ACK pool; with --labels-only",
    )
    parser.add_argument(
        "--mig",
        action="store_true",
        help="a MIG pool (the chart's all-balanced geometry, mixed strategy) over kwok nodes of NVIDIA's "
        "simulated plugin and MIG manager, instead of an ACK pool; with --labels-only",
    )
    parser.add_argument(
        "--ready-limit", type=float, default=0.0, metavar="SECONDS",
        help="how long to wait for the pool's Ready once labelled (default: 300 s + 0.6 s a node, three "
        "times that with --mig); past it, Ready is reported nan with the nodes Ready then",
    )  # fmt: skip
    parser.add_argument(
        "--config-propagation", type=int, default=90, metavar="SECONDS",
        help="with --nvidia or --mig: the pool's nvidia.configPropagationSeconds (default 90, see above); "
        "÷ loop is taken on the labelling after it",
    )  # fmt: skip
    args = parser.parse_args()
    if args.nvidia and args.mig:
        parser.error("--nvidia and --mig: one of them")
    for flag, given in (("--nvidia", args.nvidia), ("--mig", args.mig)):
        if given and not args.labels_only:
            parser.error(f"{flag}: with --labels-only (the other steps restart ACK's plugin)")
    if args.nvidia:
        BACKEND[0] = nvidia_backend(args.config_propagation)
    if args.mig:
        BACKEND[0] = mig_backend(args.config_propagation)
    READY_LIMIT[0] = args.ready_limit
    OPERATOR_SRCS[:] = [src.resolve() for src in args.operator_src]
    for src in OPERATOR_SRCS:
        # Without this check a tree's root (not its operator/) silently ran this checkout's code.
        if not (src / "gpushare" / "__init__.py").is_file():
            parser.error(f"--operator-src {src}: no gpushare package there (the tree's operator/ is)")
    if args.rounds < max(1, len(OPERATOR_SRCS)):
        parser.error(f"--rounds {args.rounds}: must be 1 or more, and at least one per --operator-src")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results = []
    for n in args.nodes.split(","):
        results.append(
            asyncio.run(
                run_size(
                    int(n),
                    args.steady,
                    log,
                    args.loop_concurrency,
                    rollout=not args.skip_rollout,
                    labels_only=args.labels_only,
                    extra_rounds=args.rounds - 1,
                )
            )
        )
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    if kicked:
        log(f"kwok left {len(kicked)} plugin pod(s) Pending; deleted them for the DaemonSet to recreate")
    print(f"cpus: {os.cpu_count()}; kwok nodes, local kube-apiserver/etcd/kcm/scheduler")
    if args.nvidia or args.mig:
        gpus = f"{NVIDIA_NODE_POOL.gpus} x {NVIDIA_NODE_POOL.gpu_name}"
        sharing = f"MIG {MIG_PROFILES} per GPU (mixed)" if args.mig else "TimeSlicing x4"
        print(
            f"NVIDIA pool: {sharing} over {gpus} per node; configPropagationSeconds "
            f"{args.config_propagation}: every time counts from the pool's creation, ÷ loop and CPU "
            "from the end of that wait; the operator's CPU during it: "
            + ", ".join(f"{r['operator_wait_cpu_s']:.2f} s ({r['nodes']})" for r in results)
        )
    print(table(results, LABEL_COLUMNS))
    print()
    if any(len(r.get("rounds") or ()) > 1 for r in results):
        rows = [{"nodes": r["nodes"], "round": i, **x} for r in results for i, x in enumerate(r["rounds"], 1)]
        print(table(rows, ROUND_COLUMNS))
        print()
    if len(OPERATOR_SRCS) > 1:
        print(table(by_source(results), SOURCE_COLUMNS))
        print()
    if not args.labels_only:
        print(table(results, OTHER_COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
