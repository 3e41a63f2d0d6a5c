"""Fuzzing the webhook's request handler over real HTTP (hypothesis, a bounded number of inputs).

The server is the one ``gpushare run --webhook`` serves (routes, limits, fast path, direct path
with the rules), here over plain HTTP in a thread of its own. For every input: no 5xx, an
answer (a socket timeout catches a hang), no traceback logged; and a valid review sent after each burst
is still answered with the rules' verdict. docs/security.md.
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
from gpushare.webhook.answer import fast_allow, respond
from gpushare.webhook.server import GPUShareWebhookServer, ServerLimits

MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
#: A hang detector, not a timing: an input still unanswered after this fails with a socket timeout
#: (the slowest seen is milliseconds).
HANG_S = 10.0
#: How many inputs each fuzz test tries (the run's count is printed with -s).
EXAMPLES = 300


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.exc_info or "Traceback" in r.getMessage()]


@dataclass
class Live:
    port: int
    records: _Records
    tried: list[int]

    def post(
        self, path: str, body: bytes, headers: dict[str, str] | None = None, method: str = "POST"
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HANG_S)
        try:
            conn.request(
                method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})}
            )
            resp = conn.getresponse()
            return resp.status, resp.read()
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
        fast_allow=lambda hid, review: fast_allow(hid, review),
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
    out = Live(port, records, [0])
    try:
        yield out
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
        for name in ("gpushare.webhook", "aiohttp"):
            logging.getLogger(name).removeHandler(records)
        print(f"fuzz: {out.tried[0]} inputs tried")
    assert not records.tracebacks(), records.tracebacks()[:3]


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


def _assert_sane(live: Live, status: int, body: bytes) -> None:
    live.tried[0] += 1
    assert status < 500, (status, body[:300])
    if status != 200:
        assert b"\n" not in json.loads(body)["error"].encode(), body[:300]


def _valid_still_judged(live: Live) -> None:
    status, body = live.post("/validate-pods", json.dumps(_review(_pod({MEM: "2", CORE: "33"}))).encode())
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
    _assert_sane(live, *live.post(path, body))


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
    _assert_sane(live, *live.post(f"/{target}", json.dumps(review).encode()))


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
    _assert_sane(live, *live.post("/validate-pods", text.encode(encoding)))


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
    try:
        _assert_sane(live, *live.post("/validate-pods", body, headers, method))
    except (http.client.HTTPException, ConnectionError):
        live.tried[0] += 1  # the server closed a connection whose framing it could not trust


def test_valid_reviews_are_still_judged_after_the_fuzzing(live: Live) -> None:
    _valid_still_judged(live)
    # The 4301-digit replica key, and a review too big for the inline path (the worker thread).
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {"pytorchReplicaSpecs": {"[" + "9" * 4301 + "]": {"template": _pod({MEM: "2", CORE: "33"})}}},
    }
    target = next(t for t in TARGETS if t.plural == "pytorchjobs")
    status, body = live.post(
        f"/{target.handler_id}", json.dumps(_review(job, target.plural, target.group)).encode()
    )
    assert status == 200 and isinstance(json.loads(body)["response"]["allowed"], bool)
    big = _pod({MEM: "2", CORE: "33"})
    big["metadata"]["annotations"] = {f"a{i}": "x" * 100 for i in range(200)}  # about 22 KB
    status, body = live.post("/validate-pods", json.dumps(_review(big)).encode())
    assert status == 200 and "GS001" in json.loads(body)["response"]["status"]["message"]
    assert TARGETS_BY_ID  # (the table the routes came from)
