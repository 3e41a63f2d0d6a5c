"""The webhook server's HTTP/1.1 layer (gpushare/webhook/server.py) over a real socket: keep-alive,
pipelined requests answered in order, HTTP/1.0, HEAD, the head limit, a refused body the client
still sends (its answer must reach it), and shutdown. The hostile-input tests
(tests/integration/test_webhook_hostile.py, tests/unit/test_webhook_fuzz.py) cover the limits."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import kopf
import pytest

from gpushare.admission import EMPTY_CONTEXT
from gpushare.admission.webhook_config import TARGETS, TARGETS_BY_ID
from gpushare.webhook.answer import respond
from gpushare.webhook.server import MAX_HEAD_BYTES, MAX_PIPELINED, GPUShareWebhookServer, ServerLimits

MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
#: Bodies over this go to the worker thread (small here, so that a test can send one).
INLINE = 8 * 1024


def _review(uid: str, core: str = "30") -> bytes:
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "nodeSelector": {"ack.node.gpu.schedule": "core_mem"},
            "containers": [{"name": "c", "resources": {"limits": {MEM: "2", CORE: core}}}],
        },
    }
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "userInfo": {},
                "object": pod,
            },
        }
    ).encode()


def _post(body: bytes, *, version: str = "1.1") -> bytes:
    return (
        f"POST /validate-pods HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _fallback(data: Any, **_: Any) -> Any:
    raise AssertionError("respond answers every review here")


@pytest.fixture
async def served(unused_tcp_port: int) -> AsyncIterator[tuple[int, GPUShareWebhookServer]]:
    server = GPUShareWebhookServer(
        routes={t.handler_id: (t.group, t.plural) for t in TARGETS},
        live_context=lambda: EMPTY_CONTEXT,
        respond=lambda hid, review, context: respond(hid, review, context, TARGETS_BY_ID),
        limits=ServerLimits(
            max_body_bytes=64 * 1024, inline_bytes=INLINE, idle_timeout=5.0, body_timeout=2.0
        ),
        addr="127.0.0.1",
        port=unused_tcp_port,
        insecure=True,
    )
    async with server:  # as Kopf serves it: leaving it closes the server's generator (and socket)
        gen = cast(AsyncGenerator[Any, None], server(cast(kopf.WebhookFn, _fallback)))
        await gen.__anext__()
        yield unused_tcp_port, server
        await gen.aclose()


@pytest.fixture
def port(served: tuple[int, GPUShareWebhookServer]) -> int:
    return served[0]


async def _answers(reader: asyncio.StreamReader, count: int) -> list[tuple[int, dict[str, str], Any]]:
    """``count`` HTTP answers read off ``reader``: (status, headers, JSON body or None if empty)."""
    out = []
    for _ in range(count):
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).decode()
        lines = head.split("\r\n")
        headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
        length = int(headers["content-length"])
        body = await reader.readexactly(length) if length else b""
        out.append((int(lines[0].split()[1]), headers, json.loads(body) if body else None))
    return out


async def _closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), 5) == b""


async def test_pipelined_reviews_are_answered_in_order_on_one_kept_connection(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post(_review("a")) + _post(_review("b", core="33")) + _post(_review("c")))
    answers = await _answers(reader, 3)
    assert [a[0] for a in answers] == [200, 200, 200]
    assert [a[2]["response"]["uid"] for a in answers] == ["a", "b", "c"]
    assert [a[2]["response"]["allowed"] for a in answers] == [True, False, True]
    assert all("connection" not in a[1] and "date" in a[1] for a in answers)
    writer.write(_post(_review("d")))  # still open
    [(status, _, body)] = await _answers(reader, 1)
    assert (status, body["response"]["uid"]) == (200, "d")
    writer.close()


async def test_a_valid_review_then_garbage_gets_its_answer_then_a_400_and_the_close(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post(_review("a")) + b"POST /validate-pods HTTP/1.1\r\nContent-Length: abc\r\n\r\n")
    (ok, _, first), (bad, headers, error) = await _answers(reader, 2)
    assert (ok, first["response"]["uid"], bad) == (200, "a", 400)
    assert headers["connection"] == "close" and "Content-Length" in error["error"]
    assert await _closed(reader)
    writer.close()


async def test_http_1_0_is_answered_and_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post(_review("a"), version="1.0"))
    [(status, headers, body)] = await _answers(reader, 1)
    assert (status, body["response"]["uid"], headers["connection"]) == (200, "a", "close")
    assert await _closed(reader)
    writer.close()


async def test_head_gets_a_405_without_a_body(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"HEAD /validate-pods HTTP/1.1\r\nHost: x\r\n\r\n")
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).decode()
    assert head.startswith("HTTP/1.1 405 Method Not Allowed\r\n") and "Content-Length: " in head
    assert await _closed(reader)  # nothing after the head: no body
    writer.close()


async def test_a_head_over_the_limit_is_a_431(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /validate-pods HTTP/1.1\r\nX-Pad: " + b"a" * (MAX_HEAD_BYTES + 1))
    [(status, headers, body)] = await _answers(reader, 1)
    assert (status, headers["connection"]) == (431, "close")
    assert str(MAX_HEAD_BYTES) in body["error"]
    assert await _closed(reader)
    writer.close()


async def test_a_refused_body_the_client_keeps_sending_still_gets_its_answer(port: int) -> None:
    """A 413 from the head while 1 MiB follows: the server reads and drops the rest before it
    closes, so the client reads the 413 instead of a reset."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b'{"x": "' + b"a" * (1024 * 1024) + b'"}'
    writer.write(_post(body))
    await writer.drain()
    [(status, _, answer)] = await _answers(reader, 1)
    assert status == 413 and "more than the 65536" in answer["error"]
    assert await _closed(reader)
    writer.close()


async def test_requests_pipelined_behind_a_large_body_wait_in_order_up_to_the_limit(port: int) -> None:
    """A body over ``inline_bytes`` is judged in the worker thread; the requests pipelined behind it
    wait, in order. Past ``MAX_PIPELINED`` waiting the server answers those it holds and closes."""
    large = json.loads(_review("big"))
    large["request"]["object"]["metadata"]["annotations"] = {"pad": "a" * (INLINE + 1024)}
    count = MAX_PIPELINED + 3
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post(json.dumps(large).encode()) + b"".join(_post(_review(str(i))) for i in range(count)))
    uids: list[str] = []
    while len(uids) < count + 1:
        try:
            [(status, _, body)] = await _answers(reader, 1)
        except asyncio.IncompleteReadError:  # closed: the limit was reached
            break
        assert status == 200
        uids.append(body["response"]["uid"])
    assert uids == ["big", *(str(i) for i in range(len(uids) - 1))]
    # All of them when they arrived in several reads (reading pauses behind the large one), else
    # the large one and MAX_PIPELINED + 1 behind it.
    assert len(uids) in (count + 1, MAX_PIPELINED + 2), uids
    writer.close()


async def test_stopping_the_server_closes_idle_kept_connections(unused_tcp_port: int) -> None:
    server = GPUShareWebhookServer(
        routes={t.handler_id: (t.group, t.plural) for t in TARGETS},
        live_context=lambda: EMPTY_CONTEXT,
        respond=lambda hid, review, context: respond(hid, review, context, TARGETS_BY_ID),
        addr="127.0.0.1",
        port=unused_tcp_port,
        insecure=True,
    )
    async with server:
        gen = cast(AsyncGenerator[Any, None], server(cast(kopf.WebhookFn, _fallback)))
        await gen.__anext__()
        reader, writer = await asyncio.open_connection("127.0.0.1", unused_tcp_port)
        writer.write(_post(_review("a")))
        [(status, _, _)] = await _answers(reader, 1)
        assert status == 200
        await gen.aclose()
    assert await _closed(reader)  # kept alive, idle: closed when the server stops
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", unused_tcp_port)


async def test_a_client_that_does_not_read_its_answers_is_not_read_either(
    served: tuple[int, GPUShareWebhookServer],
) -> None:
    """Pipelined reviews from a client that reads no answers: once the server's write buffer is
    full it stops reading, so what it holds stays bounded; when the client reads, every review is
    answered, in order. (The client's receive buffer is fixed small, so that the answers cannot all
    wait in the kernel.)"""
    port, server = served
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock, limit=2**20)
    count = 20_000  # 11 MB of reviews, 8 MB of denials: more than the kernel's buffers hold
    transport = cast(asyncio.Transport, writer.transport)
    transport.pause_reading()
    writer.write(_post(_review("a", core="33")) * count)
    for _ in range(40):
        await asyncio.sleep(0.05)
    [conn] = server.connections
    assert conn.transport is not None and conn.transport.get_write_buffer_size() < 1024 * 1024
    transport.resume_reading()
    for _ in range(count):
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        body = json.loads(
            await reader.readexactly(int(answer.split(b"Content-Length: ")[1].split(b"\r\n")[0]))
        )
        assert body["response"]["uid"] == "a" and body["response"]["allowed"] is False
    writer.close()
