"""The webhook's HTTPS server: bounded work per request, never a 5xx, never a stalled event loop.

HTTP/1.1 over the event loop's TLS transport, parsed by llhttp (``httptools``, uvicorn's parser),
answered in an ``asyncio.Protocol`` of its own (``_Connection``). A review is answered inside the
parser's callback: no task, request object or response object per review. On the 2-core machine
that is 0.14 ms of CPU per review where aiohttp's low-level server, which served it before, took
0.22 ms, and its empty server (parse, allow) 0.16 (bench/bench_webhook_server.py).

The webhook may share its event loop with the reconciler (``gpushare run --webhook``), and any
pod in the cluster can reach its port, so the server is built for hostile input
(docs/security.md):

* **Routes.** Only ``POST /<handler-id>`` of the configured handlers; any other path is a 404 and
  any other method a 405, both answered from the request head. A review for another resource
  than the handler's is a 400: nothing is allowed by a wrong path.
* **Bounded bodies.** At most ``limits.max_body_bytes`` (a larger Content-Length is refused before
  reading), read within ``limits.body_timeout`` seconds; ``Content-Encoding`` other than
  ``identity`` is a 415 (the apiserver never compresses a review). UTF-8 only, nesting at most
  ``MAX_REVIEW_DEPTH``, checked in one linear scan before parsing. A request head of more than
  ``MAX_HEAD_BYTES`` is a 431; at most ``MAX_PIPELINED`` requests of one connection wait while
  an earlier one is answered (reading pauses), then it is closed.
* **Bounded loop time.** Bodies up to ``limits.inline_bytes`` are checked, parsed and judged on
  the event loop (about 0.1 ms for a real review). Larger ones go to one worker
  thread, one at a time (at most ``limits.max_queued`` waiting, then 429): the loop keeps
  serving other reviews and reconciling while a large one is parsed and judged.
* **Slow clients.** A connection that has not sent a complete request head within
  ``limits.idle_timeout`` seconds of opening (or of its last answer) is closed, and so is a body
  not read within ``limits.body_timeout``. At most ``limits.max_connections`` connections are
  open; more are closed as they arrive.
* **Errors.** Every decoding, parsing and evaluation error is a 4xx with one line; a failure in
  the rules is answered as the failure policy says (``Fail``: denied, code 400; ``Ignore``:
  allowed with a warning). A 4xx other than Kopf's 403 closes the connection after it. Malformed
  or aborted HTTP requests log one line at debug level, never a traceback; so does every
  connection the server cuts off on purpose (a limit, a timeout), naming the client's host:port.
  An exception that escapes the answer (a bug) logs one warning line and is a 400.
* **Stopping.** On a certificate change or shutdown the listening socket closes; idle
  connections close at once and the others after their answer (at most 10 s).

Hooks (all optional): ``prepare`` runs before the first bind (write the certificate files),
``on_listening`` after every (re)bind with the client config (keep caBundle current),
``background`` runs while the server lives (certificate renewal), ``live_context()`` returns the
rules' live context (read on the event loop, None until ready) and ``respond(handler_id, review,
context)`` answers a well-formed review (``gpushare.webhook.answer.respond``: routing, the fast
path and the rules; None: let Kopf answer). The server decides nothing about admission: what a
review means is all in ``respond`` and ``failure_response``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import logging
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote

import httptools
import kopf

from gpushare.admission import Context
from gpushare.admission.review import (
    MAX_REVIEW_BYTES,
    denial_review,
    parse_review,
    raw_review_problem,
    review_problem,
)
from gpushare.webhook.answer import failure_response

logger = logging.getLogger("gpushare.webhook")

#: The oldest TLS version the webhook accepts (the kube-apiserver speaks 1.2 and 1.3).
MINIMUM_TLS_VERSION = ssl.TLSVersion.TLSv1_2

Hook = Callable[[], Coroutine[Any, Any, None]]
ListeningHook = Callable[[kopf.WebhookClientConfig], Awaitable[None]]
ContextFn = Callable[[], "Context | None"]
#: ``respond(handler_id, review, context)``: the AdmissionReview ``response`` for a well-formed
#: review (``context`` None until the indexes are handed over), or None to let Kopf answer it.
Respond = Callable[[str, Mapping[str, Any], "Context | None"], "dict[str, Any] | None"]


#: The most ``--webhook-max-body-bytes`` may say: the apiserver's own request limit (3 MiB).
MAX_BODY_CEILING = 3 * 1024 * 1024


@dataclass(frozen=True)
class ServerLimits:
    """What one client may cost the webhook (docs/security.md)."""

    max_body_bytes: int = MAX_REVIEW_BYTES
    #: Bodies up to this size are answered on the event loop; larger ones in the worker thread.
    inline_bytes: int = 64 * 1024
    #: Large bodies waiting for the worker thread before more are refused with 429.
    max_queued: int = 8
    #: Seconds a connection may take to send a request head (after opening or its last answer).
    idle_timeout: float = 15.0
    #: Seconds to receive a whole body.
    body_timeout: float = 10.0
    max_connections: int = 256


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: a status and a JSON body."""

    status: int
    body: dict[str, Any]


def bad_request(message: str, status: int = 400) -> Reply:
    return Reply(status, {"error": message})


def peer(transport: asyncio.BaseTransport | None) -> str:
    """``host:port`` of a connection's client, as the server's log lines name it (one client may
    hold many connections; the port tells them apart)."""
    name = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(name, tuple) and len(name) >= 2:
        host, port = name[0], name[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return "an unknown peer"


#: The most bytes of a request head (request line and headers): more is a 431 (the apiserver's head
#: is under 1 KiB).
MAX_HEAD_BYTES = 64 * 1024
#: After refusing a request whose body is still arriving: seconds to wait for more of it before
#: closing, and the most seconds to keep reading (and dropping) it.
LINGER_IDLE_S = 0.5
LINGER_S = 5.0
#: Requests of one connection parsed (pipelined) while an earlier one is answered; reading pauses
#: meanwhile, so this bounds what a connection can make the server hold.
MAX_PIPELINED = 4


class _Stop(Exception):
    """Raised in a parser callback: the request is answered already and the connection closes."""


@dataclass
class _Request:
    """One parsed request: what the server reads of it."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    #: The handler the path names (None: no handler there; refused from the head).
    webhook: str | None = None
    body: bytes = b""
    keep_alive: bool = False
    #: The answer already decided while parsing (malformed, refused from its head, too large, too
    #: slow): given in turn, then the connection closes.
    answer: Reply | None = None

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


_REASONS = {s.value: s.phrase for s in HTTPStatus}
_DATE: list[Any] = [0, b""]  # (second, the Date header's value) cached: one format per second


def _http_date() -> bytes:
    now = int(time.time())
    if _DATE[0] != now:
        _DATE[0], _DATE[1] = now, formatdate(now, usegmt=True).encode("ascii")
    return cast(bytes, _DATE[1])


def _encode(status: int, body: dict[str, Any], *, close: bool, head_only: bool = False) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n"
        b"Date: %s\r\n%s\r\n"
        % (
            status,
            _REASONS.get(status, "Unknown").encode("ascii"),
            len(payload),
            _http_date(),
            b"Connection: close\r\n" if close else b"",
        )
    )
    return head if head_only else head + payload


class _Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 parsed by llhttp (``httptools``), answered in order.

    A review whose body is at most ``limits.inline_bytes`` is answered inside the parser's callback,
    on the event loop (no task, no future: what a review costs is what the rules cost). Larger
    bodies and Kopf's handlers are awaited in a task, one at a time per connection; requests the
    client pipelines meanwhile wait, with reading paused."""

    def __init__(self, server: GPUShareWebhookServer, fn: kopf.WebhookFn, open_: set[_Connection]) -> None:
        self.server = server
        self.limits = server.limits
        self.fn = fn
        self.open = open_
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.pending: deque[_Request] = deque()
        self.closing = False
        self.stopped = False
        #: Closing once the request in flight is answered (the server is stopping).
        self.drain = False
        self.lingering = False
        self.linger_until = 0.0
        #: The transport's write buffer is full (the client does not read): reading is paused.
        self.write_paused = False
        #: A request ended in the data being parsed (the head limit does not count that data).
        self.ended = False
        #: Done when the connection is lost (the server's shutdown waits for it).
        self.gone: asyncio.Future[None] = self.loop.create_future()
        self._reset()

    def _reset(self) -> None:
        self.url: list[bytes] = []
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.in_message = False
        self.head_done = False
        self.head_bytes = 0
        #: The request being read, from its complete head on.
        self.request: _Request | None = None

    # --- the connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.open.add(self)
        if len(self.open) > self.limits.max_connections:
            logger.debug(
                "Closed a webhook connection from %s: %d are open", peer(transport), len(self.open) - 1
            )
            self._close()
            return
        self._arm(self.limits.idle_timeout, self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.open.discard(self)
        if not self.gone.done():
            self.gone.set_result(None)
        self.closing = True
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None:
            self.task.cancel()
        if self.in_message and not self.stopped:
            logger.debug("Webhook connection from %s closed in the middle of a request", self._peer())

    def _peer(self) -> str:
        return peer(self.transport)

    def _arm(self, seconds: float, then: Callable[[], None]) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(seconds, then)

    def _close(self) -> None:
        self.closing = True
        if self.timer is not None:
            self.timer.cancel()
        if self.transport is not None:
            self.transport.close()  # after what was written is sent

    def _linger(self) -> None:
        """Close once the client stops sending what is left of a refused request (at most
        ``LINGER_S``): closing with unread bytes would reset the connection, and the client's
        kernel would drop the answer it has not read yet."""
        self.lingering = True
        self.linger_until = self.loop.time() + LINGER_S
        self._arm(LINGER_IDLE_S, self._close)

    def _head_timeout(self) -> None:
        logger.debug(
            "Closed a webhook connection from %s: no complete request head within %gs",
            self._peer(),
            self.limits.idle_timeout,
        )
        self._close()

    def _body_timeout(self) -> None:
        logger.debug(
            "Webhook request from %s to %s: body not received within %ss",
            self._peer(),
            self.request.path[:200] if self.request is not None else "?",
            self.limits.body_timeout,
        )
        self._refuse(bad_request(f"the body did not arrive within {self.limits.body_timeout:g} s", 408))

    def _refuse(self, reply: Reply, *, head_only: bool = False) -> None:
        """Answer the request being parsed with ``reply`` (after those before it) and read no more."""
        self.stopped = True
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None or self.pending:
            self.pending.append(_Request("", "", [], answer=reply))
        else:
            self._send(reply, False, head_only=head_only)

    def stop(self) -> None:
        """The server is stopping: close now if idle, else after the answer in flight."""
        if self.task is None and not self.in_message:
            self._close()
        else:
            self.drain = True

    def data_received(self, data: bytes) -> None:
        if self.lingering:  # the rest of a refused request: dropped
            if not self.closing:
                self._arm(max(0.0, min(LINGER_IDLE_S, self.linger_until - self.loop.time())), self._close)
            return
        if self.closing or self.stopped:
            return
        self.ended = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._malformed("protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            if not self.stopped:  # a callback's _Stop: answered already
                self._malformed(str(exc) or type(exc).__name__)
            return
        if self.in_message and not self.head_done:
            if not self.ended:  # else part of this data ended another request: not counted
                self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._malformed(f"the request head is more than {MAX_HEAD_BYTES} bytes", status=431)

    def _malformed(self, why: str, status: int = 400) -> None:
        line = " ".join(why.split())[:200] or "unreadable request"
        logger.debug("Malformed webhook HTTP request from %s: %s", self._peer(), line)
        self._refuse(bad_request(f"malformed HTTP request: {line}", status))

    # --- httptools' callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._reset()
        self.in_message = True

    def on_url(self, url: bytes) -> None:
        self.url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def _path(self) -> str:
        try:
            path = httptools.parse_url(b"".join(self.url)).path or b"/"
        except httptools.HttpParserInvalidURLError:
            return b"".join(self.url).decode("latin-1")
        text = path.decode("latin-1")
        return unquote(text) if "%" in text else text

    def on_headers_complete(self) -> None:
        self.head_done = True
        server, path = self.server, self._path()
        method = self.parser.get_method().decode("latin-1")
        self.request = request = _Request(method, path, self.headers, server.webhook_id(path))
        early = server.refuse_early(request)
        if early is None:
            declared = request.header("content-length")
            cap = self.limits.max_body_bytes
            if declared is not None and declared.isdigit() and int(declared) > cap:
                logger.debug(
                    "Webhook request from %s to %s refused unread: %s bytes declared, more than %d",
                    self._peer(), path[:200], declared, cap,
                )  # fmt: skip
                early = bad_request(
                    f"malformed AdmissionReview: the body is {declared} bytes, more than the {cap}"
                    " an AdmissionReview may have",
                    status=413,
                )
        if early is not None:
            self._refuse(early, head_only=method == "HEAD")
            raise _Stop()
        self._arm(self.limits.body_timeout, self._body_timeout)

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        cap = self.limits.max_body_bytes
        if self.size > cap:
            logger.debug(
                "Webhook request from %s to %s refused: more than %d bytes sent",
                self._peer(),
                self.request.path[:200] if self.request is not None else "?",
                cap,
            )
            self._refuse(
                bad_request(
                    f"malformed AdmissionReview: the body is more than the {cap} bytes"
                    " an AdmissionReview may have",
                    status=413,
                )
            )
            raise _Stop()
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.ended = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        request = self.request or _Request("", "", [])  # llhttp completes a message after its head
        request.body, request.keep_alive = b"".join(self.chunks), self.parser.should_keep_alive()
        self._reset()
        if self.task is not None or self.pending:
            self.pending.append(request)
            if self.transport is not None:
                self.transport.pause_reading()  # one connection holds at most a few requests
            if len(self.pending) > MAX_PIPELINED:
                self.stopped = True
                raise _Stop()
            return
        self._serve(request)

    # --- answering -------------------------------------------------------------------------------

    def _serve(self, request: _Request) -> None:
        """Answer ``request`` now if it needs no waiting, else in a task (then the next ones)."""
        if request.answer is not None:
            self._send(request.answer, False)
            return
        try:
            now = self.server.answer_now(request)
        except Exception as exc:  # the last guard: a bug here must not become a 500
            now = self.server.unexpected(request, exc)
        if isinstance(now, Reply):
            self._send(now, request.keep_alive, head_only=request.method == "HEAD")
        else:
            self.task = self.loop.create_task(self._later(request, now))

    async def _later(self, request: _Request, screened: Mapping[str, Any] | None) -> None:
        try:
            reply = await self.server.answer_later(self.fn, request, screened, self.transport)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reply = self.server.unexpected(request, exc)
        self.task = None
        if self.closing:
            return
        self._send(reply, request.keep_alive)
        while self.pending and self.task is None and not self.closing:
            self._serve(self.pending.popleft())
        self._resume()

    def _send(self, reply: Reply, keep_alive: bool, *, head_only: bool = False) -> None:
        """Write ``reply``; close after it unless the client keeps the connection and the answer
        is not an error (a client that sent garbage gets no second request on it; 403 is Kopf's
        denial of a review, not the client's fault)."""
        if self.transport is None or self.closing:
            return
        close = (
            self.drain
            or not keep_alive
            or (reply.status >= 400 and reply.status != 403)
            or (self.stopped and not self.pending)
        )
        self.transport.write(_encode(reply.status, reply.body, close=close, head_only=head_only))
        if close:
            if self.in_message:  # refused before its body was all read
                self._linger()
            else:
                self._close()
        elif not self.head_done:  # idle, or the next request's head partly read: its time runs
            self._arm(self.limits.idle_timeout, self._head_timeout)

    def pause_writing(self) -> None:
        """The client is not reading its answers: read no more requests until it does."""
        self.write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._resume()

    def _resume(self) -> None:
        idle = self.task is None and not (self.closing or self.stopped or self.write_paused)
        if idle and self.transport is not None:
            self.transport.resume_reading()


class GPUShareWebhookServer(kopf.WebhookServer):
    def __init__(
        self,
        *,
        routes: Mapping[str, tuple[str, str]] | None = None,
        prepare: Hook | None = None,
        on_listening: ListeningHook | None = None,
        background: Hook | None = None,
        live_context: ContextFn | None = None,
        respond: Respond | None = None,
        failure_policy: str = "Fail",
        limits: ServerLimits = ServerLimits(),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        #: handler id -> the (group, plural) it judges (``respond`` checks a review against it);
        #: None: any path (tests of Kopf's dispatch).
        self.routes = dict(routes) if routes is not None else None
        self.context_fn = live_context
        self.respond = respond
        self.failure_policy = failure_policy
        self.limits = limits
        self.prepare = prepare
        self.on_listening = on_listening
        self.background = background
        self._worker: ThreadPoolExecutor | None = None
        self._lane = asyncio.Semaphore(1)
        self._queued = 0
        #: The open connections of the current bind.
        self.connections: set[_Connection] = set()

    # --- serving -----------------------------------------------------------------------------

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        if self.prepare is not None:
            await self.prepare()
        task = (
            asyncio.create_task(self.background(), name="gpushare-webhook-background")
            if self.background
            else None
        )
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpushare-review")

        loop = asyncio.get_running_loop()
        try:
            while True:  # once per certificate: rebind when the files change
                cadata, context = self._build_ssl()
                open_: set[_Connection] = set()
                self.connections = open_
                port = self.port or self._allocate_free_port()
                server = await loop.create_server(
                    functools.partial(_Connection, self, fn, open_),
                    self.addr or None,
                    port,
                    ssl=context,
                    reuse_port=True,
                    reuse_address=True,
                )
                try:
                    host = self.host or self.DEFAULT_HOST or self._get_accessible_addr(self.addr)
                    url = self._build_url("https" if context else "http", host, port, self.path or "")
                    client_config = kopf.WebhookClientConfig(url=url)
                    if cadata is not None:
                        client_config["caBundle"] = base64.b64encode(cadata).decode("ascii")
                    if self.on_listening is not None:
                        await self.on_listening(client_config)
                    yield client_config
                    await self._until_files_change()
                    logger.info("Webhook certificate files changed: serving the new certificate")
                finally:
                    await _shut(server, open_)
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._worker.shutdown(wait=False, cancel_futures=True)

    async def _until_files_change(self) -> None:
        paths = [Path(p) for p in (self.certfile, self.pkeyfile, self.cafile) if p is not None]

        def digest() -> str:
            return hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()

        first = digest()
        while True:
            await asyncio.sleep(self.file_check_interval)
            with contextlib.suppress(OSError):  # mid-rewrite: look again next time
                if digest() != first:
                    return

    def _build_ssl(self) -> tuple[bytes | None, ssl.SSLContext | None]:
        """Kopf's context, pinned to TLS 1.2+ whatever Python's or OpenSSL's defaults are."""
        cadata, context = super()._build_ssl()
        # MINIMUM_SUPPORTED is -2, so it compares lower too.
        if context is not None and context.minimum_version < MINIMUM_TLS_VERSION:
            context.minimum_version = MINIMUM_TLS_VERSION
        return cadata, context

    # --- one request ---------------------------------------------------------------------------

    def webhook_id(self, path: str) -> str | None:
        """The handler id ``path`` names, or None (no handler there)."""
        prefix = (self.path or "").rstrip("/") + "/"
        if not path.startswith(prefix):
            return None
        webhook = path[len(prefix) :]
        if self.routes is not None and webhook not in self.routes:
            return None
        return webhook

    def refuse_early(self, request: _Request) -> Reply | None:
        """The answer to a request that its head alone decides (wrong path, method or encoding),
        before its body is read; None: read the body."""
        if request.webhook is None:
            return bad_request(f"no admission webhook at {request.path[:200]!r}", status=404)
        if request.method != "POST":
            return bad_request(f"{request.method[:20]} is not allowed: POST an AdmissionReview", status=405)
        encoding = (request.header("content-encoding") or "identity").strip().lower()
        if encoding not in ("", "identity"):
            return bad_request(
                f"Content-Encoding {encoding[:40]!r} is not accepted: send plain JSON", status=415
            )
        return None

    def answer_now(self, request: _Request) -> Reply | Mapping[str, Any] | None:
        """The answer, when it needs no waiting (a body up to ``inline_bytes`` and ``respond``
        answering it); else what ``answer_later`` starts from: the parsed review (Kopf's turn) or
        None (a large body, for the worker thread)."""
        webhook, raw = request.webhook or "", request.body  # refuse_early refused a None
        if len(raw) > self.limits.inline_bytes:
            return None
        screened = self._screen(webhook, raw)
        if isinstance(screened, Reply) or self.respond is None:
            return screened
        context = self.context_fn() if self.context_fn is not None else None
        return _answered(screened, self._respond(webhook, screened, context)) or screened

    async def answer_later(
        self,
        fn: kopf.WebhookFn,
        request: _Request,
        screened: Mapping[str, Any] | None,
        transport: asyncio.BaseTransport | None,
    ) -> Reply:
        """The answer to what ``answer_now`` left: a large body (checked, parsed and judged in the
        worker thread) or a review for Kopf's handlers (the indexes are not handed over yet, or
        ``--webhook-via-kopf``)."""
        webhook = request.webhook or ""
        if screened is None:
            parsed = await self._in_worker(self._screen, webhook, request.body)
            if isinstance(parsed, Reply):
                return parsed
            screened = cast(Mapping[str, Any], parsed)
            if self.respond is not None:
                context = self.context_fn() if self.context_fn is not None else None  # on the loop
                reply = _answered(screened, await self._in_worker(self._respond, webhook, screened, context))
                if reply is not None:
                    return reply
        sslpeer = transport.get_extra_info("peercert") if transport is not None else None
        try:
            response = await fn(
                cast(Any, dict(screened)), webhook=webhook, sslpeer=sslpeer, headers=dict(request.headers)
            )
        except Exception as exc:  # Kopf: unknown resource, missing data, anything else
            return self._failed(webhook, screened, exc)
        return Reply(200, dict(response))

    def unexpected(self, request: _Request, exc: Exception) -> Reply:
        """The last guard: a bug in answering must not become a 500 (one warning line)."""
        logger.warning(
            "Could not serve a webhook request to %s: %s: %s", request.path[:200], type(exc).__name__, exc
        )
        return bad_request(f"gpushare webhook could not handle this request ({type(exc).__name__})")

    async def _in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the one worker thread, one large body at a time (429 past the queue)."""
        if self._queued >= self.limits.max_queued:
            return bad_request("too many large AdmissionReviews at once; try again", status=429)
        self._queued += 1
        try:
            async with self._lane:
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self._worker, fn, *args)
        finally:
            self._queued -= 1

    def _screen(self, webhook: str, raw: bytes) -> Reply | Mapping[str, Any]:
        """Check and parse a body; a Reply when it is answered already (malformed, or allowed by
        the fast path), else the parsed review. Pure CPU: runs on the loop or in the worker."""
        too_much = raw_review_problem(raw, self.limits.max_body_bytes)
        if too_much is not None:  # before parsing: the parser and the rules recurse per level
            logger.info("Rejected a malformed AdmissionReview: %s", too_much)
            return bad_request(
                f"malformed AdmissionReview: {too_much}", status=413 if "bytes" in too_much else 400
            )
        try:
            data = parse_review(raw)
        except (ValueError, RecursionError) as exc:
            return bad_request(f"the body is not JSON: {str(exc)[:200]}")
        problem = review_problem(data)
        if problem is not None:
            uid, text = problem
            logger.info("Rejected a malformed AdmissionReview: %s", text)
            if uid is None:
                return bad_request(f"malformed AdmissionReview: {text}")
            return Reply(200, denial_review(data, uid, f"malformed AdmissionReview: {text}"))
        return cast(Mapping[str, Any], data)

    def _respond(
        self, webhook: str, data: Mapping[str, Any], context: Context | None
    ) -> dict[str, Any] | Reply | None:
        assert self.respond is not None
        try:
            return self.respond(webhook, data, context)
        except Exception as exc:
            return self._failed(webhook, data, exc)

    def _failed(self, webhook: str, data: Mapping[str, Any], exc: Exception) -> Reply:
        """A failure past the shape checks, answered as the failure policy says."""
        return Reply(200, _review(data, failure_response(webhook, data, exc, self.failure_policy)))


async def _shut(server: asyncio.Server, open_: set[_Connection], grace: float = 10.0) -> None:
    """Stop listening; close idle connections now and the others once their answer is sent (at
    most ``grace`` seconds)."""
    server.close()
    for conn in list(open_):
        conn.stop()
    if open_:
        await asyncio.wait([conn.gone for conn in open_], timeout=grace)
    for conn in list(open_):
        if conn.transport is not None:
            conn.transport.abort()
    await server.wait_closed()


def _answered(data: Mapping[str, Any], answer: dict[str, Any] | Reply | None) -> Reply | None:
    """``respond``'s answer to review ``data`` as the HTTP reply (None: it left it to Kopf)."""
    if answer is None or isinstance(answer, Reply):
        return answer
    return Reply(200, _review(data, answer))


def _review(data: Mapping[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    api_version = data.get("apiVersion")
    return {
        "apiVersion": api_version if isinstance(api_version, str) else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": dict(response),
    }


def allowed_review(data: Mapping[str, Any]) -> dict[str, Any]:
    return _review(data, {"uid": data["request"]["uid"], "allowed": True})
