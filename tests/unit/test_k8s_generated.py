"""``gpushare.k8s.generated.refused``: the generated client's errors, met by the dev harness."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare.k8s.generated import refused


def call(status: int, reason: str = "") -> None:
    """A generated client's call the apiserver answered with ``status``."""
    raise ApiException(status=status, reason=reason)


def test_a_listed_status_ends_the_block_and_is_recorded() -> None:
    ran = []
    with refused(404, 409) as refusal:
        ran.append(1)
        call(409, "Conflict")
        ran.append(2)  # not reached: the refusal ended the block
    ran.append(3)  # the code after the block runs
    assert ran == [1, 3]
    assert refusal and refusal.status == 409 and refusal.reason == "Conflict"


def test_a_block_that_runs_through_is_no_refusal() -> None:
    with refused(409) as refusal:
        pass
    assert not refusal and refusal.status is None


def test_another_status_propagates_unchanged() -> None:
    with pytest.raises(ApiException) as caught, refused(409):
        call(500, "Internal")
    assert caught.value.status == 500


def test_no_status_given_means_any_status() -> None:
    with refused() as refusal:
        call(503, "Unavailable")
    assert refusal.status == 503


def test_other_exceptions_are_not_touched() -> None:
    def broken() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError), refused():
        broken()
