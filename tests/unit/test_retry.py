"""gpushare.k8s.retry: which failures are retried, when it gives up, 404 as absent, replan, persist."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest

from gpushare import metrics
from gpushare.k8s import ApiError
from gpushare.k8s import agent as k8s_agent
from gpushare.k8s.inspect_read import CLI_ATTEMPTS, InspectReadError, pages_or_absent
from gpushare.k8s.retry import (
    ApiUnavailable,
    Backoff,
    Conflict,
    call,
    call_if_present,
    call_or_absent,
    persist,
    replan,
)


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
    value: float = metrics.API_ERRORS.labels(verb="patch", resource="test", code=code)._value.get()
    return value


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(ApiError(status=503), id="503"),
        pytest.param(ApiError(status=500), id="500"),
        pytest.param(ApiError(status=429), id="429"),
        pytest.param(aiohttp.ClientConnectionError("refused"), id="connection"),
        pytest.param(TimeoutError(), id="timeout"),
    ],
)
async def test_retryable_failures_are_retried(failure: BaseException) -> None:
    fn = Flaky(failure, failure)
    code = str(failure.status) if isinstance(failure, ApiError) else "0"
    before = _errors(code)
    assert await call(fn, verb="patch", resource="test", base_delay=0.001) == "ok"
    assert fn.calls == 3
    assert _errors(code) - before == 2


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
async def test_client_errors_are_raised_at_once(status: int) -> None:
    fn = Flaky(ApiError(status=status))
    with pytest.raises(ApiError) as exc:
        await call(fn, verb="patch", resource="test", base_delay=0.001)
    assert exc.value.status == status
    assert fn.calls == 1


async def test_no_retry_statuses() -> None:
    fn = Flaky(ApiError(status=429))
    with pytest.raises(ApiError):
        await call(fn, verb="create", resource="test", base_delay=0.001, no_retry=frozenset({429}))
    assert fn.calls == 1


async def test_gives_up_after_the_last_attempt() -> None:
    fn = Flaky(*(ApiError(status=503) for _ in range(10)))
    with pytest.raises(ApiUnavailable, match="gave up after 3 attempts"):
        await call(fn, verb="patch", resource="test", attempts=3, base_delay=0.001)
    assert fn.calls == 3


async def test_writes_are_counted() -> None:
    counter = metrics.API_WRITES.labels(verb="patch", resource="test")
    before = counter._value.get()
    await call(Flaky(), verb="patch", resource="test")
    await call(Flaky(), verb="list", resource="test")
    assert counter._value.get() - before == 1


# --- the rest of the one policy: 404 = absent, replan on conflicts, persist, the backoff ---------


async def test_404_means_absent() -> None:
    assert await call_or_absent(Flaky(ApiError(status=404)), verb="get", resource="test") is None
    assert await call_or_absent(Flaky(), verb="get", resource="test") == "ok"
    assert await call_if_present(Flaky(ApiError(status=404)), verb="delete", resource="test") is False
    assert await call_if_present(Flaky(), verb="delete", resource="test") is True


async def test_absent_still_retries_transient_failures_and_raises_other_statuses() -> None:
    fn = Flaky(ApiError(status=503), ApiError(status=404))
    assert await call_or_absent(fn, verb="get", resource="test") is None
    assert fn.calls == 2
    with pytest.raises(ApiError) as exc:
        await call_if_present(Flaky(ApiError(status=409)), verb="delete", resource="test")
    assert exc.value.status == 409


async def test_replan_repeats_the_whole_step_on_conflicts_and_counts_each_failed_write() -> None:
    reads: list[int] = []
    writes = Flaky(ApiError(status=409), ApiError(status=409))

    async def step() -> str:
        reads.append(len(reads))  # a fresh read each time
        try:
            return await call(writes, verb="update", resource="test")
        except ApiError as exc:
            raise Conflict(str(exc.status)) from exc

    before = metrics.API_ERRORS.labels(verb="update", resource="test", code="409")._value.get()
    assert await replan(step, what="test", backoff=Backoff(attempts=5, base_delay=0.001)) == "ok"
    assert reads == [0, 1, 2]
    assert metrics.API_ERRORS.labels(verb="update", resource="test", code="409")._value.get() - before == 2


async def test_replan_gives_up_naming_what_and_passes_other_errors_at_once() -> None:
    calls = 0

    async def always_conflict() -> None:
        nonlocal calls
        calls += 1
        raise Conflict("409 Conflict")

    with pytest.raises(Conflict, match=r"Secret x: kept changing under us \(3 attempts\): 409 Conflict"):
        await replan(always_conflict, what="Secret x", backoff=Backoff(attempts=3, base_delay=0.001))
    assert calls == 3

    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("not a conflict")

    calls = 0
    with pytest.raises(ValueError):
        await replan(broken, what="x")
    assert calls == 1


async def test_persist_retries_the_named_errors_with_a_warning_each(caplog: pytest.LogCaptureFixture) -> None:
    fn = Flaky(OSError("down"), OSError("still down"))
    log = logging.getLogger("test.persist")
    got = await persist(fn, what="do it", retry_on=(OSError,), backoff=Backoff(base_delay=0.001), logger=log)
    assert got == "ok" and fn.calls == 3
    assert [r.getMessage() for r in caplog.records if r.name == "test.persist"] == [
        "Could not do it (attempt 1, retrying): down",
        "Could not do it (attempt 2, retrying): still down",
    ]
    other = Flaky(ValueError("bug"))
    with pytest.raises(ValueError):
        await persist(other, what="x", retry_on=(OSError,), backoff=Backoff(base_delay=0.001), logger=log)
    assert other.calls == 1
    last = Flaky(*(OSError(str(n)) for n in range(5)))
    with pytest.raises(OSError, match=r"^2$"):
        await persist(last, what="x", retry_on=(OSError,), backoff=Backoff(3, 0.001), logger=log)


def test_backoff_doubles_up_to_the_cap_and_jitters_below_it() -> None:
    fixed = Backoff(base_delay=1.0, max_delay=4.0, jitter=False)
    assert [fixed.delay(n) for n in (1, 2, 3, 4, 10)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    jittered = Backoff(base_delay=1.0, max_delay=4.0)
    for n, cap in ((1, 1.0), (2, 2.0), (5, 4.0)):
        assert all(cap / 2 <= jittered.delay(n) < cap for _ in range(50))


# --- the command line's list reads go through the same policy ------------------------------------


class Pages:
    """A paginated list endpoint: ``failures`` first, then two pages."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls: list[dict[str, object]] = []

    async def __call__(self, query: Mapping[str, object]) -> dict[str, Any]:
        self.calls.append(dict(query))
        if self.failures:
            raise self.failures.pop(0)
        if "continue" not in query:
            return {"items": [{"i": 1}, {"i": 2}], "metadata": {"continue": "t"}}
        return {"items": [{"i": 3}], "metadata": {}}


THREE = [{"i": 1}, {"i": 2}, {"i": 3}]


async def test_cli_pages_follow_continue_tokens_and_treat_404_as_absent() -> None:
    pages = Pages()
    assert await pages_or_absent("widgets", pages, {"fieldSelector": "x"}) == THREE
    assert pages.calls == [
        {"limit": 500, "fieldSelector": "x"},
        {"limit": 500, "fieldSelector": "x", "continue": "t"},
    ]
    assert await pages_or_absent("widgets", Pages(ApiError(status=404))) is None


async def test_cli_pages_keep_their_one_line_errors() -> None:
    flaky = Pages(ApiError(status=503, reason="Service Unavailable"))
    assert await pages_or_absent("widgets", flaky) == THREE  # retried
    down = Pages(*(ApiError(status=503, reason="Service Unavailable") for _ in range(5)))
    with pytest.raises(InspectReadError, match=r"^list widgets: HTTP 503 Service Unavailable$"):
        await pages_or_absent("widgets", down)
    assert len(down.calls) == CLI_ATTEMPTS
    with pytest.raises(InspectReadError, match=r"^list widgets: HTTP 403 Forbidden$"):
        await pages_or_absent("widgets", Pages(ApiError(status=403, reason="Forbidden")))
    refused = Pages(*(aiohttp.ClientConnectionError("refused") for _ in range(5)))
    with pytest.raises(aiohttp.ClientConnectionError, match="refused"):  # the caller words it
        await pages_or_absent("widgets", refused)


# --- the node agent's two requests too -----------------------------------------------------------


class _Core:
    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def get(self, url: str) -> dict[str, Any]:
        assert url == "/api/v1/nodes/n1"
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return {"metadata": {"labels": {"a": "b"}, "annotations": None, "resourceVersion": "7"}}


@pytest.mark.parametrize(
    ("failures", "message", "calls"),
    [
        pytest.param([ApiError(status=503)], None, 2, id="503-retried"),
        pytest.param(
            [ApiError(status=404)],
            "get node 'n1': not found (is --node-name / NODE_NAME the",
            1,
            id="404",
        ),
        pytest.param(
            [aiohttp.ClientConnectionError("refused")] * 3,
            "get node 'n1': API server unreachable: ",
            3,
            id="down",
        ),
    ],
)
async def test_agent_requests_use_the_policy_and_keep_their_messages(
    monkeypatch: pytest.MonkeyPatch, failures: list[BaseException], message: str | None, calls: int
) -> None:
    core = _Core(*failures)
    monkeypatch.setattr("gpushare.k8s.agent.Rest", lambda api: core)
    if message is None:
        meta = await k8s_agent.read_node_metadata(None, "n1")  # type: ignore[arg-type]
        assert meta == k8s_agent.NodeMetadata({"a": "b"}, {}, "7")
    else:
        with pytest.raises(k8s_agent.NodeAccessError) as exc:
            await k8s_agent.read_node_metadata(None, "n1")  # type: ignore[arg-type]
        assert str(exc.value).startswith(message)
    assert core.calls == calls


async def test_a_conflict_is_decided_in_call_and_every_failure_is_one_error_type() -> None:
    """``call`` is the one place a lost race is named: a 409 (or a status given in
    ``conflict_on``) is ``Conflict``; retries that run out are ``ApiUnavailable``; both are
    ``ApiError``, so ``except ApiError`` catches every failed request."""
    with pytest.raises(Conflict) as lost:
        await call(Flaky(ApiError(status=409, reason="Conflict")), verb="patch", resource="test")
    assert (lost.value.status, isinstance(lost.value, ApiError)) == (409, True)
    with pytest.raises(Conflict):
        await call(
            Flaky(ApiError(status=422)), verb="patch", resource="test", conflict_on=frozenset({409, 422})
        )
    with pytest.raises(ApiError) as other:
        await call(Flaky(ApiError(status=422)), verb="patch", resource="test")
    assert not isinstance(other.value, Conflict)
    with pytest.raises(ApiUnavailable) as gone:
        await call(
            Flaky(*(ApiError(status=503) for _ in range(3))),
            verb="get",
            resource="test",
            attempts=2,
            base_delay=0.001,
        )
    assert (gone.value.status, isinstance(gone.value, ApiError)) == (503, True)
    # An inner call's verdict is not retried again by an outer one.
    outer = Flaky(ApiUnavailable("inner gave up", 503), Conflict("inner lost"))
    with pytest.raises(ApiUnavailable):
        await call(outer, verb="get", resource="test", base_delay=0.001)
    assert outer.calls == 1


def test_an_api_error_reads_as_one_line_with_the_apiservers_message() -> None:
    exc = ApiError(
        status=403, reason="Forbidden", body='{"kind":"Status","message":"nodes \\"a\\" is forbidden"}'
    )
    assert str(exc) == 'HTTP 403 Forbidden: nodes "a" is forbidden'
    assert exc.message == 'nodes "a" is forbidden'
    assert str(ApiError(status=0, reason="Cannot connect")) == "Cannot connect"
    assert str(ApiError(status=404, reason="Not Found", body="not json")) == "HTTP 404 Not Found"
