"""gpushare.api.quantity: the one Kubernetes quantity parser, and how its callers read it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gpushare.api.quantity import MAX_AMOUNT, QuantityError, integer_or_none, parse_quantity, quantity_or_none
from gpushare.policy.views import quantity_int


@pytest.mark.parametrize(
    ("text", "amount", "suffix"),
    [
        pytest.param("4", Decimal(4), "", id="plain"),
        pytest.param("2k", Decimal(2000), "k", id="k"),
        pytest.param("1Ki", Decimal(1024), "Ki", id="Ki"),
        pytest.param("1.5Gi", Decimal(3 * 2**29), "Gi", id="fraction-Gi"),
        pytest.param("2P", Decimal(2 * 10**15), "P", id="P"),
        pytest.param("1E", Decimal(10**18), "E", id="E-is-exa"),
        pytest.param("3Ei", Decimal(3 * 2**60), "Ei", id="Ei"),
        pytest.param("1e3", Decimal(1000), "e3", id="exponent"),
        pytest.param("1E3", Decimal(1000), "E3", id="exponent-upper"),
        pytest.param("5e-1", Decimal("0.5"), "e-1", id="negative-exponent"),
        pytest.param("1500m", Decimal("1.5"), "m", id="milli"),
        pytest.param(".5", Decimal("0.5"), "", id="leading-dot"),
        pytest.param("5.", Decimal(5), "", id="trailing-dot"),
        pytest.param("-2", Decimal(-2), "", id="negative"),
        pytest.param("+2", Decimal(2), "", id="plus"),
        pytest.param("1e999999999", MAX_AMOUNT, "e999999999", id="capped"),
        pytest.param("-9Ei", -MAX_AMOUNT, "Ei", id="capped-negative"),
    ],
)
def test_parse(text: str, amount: Decimal, suffix: str) -> None:
    q = parse_quantity(text)
    assert q.amount == amount
    assert q.suffix == suffix
    assert q.has_exponent == (suffix.lower().startswith("e") and suffix not in ("E", "Ei"))


@pytest.mark.parametrize("text", ["", "abc", " 5", "1e", "1GB", "1.2.3", "--1", "e3", "1 Gi", "Gi"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)
    assert (quantity_or_none(text) is None) == (text != " 5")  # the lenient reader strips spaces


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("7", 7, id="str"),
        pytest.param(" -1 ", -1, id="signed-spaces"),
        pytest.param(3, 3, id="int"),
        pytest.param("1.0", None, id="fraction"),
        pytest.param("1k", None, id="suffix"),
        pytest.param("1e3", None, id="exponent"),
        pytest.param("1_000", None, id="python-underscore"),
        pytest.param(True, None, id="bool"),
        pytest.param(None, None, id="none"),
    ],
)
def test_integer_or_none(value: Any, expected: int | None) -> None:
    assert integer_or_none(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("2P", 2 * 10**15, id="P"),
        pytest.param("1Ei", 2**60, id="Ei"),
        pytest.param("1e3", 1000, id="exponent"),
        pytest.param("1500m", 1, id="fraction-dropped"),
        pytest.param(2.7, 2, id="float"),
        pytest.param(float("nan"), 0, id="nan"),
        pytest.param("1e99999999999", 2**63 - 1, id="capped"),
    ],
)
def test_views_read_every_quantity(value: Any, expected: int) -> None:
    assert quantity_int(value) == expected
