"""Benchmark of the admission webhook on the local control plane (issues 5 and 11).

1. Pod creation latency through the real kube-apiserver (sequential creates), for a GPU pod and a
   non-GPU pod, in alternating rounds so that drift in the machine's load hits every column alike,
   with: nothing installed; the **no-op webhook** (bench/noop-webhook, Go ``net/http``: it decodes
   the review and allows it, with gpushare's own configuration: same TLS, rules and
   matchConditions; the floor any webhook costs); the two ValidatingAdmissionPolicies alone (Pods,
   workload kinds); what is shipped by default (``failurePolicy: Fail``: the gpushare webhook
   alone, its configuration with matchConditions and no policy, so a GPU object is judged once);
   and everything (webhook + both policies, as shipped for ``failurePolicy: Ignore``).
   Each column's added milliseconds over "nothing" are held against the no-op's. The apiserver's own
   ``apiserver_admission_webhook_admission_duration_seconds`` says how long its calls to the
   webhook took; the webhook's ``gpushare_admission_duration_seconds`` how long the rules took;
   ``apiserver_validating_admission_policy_check_duration_seconds`` how long the policy took, and
   ``apiserver_admission_match_condition_evaluation_seconds`` the matchConditions.
2. A burst scenario (``--burst``): GPU pods into full pools while the operator works (a rollout
   started each round, the pending pods piling up), with nothing, the no-op floor and what is
   shipped, and the operator's and the webhook's CPU seconds.
3. Direct HTTPS AdmissionReview load on the webhook (``gpushare webhook --webhook-local``, its own
   process beside ``gpushare run`` as shipped; ``--webhook-process shared``: the webhook in the
   operator's process, as before): open loop at a fixed rate (``--rate``, 500 req/s) and closed loop at
   several concurrencies; requests/s and p50/p99 latency, for a GPU pod (the full rules with live
   pools and nodes: ``cuda-sample``, 2 GiB + 30 % on the core_mem pool) and a non-GPU pod.

Usage: ``python bench/bench_webhook.py [--requests 2000] [--concurrency 1,8,32] [--rate 500]
[--creates 200] [--rounds 2] [--burst 50] [--webhook-process own|shared] [--nodes 30] [--via-kopf]
[--json out.json]``. It starts its own control plane (kwok nodes in 3 node pools
and the three example pools). Prints a Markdown table. Nothing is asserted: these are
measurements; the load generator shares the machine with the webhook and the apiserver.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.admission.vap import POLICY_NAME, build_binding, build_policies, pod_policy_name
from gpushare.devcluster import ClusterInfo, DevCluster
from gpushare.devcluster.cluster import free_port
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.fakes import POOL_LABEL, create_gpu_nodes, ensure_device_plugin_daemonset
from gpushare.k8s.client import make_api_client

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples"
CONFIGURATION = "gpushare-webhook"
OPERATOR_NS = "gpushare-system"
BENCH_NS = "bench-webhook"
POOL_FILES = ("pool-cgpu.yaml", "pool-cgpu-no-isolation.yaml", "pool-gpu-core.yaml")


def gpu_pod(name: str = "cuda-sample") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": BENCH_NS},
        "spec": {
            "nodeSelector": {c.LABEL_SCHEDULE: c.SCHEDULE_CORE_MEM},
            "containers": [
                {
                    "name": "cuda-sample",
                    "image": "registry.cn-beijing.aliyuncs.com/ai-samples/gpushare-sample:benchmark",
                    "resources": {"limits": {c.RES_GPU_MEM: "2", c.RES_GPU_CORE: "30"}},
                }
            ],
            "restartPolicy": "Never",
        },
    }


def plain_pod(name: str = "plain") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": BENCH_NS},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "100m"}}}]},
    }


def review(obj: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "userInfo": {"username": "bench"},
                "namespace": BENCH_NS,
                "object": obj,
            },
        }
    ).encode()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_cost(nodes: int, repeat: int = 2000) -> dict[str, float]:
    """CPU microseconds per evaluate() with a cached context of ``nodes`` nodes (no HTTP, no Kopf)."""
    from gpushare.admission import Context, evaluate, node_info
    from gpushare.api.v1alpha1 import parse_pool

    pools = [parse_pool(yaml.safe_load((EX / f).read_text())) for f in POOL_FILES]
    nodepools = ("np-cgpu", "np-cgpu-no-isolation", "np-gpu-core")
    infos = []
    for i in range(nodes):
        labels = {POOL_LABEL: nodepools[i % 3], "kubernetes.io/hostname": f"n{i}"}
        alloc = {c.RES_GPU_MEM: "60", c.RES_GPU_COUNT: "4"}
        infos.append(
            node_info({"metadata": {"name": f"n{i}", "labels": labels}, "status": {"allocatable": alloc}})
        )
    ctx = Context.build(pools, infos)
    out: dict[str, float] = {}
    for label, obj in (("gpu_us", gpu_pod()), ("plain_us", plain_pod())):
        evaluate(obj, ctx)
        start = time.process_time()
        for _ in range(repeat):
            evaluate(obj, ctx)
        out[label] = (time.process_time() - start) / repeat * 1e6
    start = time.process_time()
    for _ in range(20):
        evaluate(gpu_pod(), Context.build(pools, infos))
    out["fresh_context_ms"] = (time.process_time() - start) / 20 * 1000
    return out


async def direct_load(
    port: int, cafile: Path, obj: dict[str, Any], total: int, concurrency: int, server_pid: int
) -> dict[str, Any]:
    ctx = ssl.create_default_context(cafile=str(cafile))
    url = f"https://127.0.0.1:{port}/validate-pods"
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    per_worker = max(1, total // concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=ctx)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for _ in range(per_worker):
                body = review(obj)
                start = time.perf_counter()
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                    data = await resp.json()
                latencies.append(time.perf_counter() - start)
                key = f"{resp.status}/{'allowed' if data['response']['allowed'] else 'denied'}"
                statuses[key] = statuses.get(key, 0) + 1

        # warm up connections and caches
        for _ in range(20):
            async with session.post(url, data=review(obj), headers={"Content-Type": "application/json"}) as r:
                await r.read()
        started, cpu0 = time.perf_counter(), cpu_seconds(server_pid)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(server_pid) - cpu0
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": pct(latencies, 0.50) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
        "server_cpu_ms_per_request": cpu / len(latencies) * 1000,
        "statuses": statuses,
    }


async def create_latency(api: client.ApiClient, count: int, prefix: str, gpu: bool) -> list[float]:
    core = client.CoreV1Api(api)
    latencies: list[float] = []
    for i in range(count):
        body = gpu_pod(f"{prefix}-{i}") if gpu else plain_pod(f"{prefix}-{i}")
        start = time.perf_counter()
        await core.create_namespaced_pod(BENCH_NS, body)  # type: ignore[arg-type]
        latencies.append(time.perf_counter() - start)
    await core.delete_collection_namespaced_pod(BENCH_NS, grace_period_seconds=0)
    return latencies


def summary(latencies: list[float]) -> dict[str, Any]:
    return {
        "creates": len(latencies),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000,
    }


def rotated(columns: tuple[str, ...], round_: int) -> tuple[str, ...]:
    """The columns in round ``round_``'s order: each round starts one column later, so over as many
    rounds as columns each column takes each position once (the load drifts within a round: in
    the burst, a rollout starts at its beginning)."""
    k = round_ % len(columns)
    return columns[k:] + columns[:k]


def spread(
    base: list[float], floor: list[float], shipped: list[float], resamples: int = 2000, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """95 % bootstrap intervals (ms) of the no-op's and the shipped column's added p50 over
    ``base`` (nothing installed), and of their ratio: each list resampled with replacement,
    ``resamples`` times. Says how far the floor itself moves between runs of the same size."""
    rng = random.Random(seed)

    def med(xs: list[float]) -> float:
        return statistics.median(rng.choices(xs, k=len(xs))) * 1000

    floors, ships, ratios = [], [], []
    for _ in range(resamples):
        b = med(base)
        f, sh = med(floor) - b, med(shipped) - b
        floors.append(f)
        ships.append(sh)
        ratios.append(sh / f if f > 0 else float("inf"))

    def interval(xs: list[float]) -> tuple[float, float]:
        xs = sorted(xs)
        return xs[int(0.025 * len(xs))], xs[min(len(xs) - 1, int(0.975 * len(xs)))]

    return {"noop": interval(floors), "shipped": interval(ships), "ratio": interval(ratios)}


async def rate_load(
    port: int, cafile: Path, obj: dict[str, Any], total: int, rate: float, server_pid: int
) -> dict[str, Any]:
    """Open loop: one request every 1/rate s whatever the answers do; latency from send to answer."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    url = f"https://127.0.0.1:{port}/validate-pods"
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=64, ssl=ctx)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            body = review(obj)
            start = time.perf_counter()
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
            latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(one() for _ in range(16)))  # warm up connections
        latencies.clear()
        tasks = []
        started, cpu0 = time.perf_counter(), cpu_seconds(server_pid)
        for i in range(total):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(server_pid) - cpu0
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": pct(latencies, 0.50) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
        "server_cpu_ms_per_request": cpu / len(latencies) * 1000,
    }


async def metric_sums(
    url: str, names: tuple[str, ...], match: str, headers: dict[str, str], cafile: Any
) -> dict[str, float]:
    """Sum of Prometheus samples ``name`` (e.g. ..._sum, ..._count) whose labels contain ``match``."""
    ctx = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers, ssl=ctx or True) as resp:
        text = await resp.text()
    out = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name in out and match in rest:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


async def prepare(api: client.ApiClient, nodes: int) -> None:
    await install_crd_files(api, sorted((REPO / "crds").glob("*.yaml")))
    core = client.CoreV1Api(api)
    for ns in (OPERATOR_NS, BENCH_NS):
        try:
            await core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status != 409:
                raise
    # The stand-in device plugin on every node, and the plugin simulator setting each node's GPU
    # resources from its labels: without them the example pools' plugin restarts never finish, and
    # the operator kept working beside the webhook while it was measured.
    await ensure_device_plugin_daemonset(api)
    per_pool = max(1, nodes // 3)
    for np in ("np-cgpu", "np-cgpu-no-isolation", "np-gpu-core"):
        await create_gpu_nodes(api, per_pool, prefix=np, pool_labels={POOL_LABEL: np}, simulate_plugin=True)
    co = client.CustomObjectsApi(api)
    for name in POOL_FILES:
        body = yaml.safe_load((EX / name).read_text())
        try:
            await co.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)
        except ApiException as exc:
            if exc.status != 409:
                raise


async def wait_pools_settled(api: client.ApiClient, limit_s: float = 120.0) -> None:
    co = client.CustomObjectsApi(api)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        listed = await co.list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL)
        progressing = [
            p["metadata"]["name"]
            for p in listed["items"]
            if not any(
                cond.get("type") == "Progressing" and cond.get("status") == "False"
                for cond in (p.get("status") or {}).get("conditions") or []
            )
        ]
        if not progressing:
            return
        await asyncio.sleep(1)
    print(f"# pools still progressing after {limit_s:.0f}s; measuring anyway", file=sys.stderr)


async def configuration_exists(api: client.ApiClient) -> bool:
    try:
        await client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration(CONFIGURATION)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def wait_webhook_answers(api: client.ApiClient, limit_s: float = 120.0) -> None:
    core = client.CoreV1Api(api)
    bad = gpu_pod("probe")
    bad["spec"]["containers"][0]["resources"]["limits"][c.RES_GPU_CORE] = "33"
    deadline = time.monotonic() + limit_s
    while True:
        try:
            await core.create_namespaced_pod(BENCH_NS, bad, dry_run="All")  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 422 and "GS001" in str(exc.body):
                return
        if time.monotonic() > deadline:
            raise TimeoutError("the webhook never answered through the apiserver")
        await asyncio.sleep(0.5)


def start_gpushare(
    kubeconfig: Path, port: int, cert_dir: Path, metrics_port: int, via_kopf: bool, shared: bool
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes] | None]:
    """The operator and the webhook as shipped: ``gpushare run`` and ``gpushare webhook
    --webhook-local``, a process each (the chart's two containers); with ``shared``, one
    ``gpushare run --webhook --webhook-local`` process serving both (the design before issue 40).
    Returns (the process serving the webhook, the operator's process when it is another)."""
    tmp = Path(tempfile.gettempdir())
    webhook_args = [
        "--metrics-port", str(metrics_port), "--webhook-local", "--webhook-port", str(port),
        "--webhook-cert-dir", str(cert_dir), "--webhook-namespace", OPERATOR_NS,
        *(["--webhook-via-kopf"] if via_kopf else []),
    ]  # fmt: skip
    base = [sys.executable, "-m", "gpushare"]
    if shared:
        cmd = [*base, "run", "--kubeconfig", str(kubeconfig), "--webhook", *webhook_args]
        log = (tmp / "gpushare-bench-webhook.log").open("w")
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), None
    op_log = (tmp / "gpushare-bench-operator.log").open("w")
    operator = subprocess.Popen(
        [*base, "run", "--kubeconfig", str(kubeconfig), "--metrics-port", "0"],
        stdout=op_log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    log = (tmp / "gpushare-bench-webhook.log").open("w")
    webhook = subprocess.Popen(
        [*base, "webhook", "--kubeconfig", str(kubeconfig), *webhook_args],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return webhook, operator


def stop_webhook(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


NOOP_SRC = REPO / "bench" / "noop-webhook"
NOOP_NAME = "gpushare-noop-webhook"


def build_noop() -> Path:
    """The no-op webhook's binary (built with ``go build`` into the project's cache when missing)."""
    out = Path(os.environ.get("GPUSHARE_CACHE", Path.home() / ".cache" / "gpushare")) / "bin" / "noop-webhook"
    sources = max(f.stat().st_mtime for f in NOOP_SRC.iterdir())
    if not out.exists() or out.stat().st_mtime < sources:
        out.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
        subprocess.run(["go", "build", "-trimpath", "-o", str(out), "."], cwd=NOOP_SRC, env=env, check=True)
    return out


def start_noop(binary: Path, port: int, cert_dir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(binary), "-addr", f"127.0.0.1:{port}", "-cert", str(cert_dir / "tls.crt"), "-key", str(cert_dir / "tls.key")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def noop_configuration(vwc: dict[str, Any], port: int) -> dict[str, Any]:
    """gpushare's configuration (same rules, matchConditions, timeouts, CA) aimed at the no-op."""
    noop: dict[str, Any] = json.loads(json.dumps(vwc))
    noop["metadata"] = {"name": NOOP_NAME}
    for hook in noop["webhooks"]:
        url = hook["clientConfig"]["url"]
        path = url.split("/", 3)[3] if url.count("/") >= 3 else ""
        hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}/{path}"
        hook["name"] = hook["name"].replace(".gpushare.io", ".noop.gpushare.io")
    return noop


async def noop_count(port: int, cafile: Path) -> int:
    """Reviews the no-op webhook has answered (0 once it is stopped)."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"https://127.0.0.1:{port}/count", ssl=ctx) as r,
        ):
            return int(await r.text())
    except (aiohttp.ClientError, OSError):
        return 0


def established(port: int) -> int:
    """Established TCP connections whose local port is ``port`` (the webhook's side)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    count += 1
    return count


async def dry_run(api: client.ApiClient, body: dict[str, Any]) -> str:
    try:
        if body.get("kind") == "Deployment":
            await client.AppsV1Api(api).create_namespaced_deployment(BENCH_NS, body, dry_run="All")  # type: ignore[arg-type]
        else:
            await client.CoreV1Api(api).create_namespaced_pod(BENCH_NS, body, dry_run="All")  # type: ignore[arg-type]
    except ApiException as exc:
        return str(exc.body)
    return "admitted"


def deployment_of(pod: dict[str, Any]) -> dict[str, Any]:
    """A Deployment whose template is ``pod`` (what the workload kinds' policy judges)."""
    labels = {"app": pod["metadata"]["name"]}
    spec = {k: v for k, v in pod["spec"].items() if k != "restartPolicy"}  # a Deployment's is Always
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": pod["metadata"]["name"], "namespace": BENCH_NS},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


#: ``(label, metric, label filter)`` of the apiserver's figures read around each phase. The
#: admission plugins' own durations (per CREATE in the phase: the pods, and the odd Event) hold the
#: policy's whole evaluation and the webhooks' matchConditions plus their calls; the policy's
#: check duration is recorded by the apiserver only for requests it denies.
ADMISSION = "apiserver_admission_controller_admission_duration_seconds"
APISERVER_FIGURES = (
    ("webhook_call", "apiserver_admission_webhook_admission_duration_seconds", 'name="validate-pods.gpushare.io"'),
    ("noop_call", "apiserver_admission_webhook_admission_duration_seconds", 'name="validate-pods.noop.gpushare.io"'),
    ("webhook_plugin", ADMISSION, 'name="ValidatingAdmissionWebhook",operation="CREATE"'),
    ("policy_plugin", ADMISSION, 'name="ValidatingAdmissionPolicy",operation="CREATE"'),
    # the Pods policy: the one a pod meets (the workload kinds' policy does not match pods)
    ("policy_check", "apiserver_validating_admission_policy_check_duration_seconds",
     f'policy="{pod_policy_name(POLICY_NAME)}"'),
)  # fmt: skip


async def apiserver_figures(url: str, headers: dict[str, str], cafile: Any) -> dict[str, float]:
    """``<label>_sum`` and ``<label>_count`` of each of APISERVER_FIGURES, now."""
    out: dict[str, float] = {}
    for label, metric, match in APISERVER_FIGURES:
        sums = await metric_sums(url, (f"{metric}_sum", f"{metric}_count"), match, headers, cafile)
        out[f"{label}_sum"], out[f"{label}_count"] = sums[f"{metric}_sum"], sums[f"{metric}_count"]
    return out


def figure_means(delta: dict[str, float], pods: int) -> dict[str, float]:
    """Calls, and milliseconds per created pod, of each figure in one phase's deltas (an admission
    plugin also sees the scheduler's binding of each pod: two CREATEs per pod)."""
    out: dict[str, float] = {}
    renamed = {"rules_sum": "gpushare_admission_duration_seconds_sum",
               "rules_count": "gpushare_admission_duration_seconds_count"}  # fmt: skip
    for label in [f[0] for f in APISERVER_FIGURES] + ["rules", "webhook_cpu", "noop_cpu"]:
        total = delta.get(renamed.get(f"{label}_sum", f"{label}_sum"), 0.0)
        out[f"{label}_calls"] = delta.get(renamed.get(f"{label}_count", f"{label}_count"), 0.0)
        out[f"{label}_per_pod_ms"] = 1000 * total / pods if pods else 0.0
    return out


#: The columns of the creation benchmark: what is installed in each.
#: "shipped" is what manifests/ and the chart install by default (failurePolicy Fail: the webhook
#: alone, no policy); "all" adds both policies, as they do for Ignore.
COLUMNS = ("none", "noop", "policy", "shipped", "all")


async def install(
    api: client.ApiClient,
    column: str,
    vwc: dict[str, Any],
    noop: dict[str, Any],
    noop_port: int,
    cafile: Path,
    keep: bool = False,
) -> None:
    """Install exactly what ``column`` names (and remove the rest), and wait until the apiserver
    acts on it: the Pods policy denies a 33 % pod and the workload kinds' policy a 33 % Deployment
    (a new policy is compiled first, which takes the apiserver's CPU: the creates must not share
    it), gpushare's webhook denies a pod without a pool target, the no-op webhook answers a GPU
    pod's dry run.

    gpushare's configuration is created anew for each column that has it, as the no-op's is (no
    two no-op columns follow each other): every webhook column starts with the apiserver's client
    to its webhook built afresh. ``keep`` (``--keep-configuration``): left in place between the
    gpushare columns that follow each other, as before 2026-12-05."""
    adm = client.AdmissionregistrationV1Api(api)
    want_policy = column in ("policy", "all")  # the Pods policy
    want_workloads = column in ("policy", "all")
    want_webhook = column in ("shipped", "all")
    want_noop = column == "noop"
    objects: tuple[tuple[bool, Any, Any, dict[str, Any]], ...] = (
        (want_webhook, adm.create_validating_webhook_configuration, adm.delete_validating_webhook_configuration, vwc),
        (want_noop, adm.create_validating_webhook_configuration, adm.delete_validating_webhook_configuration, noop),
        *(
            item
            for policy, wanted in zip(build_policies(), (want_policy, want_workloads), strict=True)
            for item in (
                (wanted, adm.create_validating_admission_policy, adm.delete_validating_admission_policy, policy),
                (wanted, adm.create_validating_admission_policy_binding,
                 adm.delete_validating_admission_policy_binding, build_binding(policy["metadata"]["name"])),
            )
        ),
    )  # fmt: skip
    if want_webhook and not keep:
        with contextlib.suppress(ApiException):
            await adm.delete_validating_webhook_configuration(vwc["metadata"]["name"])
    for wanted, create, delete, body in objects:
        if wanted:
            try:
                await create(body)
            except ApiException as exc:
                if exc.status != 409:  # already installed
                    raise
        else:
            with contextlib.suppress(ApiException):
                await delete(body["metadata"]["name"])
    bad = gpu_pod("probe-33")
    bad["spec"]["containers"][0]["resources"]["limits"][c.RES_GPU_CORE] = "33"
    stateful = gpu_pod("probe-no-selector")
    del stateful["spec"]["nodeSelector"]
    deadline = time.monotonic() + 120
    while True:
        policy = "ValidatingAdmissionPolicy" in await dry_run(api, bad)
        workloads = f"ValidatingAdmissionPolicy '{POLICY_NAME}'" in await dry_run(api, deployment_of(bad))
        webhook = "GS007" in await dry_run(api, stateful)
        before = await noop_count(noop_port, cafile)
        await dry_run(api, gpu_pod("probe-noop"))
        noop_called = await noop_count(noop_port, cafile) > before
        if (policy, workloads, webhook, noop_called) == (
            want_policy,
            want_workloads,
            want_webhook,
            want_noop,
        ):
            await asyncio.sleep(1.0)  # what the apiserver still does after a change settles first
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the apiserver never acted on installing {column!r}")
        await asyncio.sleep(0.5)


@contextlib.asynccontextmanager
async def prepared_cluster(nodes: int) -> AsyncIterator[tuple[ClusterInfo, client.ApiClient]]:
    """A fresh control plane with ``nodes`` kwok GPU nodes and the example pools (``prepare``), and
    a client of it. SIGTERM (``timeout``, a kill) cancels the calling task, so its cleanups stop the
    processes it started (their own sessions) and the control plane instead of leaving them behind."""
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    with DevCluster() as info:
        api = await make_api_client(str(info.kubeconfig))
        async with api:
            await prepare(api, nodes)
            yield info, api


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    async with prepared_cluster(args.nodes) as (info, api):
        results: dict[str, Any] = {
            "nodes": args.nodes, "machine_cpus": os.cpu_count(), "via_kopf": args.via_kopf,
        }  # fmt: skip
        results["engine"] = {str(n): engine_cost(n) for n in (args.nodes, 1000)}
        results["load_average_start"] = os.getloadavg()
        assert not await configuration_exists(api)

        port, metrics_port = free_port(), free_port()
        cert_dir = Path(tempfile.mkdtemp(prefix="gpushare-bench-certs-"))
        shared = args.webhook_process == "shared"
        proc, operator = await asyncio.to_thread(
            start_gpushare, info.kubeconfig, port, cert_dir, metrics_port, args.via_kopf, shared
        )
        results["webhook_process"] = args.webhook_process
        results["columns"] = list(args.columns)
        results["keep_configuration"] = args.keep_configuration
        auth = {"Authorization": f"Bearer {info.token}"}
        apiserver_metrics = f"{info.server.rstrip('/')}/metrics"
        hook_metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        rules = ("gpushare_admission_duration_seconds_sum", "gpushare_admission_duration_seconds_count")
        try:
            await wait_webhook_answers(api)
            await wait_pools_settled(api)  # the operator's own rollout must not share the measurement
            adm = client.AdmissionregistrationV1Api(api)
            vwc = api.sanitize_for_serialization(
                await adm.read_validating_webhook_configuration(CONFIGURATION)
            )
            vwc["metadata"] = {
                "name": vwc["metadata"]["name"],
                "labels": vwc["metadata"].get("labels", {}),
            }
            per_round = max(1, args.creates // args.rounds)
            cafile = cert_dir / "ca.crt"
            noop_port = free_port()
            noop_proc = await asyncio.to_thread(
                start_noop, await asyncio.to_thread(build_noop), noop_port, cert_dir
            )
            noop = noop_configuration(vwc, noop_port)
            phases: dict[str, list[float]] = {}
            deltas: dict[str, dict[str, float]] = {}
            connections: list[int] = []
            places: dict[str, list[tuple[int, int, float, float]]] = {}
            try:
                for r in range(args.rounds):
                    for column in rotated(args.columns, r):
                        await install(api, column, vwc, noop, noop_port, cafile, args.keep_configuration)
                        for gpu in (False, True):
                            key = f"{column}/{'gpu' if gpu else 'plain'}"
                            before = await apiserver_figures(apiserver_metrics, auth, info.ca_path)
                            rules_before = await metric_sums(hook_metrics, rules, 'kind="Pod"', {}, None)
                            cpu_before = cpu_seconds(proc.pid), cpu_seconds(noop_proc.pid)
                            latencies = await create_latency(
                                api, per_round, f"r{r}-{key.replace('/', '-')}", gpu
                            )
                            phases.setdefault(key, []).extend(latencies)
                            cpu_after = cpu_seconds(proc.pid), cpu_seconds(noop_proc.pid)
                            after = await apiserver_figures(apiserver_metrics, auth, info.ca_path)
                            rules_after = await metric_sums(hook_metrics, rules, 'kind="Pod"', {}, None)
                            acc = deltas.setdefault(key, {})
                            for i, name in enumerate(("webhook_cpu_sum", "noop_cpu_sum")):
                                acc[name] = acc.get(name, 0.0) + cpu_after[i] - cpu_before[i]
                            for name in after:
                                acc[name] = acc.get(name, 0.0) + after[name] - before[name]
                            for name in rules:
                                acc[name] = acc.get(name, 0.0) + rules_after[name] - rules_before[name]
                            if column in ("shipped", "all") and gpu:
                                connections.append(established(port))
                            if gpu:  # each round's place, p50 and call: what the order does
                                name = "noop_call" if column == "noop" else "webhook_call"
                                calls = after[f"{name}_count"] - before[f"{name}_count"]
                                spent = after[f"{name}_sum"] - before[f"{name}_sum"]
                                place = rotated(args.columns, r).index(column)
                                places.setdefault(column, []).append(
                                    (r, place, statistics.median(latencies), spent / calls if calls else 0.0)
                                )
                    print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr)
                if args.burst:
                    results["burst"] = await burst_scenario(
                        api, args, vwc, noop, noop_port, cafile, proc.pid, (operator or proc).pid
                    )
            finally:
                await asyncio.to_thread(stop_webhook, noop_proc)
            results["creates"] = {k: summary(v) for k, v in phases.items()}
            results["spread"] = {
                pod: spread(phases[f"none/{pod}"], phases[f"noop/{pod}"], phases[f"shipped/{pod}"])
                for pod in ("gpu", "plain")
            }
            results["apiserver"] = {k: figure_means(v, len(phases[k])) for k, v in deltas.items()}
            results["path"] = {"webhook_connections_after_gpu_phases": connections}
            results["places"] = places
            await install(api, "all", vwc, noop, noop_port, cafile)
            direct: list[dict[str, Any]] = []
            for label, obj in (("GPU pod", gpu_pod()), ("non-GPU pod", plain_pod())):
                row = await rate_load(port, cert_dir / "ca.crt", obj, args.requests, args.rate, proc.pid)
                row.update(pod=label, concurrency=f"open loop {args.rate:.0f}/s")
                direct.append(row)
                for conc in args.concurrency:
                    row = await direct_load(port, cert_dir / "ca.crt", obj, args.requests, conc, proc.pid)
                    row.update(pod=label, concurrency=conc)
                    direct.append(row)
                    print(f"# {label} c={conc}: {row['rps']:.0f} req/s", file=sys.stderr)
            results["direct"] = direct
            results["load_average_end"] = os.getloadavg()
        finally:
            await asyncio.to_thread(stop_webhook, proc)
            if operator is not None:
                await asyncio.to_thread(stop_webhook, operator)
            adm = client.AdmissionregistrationV1Api(api)
            for delete, name in (
                (adm.delete_validating_webhook_configuration, CONFIGURATION),
                (adm.delete_validating_webhook_configuration, NOOP_NAME),
                *(
                    (delete, name)
                    for name in (pod_policy_name(POLICY_NAME), POLICY_NAME)
                    for delete in (
                        adm.delete_validating_admission_policy_binding,
                        adm.delete_validating_admission_policy,
                    )
                ),
            ):
                with contextlib.suppress(ApiException):
                    await delete(name)
    return results


COLUMN_TEXT = {
    "none": "nothing",
    "noop": "no-op webhook (floor)",
    "policy": "policies alone (Pods + workload kinds')",
    "shipped": "shipped default (failurePolicy Fail): the gpushare webhook alone",
    "all": "webhook + both policies (as shipped for failurePolicy Ignore)",
}


#: The burst scenario's columns: nothing, the no-op floor, what is shipped.
BURST_COLUMNS = ("none", "noop", "shipped")


def burst_pod(name: str) -> dict[str, Any]:
    """A GPU pod asking for a whole GPU's compute on the core_mem pool: a few fill its nodes, the
    rest stay Pending (pending pods, status.demand, the operator's pod watch)."""
    pod = gpu_pod(name)
    pod["spec"]["containers"][0]["resources"]["limits"][c.RES_GPU_CORE] = "100"
    return pod


async def burst_scenario(
    api: client.ApiClient,
    args: argparse.Namespace,
    vwc: dict[str, Any],
    noop: dict[str, Any],
    noop_port: int,
    cafile: Path,
    webhook_pid: int,
    operator_pid: int,
) -> dict[str, Any]:
    """GPU pods created in bursts into full pools while the operator works. Each round first
    starts a rollout (the gpu-core pool's placement flips: every node relabelled, its plugin
    restarted), then creates ``--burst`` pods per column, one column after another in an order
    rotated each round (``rotated``); no pod is deleted until the end, so the pending pods pile
    up (``rounds x columns x burst``) and the demand loop has more to compute each round. The operator's and the webhook's CPU seconds over
    the whole scenario are read from /proc."""
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    latencies: dict[str, list[float]] = {}
    cpu0 = {"operator": cpu_seconds(operator_pid), "webhook": cpu_seconds(webhook_pid)}
    started = time.perf_counter()
    for r in range(args.rounds):
        placement = "spread" if r % 2 == 0 else "binpack"
        await co.patch_cluster_custom_object(  # type: ignore[call-arg]
            c.GROUP, c.VERSION, c.PLURAL, "gpu-core", {"spec": {"placement": placement}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
        for column in rotated(BURST_COLUMNS, r):
            await install(api, column, vwc, noop, noop_port, cafile, args.keep_configuration)
            out = latencies.setdefault(column, [])
            for i in range(args.burst):
                body = burst_pod(f"burst-r{r}-{column}-{i}")
                start = time.perf_counter()
                await core.create_namespaced_pod(BENCH_NS, body)  # type: ignore[arg-type]
                out.append(time.perf_counter() - start)
        print(f"# burst round {r + 1}/{args.rounds} done", file=sys.stderr)
    elapsed = time.perf_counter() - started
    cpu = {k: cpu_seconds(pid) - cpu0[k] for k, pid in (("operator", operator_pid), ("webhook", webhook_pid))}
    pods = await core.list_namespaced_pod(BENCH_NS)
    pending = sum(1 for p in pods.items if p.status.phase == "Pending")
    await core.delete_collection_namespaced_pod(BENCH_NS, grace_period_seconds=0)
    return {
        "creates": {k: summary(v) for k, v in latencies.items()},
        "spread": spread(latencies["none"], latencies["noop"], latencies["shipped"]),
        "seconds": elapsed,
        "cpu_s": cpu,
        "pods": len(pods.items),
        "pending_at_end": pending,
    }


def _ratio(added: float, floor: float) -> str:
    """``added ÷ floor``, or why there is none (the floor did not add time in this run)."""
    return f"{added / floor:.2f}x" if floor > 0 else f"n/a (floor {floor:+.2f} ms)"


def _spread_line(label: str, sp: Mapping[str, Any]) -> str:
    (f0, f1), (s0, s1), (r0, r1) = sp["noop"], sp["shipped"], sp["ratio"]
    ratio = (
        f"{r0:.2f}x .. {r1:.2f}x" if f0 > 0 and r1 != float("inf") else "n/a (the floor's interval reaches 0)"
    )
    return f"| {label} | {f0:+.2f} .. {f1:+.2f} | {s0:+.2f} .. {s1:+.2f} | {ratio} |"


SPREAD_HEAD = [
    "",
    "Spread (95 % bootstrap intervals of the added p50 in ms, and of the ratio, over this run's creates):",
    "",
    "| scenario | no-op added p50 | shipped added p50 | shipped ÷ no-op |",
    "|---|---:|---:|---:|",
]


def places_table(places: Mapping[str, list[Any]]) -> list[str]:
    """Each settled column's GPU phase per round: its place in the round's order (1 = first), the
    p50 of its creates and the apiserver's call to its webhook (ms)."""
    if not places:
        return []
    rounds = max(len(v) for v in places.values())
    lines = [
        "GPU pods per round (settled): place in the round's order, p50 ms, the apiserver's call ms:",
        "",
        "| column | " + " | ".join(f"round {r + 1}" for r in range(rounds)) + " |",
        "|---|" + "---:|" * rounds,
    ]
    for column, rows in places.items():
        cells = [
            f"#{place + 1}: {p50 * 1000:.2f}" + (f" / {call * 1000:.2f}" if call else "")
            for _, place, p50, call in rows
        ]
        lines.append(f"| {COLUMN_TEXT.get(column, column)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def render(results: dict[str, Any]) -> str:
    cr = results["creates"]
    fig = results["apiserver"]
    lines = [
        f"({results['nodes']} kwok nodes in 3 pools, {results['machine_cpus']} CPUs shared by the load generator,"
        f" the webhook and the control plane; load average {results['load_average_start'][0]:.1f} at start,"
        f" {results['load_average_end'][0]:.1f} at end{'; reviews through Kopf' if results['via_kopf'] else ''}"
        f"{'; gpushare configuration kept between its columns' if results.get('keep_configuration') else ''})",
        "",
        "Pod creation through the kube-apiserver (sequential creates, alternating rounds; every column"
        " in the same run; added = p50/p99 less the same pod's with nothing installed):",
        "",
        "| pod | installed | creates | p50 ms | p99 ms | added p50 ms | added p99 ms | added ÷ no-op's p50 | p99 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pod in ("plain", "gpu"):
        label = "non-GPU" if pod == "plain" else "GPU"
        base = cr[f"none/{pod}"]
        floor = cr[f"noop/{pod}"]
        floor50, floor99 = floor["p50_ms"] - base["p50_ms"], floor["p99_ms"] - base["p99_ms"]
        for column in results.get("columns", COLUMNS):
            r = cr[f"{column}/{pod}"]
            add50, add99 = r["p50_ms"] - base["p50_ms"], r["p99_ms"] - base["p99_ms"]
            # Each percentile's ratio on its own: a p99 floor that is not above "nothing" (noise at a
            # few hundred creates) must not blank the p50 ratio too.
            ratio = (
                f"{_ratio(add50, floor50)} | {_ratio(add99, floor99)}"
                if column not in ("none", "noop")
                else " | "
            )
            lines.append(
                f"| {label} | {COLUMN_TEXT[column]} | {r['creates']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
                f" {add50:+.2f} | {add99:+.2f} | {ratio} |"
            )
        for column in ("shipped", "all"):
            ratio_all = cr[f"{column}/{pod}"]["p50_ms"] / base["p50_ms"]
            lines.append(f"| {label} | {column} ÷ nothing (p50) | | {ratio_all:.2f}x | | | | | |")
    if results.get("spread"):
        lines += SPREAD_HEAD
        lines += [_spread_line(f"settled, {pod} pod", results["spread"][pod]) for pod in ("gpu", "plain")]
    burst = results.get("burst")
    if burst:
        bc = burst["creates"]
        base, floor = bc["none"], bc["noop"]
        floor50, floor99 = floor["p50_ms"] - base["p50_ms"], floor["p99_ms"] - base["p99_ms"]
        lines += [
            "",
            f"Burst into full pools while the operator works ({burst['pods']} GPU pods created,"
            f" {burst['pending_at_end']} Pending at the end; a rollout started each round;"
            f" {burst['seconds']:.0f} s; CPU seconds over the scenario: operator"
            f" {burst['cpu_s']['operator']:.1f}, webhook {burst['cpu_s']['webhook']:.1f}"
            f"{' (the same process)' if results.get('webhook_process') == 'shared' else ''}):",
            "",
            "| installed | creates | p50 ms | p99 ms | added p50 ms | added p99 ms | added ÷ no-op's p50 | p99 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for column in BURST_COLUMNS:
            r = bc[column]
            add50, add99 = r["p50_ms"] - base["p50_ms"], r["p99_ms"] - base["p99_ms"]
            ratio = f"{_ratio(add50, floor50)} | {_ratio(add99, floor99)}" if column == "shipped" else " | "
            lines.append(
                f"| {COLUMN_TEXT[column]} | {r['creates']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
                f" {add50:+.2f} | {add99:+.2f} | {ratio} |"
            )
        if burst.get("spread"):
            lines += [*SPREAD_HEAD, _spread_line("burst, GPU pod", burst["spread"])]
    lines += [
        "",
        "The apiserver's own figures (GPU pods; milliseconds per created pod; the matchConditions are"
        " the webhook plugin's time less its call):",
        "",
        "| figure | column | calls | ms per pod |",
        "|---|---|---:|---:|",
    ]
    rows = (
        ("the call to the no-op webhook (apiserver_admission_webhook_admission_duration_seconds)", "noop", "noop_call"),
        ("the webhook plugin: matchConditions + that call (apiserver_admission_controller_admission_duration_seconds)",
         "noop", "webhook_plugin"),
        ("the call to the gpushare webhook", "shipped", "webhook_call"),
        ("the rules inside it (gpushare_admission_duration_seconds)", "shipped", "rules"),
        ("the webhook plugin: matchConditions + that call", "shipped", "webhook_plugin"),
        ("the policy plugin (no policy installed)", "shipped", "policy_plugin"),
        ("the call to the gpushare webhook", "all", "webhook_call"),
        ("the webhook plugin", "all", "webhook_plugin"),
        ("the policy plugin: its whole evaluation (same metric, name=ValidatingAdmissionPolicy)", "policy", "policy_plugin"),
        ("the policy plugin", "all", "policy_plugin"),
        ("CPU of the no-op's process during the creates", "noop", "noop_cpu"),
        ("CPU of the gpushare webhook's process during the creates", "shipped", "webhook_cpu"),
        ("CPU of the gpushare webhook's process during the creates", "all", "webhook_cpu"),
    )  # fmt: skip
    for text, column, key in rows:
        f = fig.get(f"{column}/gpu", {})
        lines.append(
            f"| {text} | {COLUMN_TEXT[column]} | {f.get(key + '_calls', 0):.0f} | {f.get(key + '_per_pod_ms', 0):.3f} |"
        )
    lines += [
        "",
        f"Established apiserver connections to the webhook after each GPU phase: {results['path']['webhook_connections_after_gpu_phases']}.",
        "",
        *places_table(results.get("places") or {}),
        "Direct HTTPS AdmissionReview load:",
        "",
        "| pod | load | requests | req/s | p50 ms | p99 ms | webhook CPU ms/request |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    lines.extend(
        f"| {row['pod']} | {row['concurrency']} | {row['requests']} | {row['rps']:.0f} | "
        f"{row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['server_cpu_ms_per_request']:.2f} |"
        for row in results["direct"]
    )
    lines += [
        "",
        "Rules engine alone (CPU time per decision, context cached as the webhook does):",
        "",
        "| nodes | GPU pod µs | non-GPU pod µs | rebuilding the context ms |",
        "|---:|---:|---:|---:|",
        *(
            f"| {n} | {e['gpu_us']:.0f} | {e['plain_us']:.1f} | {e['fresh_context_ms']:.1f} |"
            for n, e in results["engine"].items()
        ),
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="direct requests per (pod, concurrency)")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated concurrencies")
    parser.add_argument("--creates", type=int, default=200, help="pod creates per (pod, installed) phase")
    parser.add_argument("--rounds", type=int, default=2, help="alternating none/all rounds")
    parser.add_argument("--rate", type=float, default=500.0, help="open-loop direct requests per second")
    parser.add_argument("--via-kopf", action="store_true", help="run the webhook with --webhook-via-kopf")
    parser.add_argument("--nodes", type=int, default=30, help="kwok GPU nodes (split over 3 node pools)")
    parser.add_argument(
        "--burst", type=int, default=50,
        help="GPU pods per column and round of the burst scenario (full pools, the operator working; 0 = off)",
    )  # fmt: skip
    parser.add_argument(
        "--webhook-process", choices=("own", "shared"), default="own",
        help="own: the webhook in a process of its own, as shipped; shared: in the operator's process",
    )  # fmt: skip
    parser.add_argument(
        "--columns", default=",".join(COLUMNS),
        help="the settled scenario's columns, in the order of its first round (rotated each round); "
        "none, noop and shipped are needed",
    )  # fmt: skip
    parser.add_argument(
        "--keep-configuration", action="store_true",
        help="leave gpushare's webhook configuration in place between the gpushare columns that follow each other"
        " (before 2026-12-05; by default it is created anew for each column, as the no-op's is)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    args.concurrency = [int(x) for x in args.concurrency.split(",")]
    columns = tuple(c.strip() for c in args.columns.split(",") if c.strip())
    unknown = sorted(set(columns) - set(COLUMN_TEXT))
    if unknown or not {"none", "noop", "shipped"} <= set(columns) or len(set(columns)) != len(columns):
        parser.error(
            f"--columns {args.columns!r}: each of {', '.join(COLUMN_TEXT)} at most once,"
            " none, noop and shipped included"
        )
    args.columns = columns
    try:
        results = asyncio.run(main_async(args))
    except asyncio.CancelledError:
        print(
            "bench_webhook: stopped by SIGTERM; its processes and control plane are stopped", file=sys.stderr
        )
        return 143
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
