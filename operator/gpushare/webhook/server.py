"""The webhook's HTTPS server: bounded work per request, never a 5xx, never a stalled event loop.

The webhook shares one process and one event loop with the reconciler, and any pod in the
cluster can reach its port, so the server is built for hostile input (docs/security.md):

* **Routes.** Only ``POST /<handler-id>`` of the configured handlers; any other path is a 404 and
  any other method a 405. A review for another resource than the handler's is a 400: nothing
  is allowed by a wrong path.
* **Bounded bodies.** At most ``limits.max_body_bytes`` (a larger Content-Length is refused before
  reading), read within ``limits.body_timeout`` seconds; ``Content-Encoding`` other than
  ``identity`` is a 415 (the apiserver never compresses a review). UTF-8 only, nesting at most
  ``MAX_REVIEW_DEPTH``, checked in one linear scan before parsing.
* **Bounded loop time.** Bodies up to ``limits.inline_bytes`` are checked, parsed and judged on
  the event loop (well under a millisecond for a real review). Larger ones go to one worker
  thread, one at a time (at most ``limits.max_queued`` waiting, then 429): the loop keeps
  serving other reviews and reconciling while a large one is parsed and judged.
* **Slow clients.** A connection that has not sent a complete request head within
  ``limits.idle_timeout`` seconds of opening (or of its last answer) is closed, and so is a body
  not read within ``limits.body_timeout``. At most ``limits.max_connections`` connections are
  open; more are closed as they arrive.
* **Errors.** Every decoding, parsing and evaluation error is a 4xx with one line; a failure in
  the rules is answered as the failure policy says (``Fail``: denied, code 400; ``Ignore``:
  allowed with a warning). Malformed or aborted HTTP requests log one line at debug level,
  never a traceback; so does every connection the server cuts off on purpose (a limit, a
  timeout), naming the client's host:port. An exception that escapes the handler (a bug) logs
  one warning line.

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
import hashlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp.web
import kopf
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

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


class _OneLineLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's per-connection logger: one debug line per failed request, no traceback (a
    client that sends half a request and disconnects must not cost the loop a traceback)."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "no details"
        self.logger.debug("%s (%s)", str(msg) % args if args else msg, why)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        kwargs.pop("exc_info", None)
        self.logger.debug(msg, *args, **kwargs)


class _Handler(RequestHandler):
    """aiohttp's connection handler, answering HTTP it cannot parse with a one-line JSON 400."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> aiohttp.web.StreamResponse:
        why = (getattr(exc, "message", None) or str(exc)) if exc is not None else (message or "")
        line = " ".join(str(why).split())[:200] or "unreadable request"
        if status >= 500:  # aiohttp's own answer to an exception that escaped the handler: a bug
            logger.warning("Webhook request from %s failed in the handler: %s", peer(request.transport), line)
        else:
            logger.debug("Malformed webhook HTTP request from %s: %s", peer(request.transport), line)
        if request.writer.output_size > 0:
            raise ConnectionError("the answer was already being sent")
        # A 5xx here could only come from a bug in the handler, which answers every error itself.
        response = aiohttp.web.json_response(
            {"error": f"malformed HTTP request: {line}"}, status=status if 400 <= status < 500 else 400
        )
        response.force_close()
        return response


class _Server(aiohttp.web.Server):
    """aiohttp's low-level server with a bound on open connections and one-line errors.

    Built on its public API only: the connection handlers it makes are ``_Handler`` (its
    ``handle_error`` overridden), made from this class's own copy of the handler settings."""

    def __init__(self, handler: Any, *, max_connections: int, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.max_connections = max_connections
        self.loop = asyncio.get_running_loop()
        self.handler_settings = dict(kwargs)

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self.loop, **self.handler_settings)

    def connection_made(self, handler: Any, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if len(self.connections) > self.max_connections:
            logger.debug(
                "Closed a webhook connection from %s: %d are open", peer(transport), len(self.connections) - 1
            )
            transport.close()


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

        async def handle(request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
            return await self._handle(fn, request)

        try:
            while True:  # once per certificate: rebind when the files change
                cadata, context = self._build_ssl()
                server = _Server(
                    handle,
                    max_connections=self.limits.max_connections,
                    keepalive_timeout=self.limits.idle_timeout,
                    logger=_OneLineLogger(logger, {}),
                    access_log=None,
                    auto_decompress=False,
                )
                runner = aiohttp.web.ServerRunner(server, handle_signals=False)
                await runner.setup()
                try:
                    port = self.port or self._allocate_free_port()
                    site = aiohttp.web.TCPSite(
                        runner,
                        self.addr or None,
                        port,
                        ssl_context=context,
                        reuse_port=True,
                        reuse_address=True,
                    )
                    await site.start()
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
                    await runner.cleanup()
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

    async def _handle(
        self, fn: kopf.WebhookFn, request: aiohttp.web.BaseRequest
    ) -> aiohttp.web.StreamResponse:
        try:
            reply = await self._reply(fn, request)
        except Exception as exc:  # the last guard: a bug here must not become a 500
            logger.warning(
                "Could not serve a webhook request to %s: %s: %s", request.path, type(exc).__name__, exc
            )
            reply = bad_request(f"gpushare webhook could not handle this request ({type(exc).__name__})")
        response = aiohttp.web.json_response(reply.body, status=reply.status)
        if reply.status >= 400 and reply.status != 403:
            response.force_close()  # a client that sent garbage gets no second request on it
        return response

    def _webhook_id(self, request: aiohttp.web.BaseRequest) -> str | None:
        prefix = (self.path or "").rstrip("/") + "/"
        path = request.path
        if not path.startswith(prefix):
            return None
        webhook = path[len(prefix) :]
        if self.routes is not None and webhook not in self.routes:
            return None
        return webhook

    async def _reply(self, fn: kopf.WebhookFn, request: aiohttp.web.BaseRequest) -> Reply:
        webhook = self._webhook_id(request)
        if webhook is None:
            return bad_request(f"no admission webhook at {request.path[:200]!r}", status=404)
        if request.method != "POST":
            return bad_request(f"{request.method[:20]} is not allowed: POST an AdmissionReview", status=405)
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            return bad_request(
                f"Content-Encoding {encoding[:40]!r} is not accepted: send plain JSON", status=415
            )
        raw = await self._body(request)
        if isinstance(raw, Reply):
            return raw
        if len(raw) <= self.limits.inline_bytes:
            screened = self._screen(webhook, raw)
        else:
            screened = await self._in_worker(self._screen, webhook, raw)
        if isinstance(screened, Reply):
            return screened
        return await self._judge(fn, request, webhook, screened, large=len(raw) > self.limits.inline_bytes)

    async def _body(self, request: aiohttp.web.BaseRequest) -> bytes | Reply:
        """The body, at most ``max_body_bytes``, read within ``body_timeout`` seconds."""
        cap = self.limits.max_body_bytes
        declared = request.content_length
        if declared is not None and declared > cap:
            logger.debug(
                "Webhook request from %s to %s refused unread: %d bytes declared, more than %d",
                peer(request.transport),
                request.path[:200],
                declared,
                cap,
            )
            return bad_request(
                f"malformed AdmissionReview: the body is {declared} bytes, more than the {cap}"
                " an AdmissionReview may have",
                status=413,
            )
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                while True:
                    chunk = await request.content.read(64 * 1024)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > cap:
                        logger.debug(
                            "Webhook request from %s to %s refused: more than %d bytes sent",
                            peer(request.transport),
                            request.path[:200],
                            cap,
                        )
                        return bad_request(
                            f"malformed AdmissionReview: the body is more than the {cap} bytes"
                            " an AdmissionReview may have",
                            status=413,
                        )
                    chunks.append(chunk)
        except TimeoutError:
            logger.debug(
                "Webhook request from %s to %s: body not received within %ss",
                peer(request.transport),
                request.path[:200],
                self.limits.body_timeout,
            )
            return bad_request(f"the body did not arrive within {self.limits.body_timeout:g} s", status=408)
        except (aiohttp.web.HTTPException, aiohttp.ClientError, ConnectionError, ValueError) as exc:
            logger.debug(
                "Webhook request to %s: body not read: %s: %s", request.path, type(exc).__name__, exc
            )
            return bad_request(f"the body could not be read ({type(exc).__name__})")
        return b"".join(chunks)

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

    async def _judge(
        self,
        fn: kopf.WebhookFn,
        request: aiohttp.web.BaseRequest,
        webhook: str,
        data: Mapping[str, Any],
        *,
        large: bool,
    ) -> Reply:
        context = (
            self.context_fn() if self.context_fn is not None else None
        )  # on the loop: the indexes live here
        if self.respond is not None:
            if large:
                answer = await self._in_worker(self._respond, webhook, data, context)
            else:
                answer = self._respond(webhook, data, context)
            if isinstance(answer, Reply):
                return answer
            if answer is not None:
                return Reply(200, _review(data, answer))
        sslpeer = request.transport.get_extra_info("peercert") if request.transport else None
        try:  # Kopf's handlers: the indexes are not handed over yet, or --webhook-via-kopf
            response = await fn(
                cast(Any, dict(data)), webhook=webhook, sslpeer=sslpeer, headers=dict(request.headers)
            )
        except Exception as exc:  # Kopf: unknown resource, missing data, anything else
            return self._failed(webhook, data, exc)
        return Reply(200, dict(response))

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


def _review(data: Mapping[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    api_version = data.get("apiVersion")
    return {
        "apiVersion": api_version if isinstance(api_version, str) else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": dict(response),
    }


def allowed_review(data: Mapping[str, Any]) -> dict[str, Any]:
    return _review(data, {"uid": data["request"]["uid"], "allowed": True})
