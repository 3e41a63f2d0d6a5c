"""The webhook's HTTPS server alone: latency and CPU per review, without a cluster (issue 40).

``make bench-webhook`` measures admission through the real kube-apiserver; this measures what
the webhook process itself spends on one review, with nothing else on the path. Each server runs
in a process of its own, serving the same TLS certificate; one client process sends the same
GPU pod review (``bench_webhook.gpu_pod``: 2 GiB + 30 % on the core_mem pool) sequentially over
one kept-alive TLS connection. Servers, in an order rotated each round:

- ``gpushare/uvloop`` and ``gpushare/asyncio``: ``GPUShareWebhookServer`` with ``respond`` as
  ``gpushare webhook`` wires it (the rules, the clean-allow memo, the metrics), under each event
  loop (``gpushare webhook --event-loop``); the rules read an empty context;
- ``protocol floor``: an ``asyncio.Protocol`` on uvloop's TLS transport with llhttp's parser
  (``httptools``), parsing the review and allowing it: the least a Python webhook on gpushare's
  stack can spend;
- ``aiohttp floor``: aiohttp's low-level server doing the same, on asyncio's loop (the stack
  gpushare's server was built on before);
- ``Go no-op``: bench/noop-webhook (Go ``net/http``), the no-op of ``make bench-webhook``.

Server CPU per review is the server process's user+system time over the requests (from /proc).
Usage: ``python bench/bench_webhook_server.py [--requests 3000] [--rounds 5] [--json out.json]``.
Nothing is asserted: the client shares the machine with the server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_webhook import build_noop, cpu_seconds, gpu_pod, review  # the script's folder is on sys.path

from gpushare.devcluster.cluster import free_port
from gpushare.webhook import tls as certs

SERVERS = ("gpushare/uvloop", "gpushare/asyncio", "protocol floor", "aiohttp floor", "Go no-op")
WARMUP = 200

SERVE = r"""
import asyncio, json, sys
from pathlib import Path
port, cert_dir, which = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]

async def gpushare_server():
    from gpushare.admission import EMPTY_CONTEXT
    from gpushare.admission.webhook_config import TARGETS, TARGETS_BY_ID
    from gpushare.webhook.answer import CleanAllows, respond
    from gpushare.webhook.server import GPUShareWebhookServer

    allows = CleanAllows()
    server = GPUShareWebhookServer(
        routes={t.handler_id: (t.group, t.plural) for t in TARGETS},
        live_context=lambda: EMPTY_CONTEXT,
        respond=lambda hid, rv, ctx: respond(hid, rv, ctx, TARGETS_BY_ID, allows=allows),
        addr="127.0.0.1", port=port, host="127.0.0.1", certfile=str(cert_dir / "tls.crt"),
        pkeyfile=str(cert_dir / "tls.key"), cafile=str(cert_dir / "ca.crt"),
    )

    async def kopf_fallback(data, **_):
        raise RuntimeError("respond answers every review here")

    await server(kopf_fallback).__anext__()

async def floor_server():
    import ssl
    import aiohttp.web

    async def handle(request):
        data = json.loads(await request.read())
        return aiohttp.web.json_response({"apiVersion": data["apiVersion"], "kind": "AdmissionReview",
                                          "response": {"uid": data["request"]["uid"], "allowed": True}})

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    runner = aiohttp.web.ServerRunner(aiohttp.web.Server(handle, access_log=None))
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()

async def protocol_server():
    import ssl
    import httptools

    class Floor(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.parser, self.body = transport, httptools.HttpRequestParser(self), []

        def data_received(self, data):
            self.parser.feed_data(data)

        def on_body(self, body):
            self.body.append(body)

        def on_message_complete(self):
            data, self.body = json.loads(b"".join(self.body)), []
            out = json.dumps({"apiVersion": data["apiVersion"], "kind": "AdmissionReview",
                              "response": {"uid": data["request"]["uid"], "allowed": True}}).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(out), out))

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    await asyncio.get_running_loop().create_server(Floor, "127.0.0.1", port, ssl=context)

async def main():
    servers = {"floor": floor_server, "protocol": protocol_server}
    await servers.get(which, gpushare_server)()
    print("READY", flush=True)
    await asyncio.Event().wait()

from gpushare.cli.run import loop_factory  # what `gpushare webhook --event-loop` runs on

with asyncio.Runner(loop_factory=loop_factory("uvloop" if which in ("uvloop", "protocol") else "asyncio")) as runner:
    runner.run(main())
"""


def start(which: str, port: int, cert_dir: Path, noop: Path) -> subprocess.Popen[bytes]:
    if which == "Go no-op":
        cmd = [str(noop), "-addr", f"127.0.0.1:{port}", "-cert", str(cert_dir / "tls.crt"),
               "-key", str(cert_dir / "tls.key")]  # fmt: skip
    else:
        mode = {"gpushare/uvloop": "uvloop", "gpushare/asyncio": "asyncio", "aiohttp floor": "floor",
                "protocol floor": "protocol"}[which]  # fmt: skip
        cmd = [sys.executable, "-c", SERVE, str(port), str(cert_dir), mode]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def connect(port: int, cafile: Path, limit_s: float = 30.0) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(cafile))
    deadline = time.monotonic() + limit_s
    while True:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        try:
            conn.connect()
            return conn
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def measure(which: str, requests: int, cert_dir: Path, noop: Path, body: bytes) -> dict[str, float]:
    port = free_port()
    proc = start(which, port, cert_dir, noop)
    try:
        conn = connect(port, cert_dir / "ca.crt")
        latencies: list[float] = []
        headers = {"Content-Type": "application/json"}
        cpu0 = 0.0
        for i in range(WARMUP + requests):
            if i == WARMUP:
                cpu0 = cpu_seconds(proc.pid)
            t = time.perf_counter()
            conn.request("POST", "/validate-pods", body=body, headers=headers)
            answer = conn.getresponse().read()
            if i >= WARMUP:
                latencies.append(time.perf_counter() - t)
        cpu = cpu_seconds(proc.pid) - cpu0
        if b'"allowed": true' not in answer and b'"allowed":true' not in answer:
            raise SystemExit(f"{which} did not allow the review: {answer[:200]!r}")
        conn.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "cpu_ms_per_review": cpu / requests * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="reviews per server and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    cert_dir = Path(tempfile.mkdtemp(prefix="gpushare-bench-server-"))
    certs.write_files(certs.renew(None, ["127.0.0.1"], dt.datetime.now(dt.UTC)), cert_dir)
    noop = build_noop()
    obj = gpu_pod()
    obj["metadata"]["uid"] = "6f0c6a52-5b0e-4c59-9f65-3d1c4c1b0d11"
    body = review(obj)
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in SERVERS}
    load = os.getloadavg()[0]
    for r in range(args.rounds):
        for which in SERVERS[r % len(SERVERS) :] + SERVERS[: r % len(SERVERS)]:
            runs[which].append(measure(which, args.requests, cert_dir, noop, body))
        print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    print(
        f"{args.requests} sequential reviews per server and round, {args.rounds} rounds, one kept-alive TLS"
        f" connection, a {len(body)}-byte GPU pod review; load average {load:.1f} at start,"
        f" {os.getloadavg()[0]:.1f} at end\n"
    )
    print("| server | p50 ms, median (range) | p99 ms, median | server CPU ms / review, median (range) |")
    print("|---|---:|---:|---:|")
    for which in SERVERS:
        p50 = [x["p50_ms"] for x in runs[which]]
        p99 = [x["p99_ms"] for x in runs[which]]
        cpu = [x["cpu_ms_per_review"] for x in runs[which]]
        print(
            f"| {which} | {statistics.median(p50):.3f} ({min(p50):.3f} .. {max(p50):.3f}) |"
            f" {statistics.median(p99):.3f} |"
            f" {statistics.median(cpu):.3f} ({min(cpu):.3f} .. {max(cpu):.3f}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
