"""The webhook's HTTPS server: Kopf's WebhookServer, hardened against malformed reviews.

Kopf's own server answers a review without ``request`` or ``userInfo`` (or a JSON array) with
an HTTP 500 (an unhandled KeyError/AttributeError). Here malformed reviews get a 400, or, when
they carry a ``request.uid``, an AdmissionReview that denies with code 400; any other failure
in the framework becomes a denial with code 400 too, never a 5xx.

Hooks (all optional): ``prepare`` runs before the first bind (write the certificate files),
``on_listening`` after every (re)bind with Kopf's client config (keep caBundle current), and
``background`` runs while the server lives (certificate renewal).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import aiohttp.web
import kopf

from gpushare.admission.review import denial_review, review_problem

logger = logging.getLogger("gpushare.webhook")

Hook = Callable[[], Coroutine[Any, Any, None]]
ListeningHook = Callable[[kopf.WebhookClientConfig], Awaitable[None]]


class GPUShareWebhookServer(kopf.WebhookServer):
    def __init__(
        self,
        *,
        prepare: Hook | None = None,
        on_listening: ListeningHook | None = None,
        background: Hook | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
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

    @staticmethod
    async def _serve(fn: kopf.WebhookFn, request: aiohttp.web.Request) -> aiohttp.web.Response:
        try:
            data = json.loads(await request.text())
        except (ValueError, UnicodeDecodeError) as exc:
            return _bad_request(f"the body is not JSON: {exc}")
        problem = review_problem(data)
        if problem is not None:
            uid, text = problem
            logger.info("Rejected a malformed AdmissionReview: %s", text)
            if uid is None:
                return _bad_request(f"malformed AdmissionReview: {text}")
            return aiohttp.web.json_response(denial_review(data, uid, f"malformed AdmissionReview: {text}"))
        webhook = request.match_info.get("id")
        headers = dict(request.headers)
        sslpeer = request.transport.get_extra_info("peercert") if request.transport else None
        try:
            response = await fn(data, webhook=webhook, sslpeer=sslpeer, headers=headers)
        except Exception as exc:  # Kopf: unknown resource, missing data, anything else
            logger.warning("Could not serve an AdmissionReview for %s: %s", webhook, exc)
            message = f"gpushare webhook could not handle this request ({type(exc).__name__}: {exc})"
            return aiohttp.web.json_response(denial_review(data, data["request"]["uid"], message))
        return aiohttp.web.json_response(response)


def _bad_request(message: str) -> aiohttp.web.Response:
    return aiohttp.web.json_response({"error": message}, status=400)
