"""Retries with backoff for Kubernetes API calls (5xx, 429, connection errors)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import metrics

T = TypeVar("T")

RETRYABLE = frozenset({429, 500, 502, 503, 504})


class ApiUnavailable(Exception):
    """The API server kept failing (5xx/429/connection) after every retry."""


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in RETRYABLE or exc.status == 0 or exc.status is None
    return isinstance(exc, aiohttp.ClientError | OSError | TimeoutError)


async def call(
    fn: Callable[[], Awaitable[T]],
    *,
    verb: str,
    resource: str,
    attempts: int = 6,
    base_delay: float = 0.2,
    max_delay: float = 5.0,
    no_retry: frozenset[int] = frozenset(),
) -> T:
    """Run ``fn``; retry retryable failures with jittered exponential backoff.

    Non-retryable ``ApiException`` (404, 409, 422, 403, ...) are raised at once for the caller
    to interpret; statuses in ``no_retry`` too (e.g. 429 from an Eviction = a PDB blocks it).
    After the last attempt a retryable failure becomes ``ApiUnavailable``.
    """
    delay = base_delay
    for attempt in range(1, attempts + 1):
        try:
            result = await fn()
        except (ApiException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            code = exc.status if isinstance(exc, ApiException) else 0
            metrics.API_ERRORS.labels(verb=verb, resource=resource, code=str(code)).inc()
            if isinstance(exc, ApiException) and exc.status in no_retry:
                raise
            if not is_retryable(exc):
                raise
            if attempt == attempts:
                msg = f"{verb} {resource}: gave up after {attempts} attempts: {exc!r}"
                raise ApiUnavailable(msg) from exc
            await asyncio.sleep(min(max_delay, delay) * (0.5 + random.random() / 2))
            delay *= 2
        else:
            if verb in ("create", "patch", "delete", "update"):
                metrics.API_WRITES.labels(verb=verb, resource=resource).inc()
            return result
    raise AssertionError("unreachable")  # pragma: no cover
