"""The one retry policy of every Kubernetes API call (and of the loops that repeat whole operations).

Three layers, one backoff (``Backoff``) and one loop (``_attempts``):

* ``call``: one API request; transient failures (5xx, 429, connection errors, timeouts) are retried
  with jittered exponential backoff, every failed attempt is counted in ``gpushare_api_errors_total``
  and every successful write in ``gpushare_api_writes_total``. Other statuses are raised at once.
* ``call_or_absent`` (and ``call_if_present`` for writes): the same, where 404 means "the object
  is absent" (None, False): the one place that says so.
* ``replan``: a read-decide-write step repeated when the object changed between the read and the
  write (``Conflict``: a 409, or a failed JSON-patch ``test``), without recursion.
* ``persist``: a whole operation repeated on the errors the caller names, with a warning per retry
  (the webhook's certificate at startup: the apiserver may not be up yet).

``Backoff.delay(failures)`` is also the pause of loops that keep going on their own (the per-pool
reconcile daemon).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp

from gpushare import metrics
from gpushare.k8s.rest import ApiError

T = TypeVar("T")

RETRYABLE = frozenset({429, 500, 502, 503, 504})
#: The statuses that mean "another writer got there first" (``Conflict``).
CONFLICT = frozenset({409})
WRITE_VERBS = frozenset({"create", "patch", "delete", "update"})
#: What ``call`` treats as "the request did not get through" (each counted, retried when transient).
API_FAILURES = (ApiError, aiohttp.ClientError, OSError, TimeoutError)


class ApiUnavailable(ApiError):
    """The API server kept failing (5xx/429/connection) after every retry (``status``: the last
    failure's, 0 when it gave no HTTP answer)."""

    def __init__(self, message: str, status: int = 0, reason: str | None = None) -> None:
        super().__init__(status=status, reason=reason)
        self.text = message

    def __str__(self) -> str:
        return self.text


class Conflict(ApiError):
    """The object changed between our read and our write, or another writer created it first (HTTP
    409, or a failed JSON-patch ``test``): read it again and decide again (``replan``).

    ``call`` is the one place that decides it: a 409 (or a status the caller names in
    ``conflict_on``) is raised as ``Conflict``."""

    def __init__(
        self, message: str = "", status: int = 409, reason: str | None = "Conflict", body: str = ""
    ) -> None:
        super().__init__(status=status, reason=reason, body=body)
        self.text = message

    def __str__(self) -> str:
        return self.text or super().__str__()


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: after the n-th failure wait ``min(max_delay, base_delay * 2**(n-1))``,
    scaled by a random factor in [0.5, 1) when ``jitter`` (so replicas do not retry in step)."""

    attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 5.0
    jitter: bool = True

    def delay(self, failures: int) -> float:
        pause = min(self.max_delay, self.base_delay * 2.0 ** max(0, failures - 1))
        return pause * (0.5 + random.random() / 2) if self.jitter else pause


#: One API request (``call``).
API_BACKOFF = Backoff()
#: A read-decide-write step that lost a race: try again at once, a little apart from the winner.
REPLAN_BACKOFF = Backoff(attempts=5, base_delay=0.05, max_delay=1.0)


async def _attempts(
    fn: Callable[[], Awaitable[T]],
    backoff: Backoff,
    retry_if: Callable[[Exception], bool],
    on_retry: Callable[[int, Exception, float], None] | None = None,
) -> T:
    """Run ``fn`` until it returns, a failure ``retry_if`` rejects, or ``backoff.attempts`` are spent
    (the last failure is raised)."""
    for attempt in range(1, backoff.attempts + 1):
        try:
            return await fn()
        except Exception as exc:
            if attempt == backoff.attempts or not retry_if(exc):
                raise
            pause = backoff.delay(attempt)
            if on_retry is not None:
                on_retry(attempt, exc, pause)
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover  (attempts >= 1)


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, ApiUnavailable | Conflict):  # already decided by an inner ``call``
        return False
    if isinstance(exc, ApiError):
        return exc.status in RETRYABLE or exc.status == 0 or exc.status is None
    return isinstance(exc, aiohttp.ClientError | OSError | TimeoutError)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a failed request (None: it got no HTTP answer)."""
    return exc.status if isinstance(exc, ApiError) else None


async def call(
    fn: Callable[[], Awaitable[T]],
    *,
    verb: str,
    resource: str,
    attempts: int = API_BACKOFF.attempts,
    base_delay: float = API_BACKOFF.base_delay,
    max_delay: float = API_BACKOFF.max_delay,
    no_retry: frozenset[int] = frozenset(),
    give_up: bool = True,
    conflict_on: frozenset[int] = CONFLICT,
) -> T:
    """Run ``fn``; retry retryable failures with jittered exponential backoff.

    Non-retryable ``ApiError`` (404, 409, 422, 403, ...) are raised at once for the caller
    to interpret; statuses in ``no_retry`` too (e.g. 429 from an Eviction = a PDB blocks it).
    A status in ``conflict_on`` (409; a JSON patch whose ``test`` failed adds 422) is raised as
    ``Conflict``. After the last attempt a retryable failure becomes ``ApiUnavailable``
    (``give_up=False``: it is raised as it is, for callers that word their own one-line errors).
    """

    async def once() -> T:
        try:
            result = await fn()
        except API_FAILURES as exc:
            code = status_of(exc) or 0
            metrics.API_ERRORS.labels(verb=verb, resource=resource, code=str(code)).inc()
            raise
        if verb in WRITE_VERBS:
            metrics.API_WRITES.labels(verb=verb, resource=resource).inc()
        return result

    def transient(exc: Exception) -> bool:
        return is_retryable(exc) and status_of(exc) not in no_retry

    backoff = Backoff(attempts=attempts, base_delay=base_delay, max_delay=max_delay)
    try:
        return await _attempts(once, backoff, transient)
    except API_FAILURES as exc:
        if isinstance(exc, ApiError) and not isinstance(exc, Conflict) and exc.status in conflict_on:
            raise Conflict(str(exc), exc.status, exc.reason, exc.body) from exc
        if give_up and transient(exc):
            msg = f"{verb} {resource}: gave up after {attempts} attempts: {exc!r}"
            status = exc.status if isinstance(exc, ApiError) else 0
            raise ApiUnavailable(msg, status, exc.reason if isinstance(exc, ApiError) else None) from exc
        raise


async def call_or_absent(
    fn: Callable[[], Awaitable[T]],
    *,
    verb: str,
    resource: str,
    attempts: int = API_BACKOFF.attempts,
    no_retry: frozenset[int] = frozenset(),
    give_up: bool = True,
) -> T | None:
    """``call``, where 404 means the object is absent: None instead of an exception."""
    try:
        return await call(
            fn, verb=verb, resource=resource, attempts=attempts, no_retry=no_retry, give_up=give_up
        )
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def call_if_present(
    fn: Callable[[], Awaitable[object]],
    *,
    verb: str,
    resource: str,
    attempts: int = API_BACKOFF.attempts,
    no_retry: frozenset[int] = frozenset(),
) -> bool:
    """``call`` for a write whose answer is not needed: True when done, False when the object is
    absent (404)."""

    async def done() -> bool:
        await fn()
        return True

    found = await call_or_absent(done, verb=verb, resource=resource, attempts=attempts, no_retry=no_retry)
    return found is not None


async def replan(step: Callable[[], Awaitable[T]], *, what: str, backoff: Backoff = REPLAN_BACKOFF) -> T:
    """Run the read-decide-write ``step`` again while it raises ``Conflict`` (another writer moved
    the object); after ``backoff.attempts`` the last ``Conflict`` is raised, its message naming
    ``what``."""
    try:
        return await _attempts(step, backoff, lambda exc: isinstance(exc, Conflict))
    except Conflict as exc:
        msg = f"{what}: kept changing under us ({backoff.attempts} attempts): {exc}"
        raise Conflict(msg, exc.status, exc.reason, exc.body) from exc


async def persist(
    fn: Callable[[], Awaitable[T]],
    *,
    what: str,
    retry_on: tuple[type[Exception], ...],
    backoff: Backoff,
    logger: logging.Logger,
) -> T:
    """Run the whole operation ``fn`` again on the errors in ``retry_on``, logging a warning per
    retry ("Could not <what> (attempt n, retrying): ..."); the last error is raised."""

    def warn(attempt: int, exc: Exception, _: float) -> None:
        logger.warning("Could not %s (attempt %d, retrying): %s", what, attempt, exc)

    return await _attempts(fn, backoff, lambda exc: isinstance(exc, retry_on), warn)
