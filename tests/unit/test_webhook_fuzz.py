"""Fuzzing the webhook's request handler over real HTTP (hypothesis, a bounded number of inputs).

The server is the one ``gpushare run --webhook`` serves (routes, limits, fast path, direct path
with the rules), here over plain HTTP in a thread of its own. For every input: no 5xx, an
answer (a socket timeout catches a hang), no traceback and no warning logged; and a valid review
sent right after it is still answered with the rules' verdict. docs/security.md.

A connection the server drops (reset, or closed before a whole answer) fails the input, unless
the server logged a deliberate cut-off for that very connection (its client port): a limit, a
timeout, malformed HTTP. An error answer lost to a reset, or a crash that resets the socket
without saying why, is a failure, not a pass.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
import threading
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from typing import Any, cast

import kopf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpushare.admission import EMPTY_CONTEXT
from gpushare.admission.webhook_config import TARGETS, TARGETS_BY_ID
from gpushare.webhook.answer import respond
from gpushare.webhook.server import GPUShareWebhookServer, ServerLimits

MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
#: A hang detector, not a timing: an input still unanswered after this fails with a socket timeout
#: (the slowest seen is milliseconds).
HANG_S = 10.0
#: How many inputs each fuzz test tries (the run's count is printed with -s).
EXAMPLES = 300
#: What the server logs, naming the client's host:port, when it cuts a connection off on purpose
#: (gpushare.webhook.server: malformed HTTP, too many connections, a body over the limit left
#: unread, a body timeout): only then may that connection end without an answer.
DELIBERATE = (
    "Malformed webhook HTTP request from",
    "Closed a webhook connection from",
    " refused unread: ",
    " refused: more than ",
    "body not received within",
)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def alarms(self, since: int = 0) -> list[str]:
        """Tracebacks and warnings logged from record ``since`` on: none is expected."""
        return [
            r.getMessage()
            for r in self.records[since:]
            if r.exc_info or r.levelno >= logging.WARNING or "Traceback" in r.getMessage()
        ]

    def about(self, client: str, since: int = 0) -> list[str]:
        return [m for r in self.records[since:] if client in (m := r.getMessage())]


@dataclass
class Live:
    port: int
    records: _Records
    tried: list[int]
    refused: list[int]

    def post(
        self, path: str, body: bytes, headers: dict[str, str] | None = None, method: str = "POST"
    ) -> tuple[int, bytes] | None:
        """The answer, or None when the server cut the connection off and logged why for this
        connection; a drop it gives no reason for fails the test."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HANG_S)
        try:
            conn.connect()
            assert conn.sock is not None
            client = f"127.0.0.1:{conn.sock.getsockname()[1]}"
            since = len(self.records.records)
            try:
                conn.request(
                    method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})}
                )
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, ConnectionError) as exc:  # not a timeout: a hang fails
                said = self.records.about(client, since)
                if not any(d in line for line in said for d in DELIBERATE):
                    pytest.fail(
                        f"{method} {path[:60]}: the server dropped the connection from {client}"
                        f" ({type(exc).__name__}: {exc}) without logging a deliberate cut-off for it;"
                        f" its lines for it: {said}",
                        pytrace=False,
                    )
                self.refused[0] += 1
                return None
        finally:
            conn.close()


async def _kopf_fallback(data: Any, **_: Any) -> Any:
    """Stands in for Kopf's dispatch (reached only for reviews without an object)."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "x", "allowed": True},
    }


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = GPUShareWebhookServer(
        routes={t.handler_id: (t.group, t.plural) for t in TARGETS},
        live_context=lambda: EMPTY_CONTEXT,
        respond=lambda hid, review, context: respond(hid, review, context, TARGETS_BY_ID),
        limits=ServerLimits(
            max_body_bytes=64 * 1024, inline_bytes=8 * 1024, body_timeout=0.5, idle_timeout=2.0
        ),
        addr="127.0.0.1",
        port=port,
        insecure=True,
    )
    records = _Records()
    for name in ("gpushare.webhook", "aiohttp"):
        logging.getLogger(name).addHandler(records)
    webhook_logger = logging.getLogger("gpushare.webhook")
    level = webhook_logger.level
    webhook_logger.setLevel(logging.DEBUG)  # the cut-off lines are debug lines
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()

    async def serve() -> None:
        async with server:  # as Kopf serves it: leaving closes the inner generator (and the socket)
            gen = cast(AsyncGenerator[Any, None], server(cast(kopf.WebhookFn, _kopf_fallback)))
            await gen.__anext__()
            ready.set()
            await stop.wait()
            await gen.aclose()
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:  # connections still open (keep-alive) when the server stopped
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    out = Live(port, records, [0], [0])
    try:
        yield out
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
        for name in ("gpushare.webhook", "aiohttp"):
            logging.getLogger(name).removeHandler(records)
        webhook_logger.setLevel(level)
        print(f"fuzz: {out.tried[0]} inputs tried, {out.refused[0]} cut off deliberately")


def _review(obj: Any, resource: str = "pods", group: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "resource": {"group": group, "version": "v1", "resource": resource},
            "operation": "CREATE",
            "userInfo": {},
            "object": obj,
        },
    }


def _pod(limits: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "nodeSelector": {"ack.node.gpu.schedule": "core_mem"},
            "containers": [{"name": "c", "resources": {"limits": limits}}],
        },
    }


def _answer(live: Live, path: str, body: bytes) -> tuple[int, bytes]:
    """A request that must be answered (a valid review: nothing to cut off)."""
    answer = live.post(path, body)
    assert answer is not None, f"{path}: a valid review was cut off"
    return answer


def _assert_sane(live: Live, answer: tuple[int, bytes] | None, since: int) -> None:
    """One fuzz input: answered sanely (or cut off with a reason logged, checked in post), nothing
    alarming logged, and the server still judges a valid review right after it."""
    live.tried[0] += 1
    if answer is not None:
        status, body = answer
        assert status < 500, (status, body[:300])
        if status != 200:
            assert b"\n" not in json.loads(body)["error"].encode(), body[:300]
    _valid_still_judged(live)
    assert not live.records.alarms(since), live.records.alarms(since)[:3]


def _valid_still_judged(live: Live) -> None:
    status, body = _answer(live, "/validate-pods", json.dumps(_review(_pod({MEM: "2", CORE: "33"}))).encode())
    assert status == 200
    answer = json.loads(body)["response"]
    assert answer["allowed"] is False and "GS001" in answer["status"]["message"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)
paths = st.sampled_from(["/validate-pods", "/validate-jobs", "/", "/x", "/validate-pods/"]) | st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30
).map(lambda t: "/" + t.replace("?", "").replace("#", ""))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=4096), path=paths)
def test_random_bytes_on_any_path(live: Live, body: bytes, path: str) -> None:
    since = len(live.records.records)
    _assert_sane(live, live.post(path, body), since)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    limits=json_values,
    request_extra=st.dictionaries(
        st.sampled_from(["uid", "resource", "operation", "userInfo", "object", "oldObject", "kind"]),
        json_values,
    ),
    target=st.sampled_from([t.handler_id for t in TARGETS]),
)
def test_mutated_reviews(live: Live, limits: Any, request_extra: dict[str, Any], target: str) -> None:
    review = _review(_pod(limits))
    review["request"].update(request_extra)
    since = len(live.records.records)
    _assert_sane(live, live.post(f"/{target}", json.dumps(review).encode()), since)


@settings(
    max_examples=EXAMPLES // 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    depth=st.integers(0, 30_000),
    opener=st.sampled_from([b"[", b'{"a":', b'["\\"",']),
    escapes=st.integers(0, 20_000),
    encoding=st.sampled_from(["utf-8", "utf-16", "utf-32", "utf-16-le"]),
)
def test_deep_escaped_and_encoded_bodies(
    live: Live, depth: int, opener: bytes, escapes: int, encoding: str
) -> None:
    text = (b'{"kind":"AdmissionReview","x":"' + b'\\"' * escapes + b'","y":' + opener * depth).decode()
    since = len(live.records.records)
    _assert_sane(live, live.post("/validate-pods", text.encode(encoding)), since)


@settings(
    max_examples=EXAMPLES // 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    encoding=st.sampled_from(["gzip", "deflate", "br", "identity", "", "x" * 50]),
    length=st.sampled_from([None, 0, 5, 10**9, -1]),
    method=st.sampled_from(["POST", "PUT", "GET", "DELETE"]),
)
def test_headers_and_methods(live: Live, encoding: str, length: int | None, method: str) -> None:
    headers = {"Content-Encoding": encoding}
    body = json.dumps(_review(_pod({MEM: "2"}))).encode()
    if length is not None:
        headers["Content-Length"] = str(length)
        body = body[: max(0, min(length, len(body)))]
    since = len(live.records.records)
    _assert_sane(live, live.post("/validate-pods", body, headers, method), since)


def test_odd_and_large_valid_reviews_are_judged(live: Live) -> None:
    # The 4301-digit replica key, and a review too big for the inline path (the worker thread).
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {"pytorchReplicaSpecs": {"[" + "9" * 4301 + "]": {"template": _pod({MEM: "2", CORE: "33"})}}},
    }
    target = next(t for t in TARGETS if t.plural == "pytorchjobs")
    status, body = _answer(
        live, f"/{target.handler_id}", json.dumps(_review(job, target.plural, target.group)).encode()
    )
    assert status == 200 and isinstance(json.loads(body)["response"]["allowed"], bool)
    big = _pod({MEM: "2", CORE: "33"})
    big["metadata"]["annotations"] = {f"a{i}": "x" * 100 for i in range(200)}  # about 22 KB
    status, body = _answer(live, "/validate-pods", json.dumps(_review(big)).encode())
    assert status == 200 and "GS001" in json.loads(body)["response"]["status"]["message"]
    assert not live.records.alarms(), live.records.alarms()[:3]
