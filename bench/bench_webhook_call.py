"""The apiserver's call to a webhook, per HTTPS server, behind gpushare's own Pods entry (issue 40).

What part of the latency gpushare's webhook adds to a GPU pod create is its Python HTTPS stack, and
what part its rules and bookkeeping. The kwok cluster of ``bench_webhook.py`` (``--nodes`` GPU
nodes in the three example pools, ``gpushare run`` settled and left running, ``gpushare webhook``
in its own process, as shipped), then one ValidatingWebhookConfiguration holding gpushare's
``validate-pods`` entry exactly as the webhook registers it (rules, ``matchConditions``,
selectors, timeout), aimed in turn at each server:

- ``gpushare``: ``gpushare webhook``, the product;
- ``protocol floor``: the same stack (uvloop, the event loop's TLS, llhttp's parser through
  ``httptools``) parsing the review and allowing it, nothing else (``bench_webhook_server.py``'s);
- ``Go no-op (HTTP/2)`` and ``Go no-op (HTTP/1.1)``: bench/noop-webhook, Go ``net/http``, which
  decodes the review and allows it; the apiserver talks HTTP/2 to it unless the server turns it
  off (``GODEBUG=http2server=0``). gpushare's server speaks HTTP/1.1;
- ``nothing``: no configuration (the baseline of "added").

With ``--workload-policy`` the shipped workload kinds' ValidatingAdmissionPolicy and its binding
(what the chart installs beside the webhook; no Pod matches it) are installed for the whole run,
so every server, nothing included, is measured beside it. With ``--churn-policy`` that policy is
deleted and created again before each server's phase, as ``bench_webhook.py``'s columns do.

Every server uses the same certificate. In each of ``--rounds`` rounds, in an order rotated each
round, ``--creates`` sequential dry-run creates of the benchmark's GPU pod per server (dry run:
admission runs, nothing is stored, so nothing piles up over the run). Per server: the client's
p50 and what it adds to nothing's; the apiserver's own time for the call
(``apiserver_admission_webhook_admission_duration_seconds``, which the creates alone feed); the
server process's CPU per create (/proc: everything the process did meanwhile).

Usage: python bench/bench_webhook_call.py [--nodes 30] [--creates 300] [--rounds 6]
       [--workload-policy | --churn-policy]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_webhook import (  # the script's folder is on sys.path
    BENCH_NS,
    CONFIGURATION,
    build_noop,
    cpu_seconds,
    deployment_of,
    dry_run,
    gpu_pod,
    metric_sums,
    prepared_cluster,
    rotated,
    start_gpushare,
    stop_webhook,
    wait_pools_settled,
    wait_webhook_answers,
)
from bench_webhook_server import SERVE
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.admission.vap import POLICY_NAME, build_binding, build_policies
from gpushare.devcluster.cluster import free_port

SERVERS = ("nothing", "gpushare", "protocol floor", "Go no-op (HTTP/2)", "Go no-op (HTTP/1.1)")
NAME = "gpushare-bench-call"
HOOK = "validate-pods.gpushare.io"
CALL = "apiserver_admission_webhook_admission_duration_seconds"
WARMUP = 20


def start_floor(port: int, cert_dir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", SERVE, str(port), str(cert_dir), "protocol"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def start_go(binary: Path, port: int, cert_dir: Path, http2: bool) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **({} if http2 else {"GODEBUG": "http2server=0"}))
    return subprocess.Popen(
        [str(binary), "-addr", f"127.0.0.1:{port}", "-cert", str(cert_dir / "tls.crt"),
         "-key", str(cert_dir / "tls.key")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env,
    )  # fmt: skip


async def churn_policy(api: client.ApiClient) -> None:
    """Delete the workload kinds' policy and its binding and create them again, as
    ``bench_webhook.py``'s columns do; wait until the new one denies a 33 % Deployment."""
    adm = client.AdmissionregistrationV1Api(api)
    for delete in (adm.delete_validating_admission_policy_binding, adm.delete_validating_admission_policy):
        with contextlib.suppress(ApiException):
            await delete(POLICY_NAME)
    workloads = next(p for p in build_policies() if p["metadata"]["name"] == POLICY_NAME)
    creations: tuple[tuple[Any, dict[str, Any]], ...] = (
        (adm.create_validating_admission_policy, workloads),
        (adm.create_validating_admission_policy_binding, build_binding(POLICY_NAME)),
    )
    for create, body in creations:
        while True:
            try:
                await create(body)
                break
            except ApiException as exc:  # 409: the deletion is not through yet
                if exc.status != 409:
                    raise
                await asyncio.sleep(0.2)
    bad = gpu_pod("probe-33")
    bad["spec"]["containers"][0]["resources"]["limits"][c.RES_GPU_CORE] = "33"
    deadline = time.monotonic() + 120
    while f"ValidatingAdmissionPolicy '{POLICY_NAME}'" not in await dry_run(api, deployment_of(bad)):
        if time.monotonic() > deadline:
            raise TimeoutError("the re-created workload policy never acted")
        await asyncio.sleep(0.5)


async def aim(api: client.ApiClient, entry: dict[str, Any], port: int | None, churn: bool = False) -> None:
    """Our configuration aimed at ``port`` (None: no configuration); the apiserver given a moment to
    see it, then warmed up (its client to the server is built on the first call). ``churn``: the
    workload kinds' policy re-created first."""
    if churn:
        await churn_policy(api)
    adm = client.AdmissionregistrationV1Api(api)
    with contextlib.suppress(ApiException):
        await adm.delete_validating_webhook_configuration(NAME)
    if port is not None:
        hook = json.loads(json.dumps(entry))
        hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}/validate-pods"
        body = {"metadata": {"name": NAME}, "webhooks": [hook]}
        await adm.create_validating_webhook_configuration(body)  # type: ignore[arg-type]
    await asyncio.sleep(1.5)
    core = client.CoreV1Api(api)
    for i in range(WARMUP):
        await core.create_namespaced_pod(BENCH_NS, gpu_pod(f"warm-{i}"), dry_run="All")  # type: ignore[arg-type]


async def creates(api: client.ApiClient, count: int) -> list[float]:
    core = client.CoreV1Api(api)
    out: list[float] = []
    for i in range(count):
        start = time.perf_counter()
        await core.create_namespaced_pod(BENCH_NS, gpu_pod(f"p-{i}"), dry_run="All")  # type: ignore[arg-type]
        out.append(time.perf_counter() - start)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    async with prepared_cluster(args.nodes) as (info, api):
        cert_dir = Path(tempfile.mkdtemp(prefix="gpushare-bench-call-"))
        port = free_port()
        webhook, operator = await asyncio.to_thread(
            start_gpushare, info.kubeconfig, port, cert_dir, free_port(), False, False
        )
        procs: dict[str, subprocess.Popen[bytes]] = {"gpushare": webhook}
        try:
            await wait_webhook_answers(api)  # the certificate files are written by then
            await wait_pools_settled(api)
            adm = client.AdmissionregistrationV1Api(api)
            shipped = api.sanitize_for_serialization(
                await adm.read_validating_webhook_configuration(CONFIGURATION)
            )
            entry = next(h for h in shipped["webhooks"] if h["name"] == HOOK)
            await adm.delete_validating_webhook_configuration(CONFIGURATION)  # ours alone from here
            go = await asyncio.to_thread(build_noop)
            ports = {"gpushare": port}
            for which in SERVERS[2:]:
                ports[which] = free_port()
                procs[which] = (
                    start_floor(ports[which], cert_dir)
                    if which == "protocol floor"
                    else start_go(go, ports[which], cert_dir, http2="HTTP/2" in which)
                )
            if args.workload_policy and not args.churn_policy:
                workloads = next(p for p in build_policies() if p["metadata"]["name"] == POLICY_NAME)
                await adm.create_validating_admission_policy(workloads)  # type: ignore[arg-type]
                await adm.create_validating_admission_policy_binding(build_binding(POLICY_NAME))  # type: ignore[arg-type]
            await asyncio.sleep(3)  # the floor's interpreter starts (and the policy is compiled)
            url = f"{info.server.rstrip('/')}/metrics"
            auth = {"Authorization": f"Bearer {info.token}"}
            names = (f"{CALL}_sum", f"{CALL}_count")
            runs: dict[str, dict[str, list[float]]] = {s: {"lat": [], "call": [], "cpu": []} for s in SERVERS}
            load = os.getloadavg()[0]
            for r in range(args.rounds):
                for which in rotated(SERVERS, r):
                    await aim(api, entry, ports.get(which), args.churn_policy)
                    before = await metric_sums(url, names, f'name="{HOOK}"', auth, info.ca_path)
                    cpu0 = cpu_seconds(procs[which].pid) if which in procs else 0.0
                    lat = await creates(api, args.creates)
                    cpu1 = cpu_seconds(procs[which].pid) if which in procs else 0.0
                    after = await metric_sums(url, names, f'name="{HOOK}"', auth, info.ca_path)
                    calls = after[names[1]] - before[names[1]]
                    want = 0 if which == "nothing" else args.creates
                    if calls != want:
                        raise RuntimeError(
                            f"{which}: the apiserver called the webhook {calls:g} times, not {want}"
                        )
                    runs[which]["lat"].extend(lat)
                    if calls:
                        runs[which]["call"].append(1000 * (after[names[0]] - before[names[0]]) / calls)
                        runs[which]["cpu"].append(1000 * (cpu1 - cpu0) / args.creates)
                print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr)
            await aim(api, entry, None)
            return {"nodes": args.nodes, "creates": args.creates, "rounds": args.rounds, "runs": runs,
                    "workload_policy": args.workload_policy,
                    "churn_policy": args.churn_policy,
                    "load_average": (load, os.getloadavg()[0])}  # fmt: skip
        finally:
            for proc in [*procs.values(), *([operator] if operator is not None else [])]:
                await asyncio.to_thread(stop_webhook, proc)


def render(results: dict[str, Any]) -> str:
    runs = results["runs"]
    base = statistics.median(runs["nothing"]["lat"]) * 1000
    load = results["load_average"]
    lines = [
        f"{results['creates']} sequential dry-run GPU pod creates per server and round,"
        f" {results['rounds']} rounds (order rotated), {results['nodes']} kwok nodes;"
        f" load average {load[0]:.1f} at start, {load[1]:.1f} at end"
        + ("; the workload kinds' policy installed throughout" if results.get("workload_policy") else "")
        + (
            "; the workload kinds' policy re-created before each server"
            if results.get("churn_policy")
            else ""
        ),
        "",
        "| server | p50 ms | added p50 ms | added ÷ Go no-op (HTTP/2)'s | apiserver's call ms,"
        " median of rounds (range) | server CPU ms / create, median of rounds (range) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    floor = statistics.median(runs["Go no-op (HTTP/2)"]["lat"]) * 1000 - base
    for which in SERVERS:
        run = runs[which]
        p50 = statistics.median(run["lat"]) * 1000
        added = p50 - base
        ratio = f"{added / floor:.2f}x" if which != "nothing" and floor > 0 else ""

        def ranged(xs: list[float]) -> str:
            return f"{statistics.median(xs):.3f} ({min(xs):.3f} .. {max(xs):.3f})" if xs else ""

        lines.append(
            f"| {which} | {p50:.2f} | {added:+.2f} | {ratio} | {ranged(run['call'])} | {ranged(run['cpu'])} |"
        )
    lines += ["", "The apiserver's call per round (ms):", ""]
    for which in SERVERS[1:]:
        lines.append(f"- {which}: " + ", ".join(f"{x:.2f}" for x in runs[which]["call"]))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=30, help="kwok GPU nodes (split over 3 node pools)")
    parser.add_argument("--creates", type=int, default=300, help="dry-run creates per server and round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--workload-policy",
        action="store_true",
        help="the shipped workload kinds' policy installed throughout",
    )
    parser.add_argument(
        "--churn-policy",
        action="store_true",
        help="re-create the workload kinds' policy before each server (as bench_webhook.py's columns do)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    try:
        results = asyncio.run(main_async(args))
    except asyncio.CancelledError:
        print(
            "bench_webhook_call: stopped by SIGTERM; its processes and control plane are stopped",
            file=sys.stderr,
        )
        return 143
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
