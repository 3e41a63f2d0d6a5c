"""The webhook's HTTPS server: Kopf's WebhookServer, hardened against malformed reviews.

Kopf's own server answers a review without ``request`` or ``userInfo`` (or a JSON array) with
an HTTP 500 (an unhandled KeyError/AttributeError). Here malformed reviews get a 400, or, when
they carry a ``request.uid``, an AdmissionReview that denies with code 400; any other failure
in the framework becomes a denial with code 400 too, never a 5xx.

Hooks (all optional): ``prepare`` runs before the first bind (write the certificate files),
``on_listening`` after every (re)bind with Kopf's client config (keep caBundle current),
``background`` runs while the server lives (certificate renewal), and ``fast_allow(handler_id,
review)`` may answer "allowed" without entering Kopf (objects that request no GPU sharing: the
framework's per-request machinery costs far more than the check).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any

import aiohttp.web
import kopf

from gpushare.admission.review import denial_review, raw_review_problem, review_problem

logger = logging.getLogger("gpushare.webhook")

#: The oldest TLS version the webhook accepts (the kube-apiserver speaks 1.2 and 1.3).
MINIMUM_TLS_VERSION = ssl.TLSVersion.TLSv1_2

Hook = Callable[[], Coroutine[Any, Any, None]]
ListeningHook = Callable[[kopf.WebhookClientConfig], Awaitable[None]]
FastAllow = Callable[[str, Mapping[str, Any]], bool]
#: ``respond(handler_id, review)``: the AdmissionReview ``response`` for a well-formed review, or
#: None to let Kopf answer it.
Respond = Callable[[str, Mapping[str, Any]], "dict[str, Any] | None"]


class GPUShareWebhookServer(kopf.WebhookServer):
    def __init__(
        self,
        *,
        prepare: Hook | None = None,
        on_listening: ListeningHook | None = None,
        background: Hook | None = None,
        fast_allow: FastAllow | None = None,
        respond: Respond | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fast_allow = fast_allow
        self.respond = respond
        self.prepare = prepare
        self.on_listening = on_listening
        self.background = background

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        if self.prepare is not None:
            await self.prepare()
        task = (
            asyncio.create_task(self.background(), name="gpushare-webhook-background")
            if self.background
            else None
        )
        try:
            async for client_config in super().__call__(fn):
                if self.on_listening is not None:
                    await self.on_listening(client_config)
                yield client_config
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _build_ssl(self) -> tuple[bytes | None, ssl.SSLContext | None]:
        """Kopf's context, pinned to TLS 1.2+ whatever Python's or OpenSSL's defaults are."""
        cadata, context = super()._build_ssl()
        # MINIMUM_SUPPORTED is -2, so it compares lower too.
        if context is not None and context.minimum_version < MINIMUM_TLS_VERSION:
            context.minimum_version = MINIMUM_TLS_VERSION
        return cadata, context

    async def _serve(  # type: ignore[override]  # Kopf calls it as self._serve(fn, request)
        self, fn: kopf.WebhookFn, request: aiohttp.web.Request
    ) -> aiohttp.web.Response:
        try:  # aiohttp refuses bodies over its client_max_size (MAX_REVIEW_BYTES) with a 413
            raw = await request.read()
        except aiohttp.web.HTTPRequestEntityTooLarge as exc:
            return _bad_request(f"malformed AdmissionReview: the body is too large ({exc.text})", status=413)
        too_much = raw_review_problem(raw)
        if too_much is not None:  # before parsing: the parser and the rules recurse per level
            logger.info("Rejected a malformed AdmissionReview: %s", too_much)
            return _bad_request(
                f"malformed AdmissionReview: {too_much}", status=413 if "bytes" in too_much else 400
            )
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            return _bad_request(f"the body is not JSON: {exc}")
        problem = review_problem(data)
        if problem is not None:
            uid, text = problem
            logger.info("Rejected a malformed AdmissionReview: %s", text)
            if uid is None:
                return _bad_request(f"malformed AdmissionReview: {text}")
            return aiohttp.web.json_response(denial_review(data, uid, f"malformed AdmissionReview: {text}"))
        webhook = request.match_info.get("id")
        if self.fast_allow is not None and self.fast_allow(webhook or "", data):
            return aiohttp.web.json_response(allowed_review(data))
        answer = self.respond(webhook or "", data) if self.respond is not None else None
        if answer is not None:
            return aiohttp.web.json_response(
                {
                    "apiVersion": data.get("apiVersion", "admission.k8s.io/v1"),
                    "kind": "AdmissionReview",
                    "response": answer,
                }
            )
        headers = dict(request.headers)
        sslpeer = request.transport.get_extra_info("peercert") if request.transport else None
        try:
            response = await fn(data, webhook=webhook, sslpeer=sslpeer, headers=headers)
        except Exception as exc:  # Kopf: unknown resource, missing data, anything else
            logger.warning("Could not serve an AdmissionReview for %s: %s", webhook, exc)
            message = f"gpushare webhook could not handle this request ({type(exc).__name__}: {exc})"
            return aiohttp.web.json_response(denial_review(data, data["request"]["uid"], message))
        return aiohttp.web.json_response(response)


def allowed_review(data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": data.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": {"uid": data["request"]["uid"], "allowed": True},
    }


def _bad_request(message: str, status: int = 400) -> aiohttp.web.Response:
    return aiohttp.web.json_response({"error": message}, status=status)
