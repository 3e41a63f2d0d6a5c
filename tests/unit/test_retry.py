"""gpushare.k8s.retry.call: which failures are retried, and when it gives up."""

from __future__ import annotations

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import metrics
from gpushare.k8s.retry import ApiUnavailable, call


class Flaky:
    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def _errors(code: str) -> float:
    return metrics.API_ERRORS.labels(verb="patch", resource="test", code=code)._value.get()


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(ApiException(status=503), id="503"),
        pytest.param(ApiException(status=500), id="500"),
        pytest.param(ApiException(status=429), id="429"),
        pytest.param(aiohttp.ClientConnectionError("refused"), id="connection"),
        pytest.param(TimeoutError(), id="timeout"),
    ],
)
async def test_retryable_failures_are_retried(failure: BaseException) -> None:
    fn = Flaky(failure, failure)
    code = str(failure.status) if isinstance(failure, ApiException) else "0"
    before = _errors(code)
    assert await call(fn, verb="patch", resource="test", base_delay=0.001) == "ok"
    assert fn.calls == 3
    assert _errors(code) - before == 2


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
async def test_client_errors_are_raised_at_once(status: int) -> None:
    fn = Flaky(ApiException(status=status))
    with pytest.raises(ApiException) as exc:
        await call(fn, verb="patch", resource="test", base_delay=0.001)
    assert exc.value.status == status
    assert fn.calls == 1


async def test_no_retry_statuses() -> None:
    fn = Flaky(ApiException(status=429))
    with pytest.raises(ApiException):
        await call(fn, verb="create", resource="test", base_delay=0.001, no_retry=frozenset({429}))
    assert fn.calls == 1


async def test_gives_up_after_the_last_attempt() -> None:
    fn = Flaky(*(ApiException(status=503) for _ in range(10)))
    with pytest.raises(ApiUnavailable, match="gave up after 3 attempts"):
        await call(fn, verb="patch", resource="test", attempts=3, base_delay=0.001)
    assert fn.calls == 3


async def test_writes_are_counted() -> None:
    counter = metrics.API_WRITES.labels(verb="patch", resource="test")
    before = counter._value.get()
    await call(Flaky(), verb="patch", resource="test")
    await call(Flaky(), verb="list", resource="test")
    assert counter._value.get() - before == 1
