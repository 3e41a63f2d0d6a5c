"""gpushare.api.quantity: the one Kubernetes quantity parser, and how its callers read it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpushare.api.quantity import (
    MAX_AMOUNT,
    QuantityError,
    canonical,
    integer_or_none,
    parse_quantity,
    quantity_or_none,
    stored,
)
from gpushare.policy.views import quantity_int
from gpushare.rulekit.quantity import parse_amount


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


# --- the value the apiserver stores (issue 22): every spelling is judged as its stored text -------


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # measured against kube-apiserver v1.34 (a Pod's memory limit, dry run); the integration
        # test test_admission_policy.py checks generated spellings against the live apiserver
        pytest.param("5e1", "50", id="exponent-not-multiple-of-3"),
        pytest.param("0.05k", "50", id="fraction-k"),
        pytest.param("50000m", "50", id="milli"),
        pytest.param("5000", "5k", id="trailing-000"),
        pytest.param("1.5", "1500m", id="fraction"),
        pytest.param("2048Mi", "2Gi", id="binary-multiple-of-8"),
        pytest.param("1536Mi", "1536Mi", id="binary-not-a-power"),
        pytest.param("0.5Ki", "512", id="binary-below-1Ki"),
        pytest.param("12e2", "1200", id="exponent-2"),
        pytest.param("33e0", "33e0", id="kept-e0"),
        pytest.param("1E3", "1E3", id="kept-E3"),
        pytest.param("+5", "+5", id="kept-plus"),
        pytest.param("05", "05", id="kept-leading-zero"),
        pytest.param("1.500", "1.500", id="kept-milli-digits"),
        pytest.param("3Gi", "3Gi", id="kept-binary"),
        pytest.param("-0", "0", id="minus-zero"),
        pytest.param("0Gi", "0", id="zero-binary"),
        pytest.param("5n", "1m", id="rounded-up-to-milli"),
        pytest.param("100u", "1m", id="micro"),
    ],
)
def test_stored_is_the_apiservers_text(text: str, kept: str) -> None:
    assert parse_quantity(text).stored == kept


#: Non-negative quantities within int64, in any spelling of the grammar.
SPELLINGS = st.builds(
    lambda whole, fraction, suffix: f"{whole}{fraction}{suffix}",
    st.sampled_from(["0", "1", "2", "5", "007", "30", "33", "50", "100", "1000", "1024", "2048", "123456"]),
    st.sampled_from(["", ".", ".0", ".5", ".05", ".500", ".000001", ".0000000001"]),
    st.sampled_from(
        ["", "n", "u", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e0", "e1", "e2", "e3", "e-3", "E2", "e-9", "e6"]
    ),
)


def _verdict(raw: object) -> tuple[int | None, str | None]:
    amount = parse_amount(raw)
    error = amount.error
    if error is not None and error.startswith("has a unit suffix"):
        error = "has a unit suffix"  # the suffix as written: Mi for 2048Mi, Gi once stored as 2Gi
    return amount.value, error


@given(SPELLINGS)
def test_a_spelling_and_its_stored_text_get_the_same_verdict(text: str) -> None:
    """``gpushare check`` (the text as written) and the webhook (the text the apiserver stores)
    judge every spelling alike: exponent, suffix and decimal spellings of one amount."""
    q = parse_quantity(text)
    assert _verdict(text) == _verdict(q.stored) == _verdict(q.canonical)
    value, error = _verdict(text)
    if error is None:
        assert value == q.amount  # a whole amount is that amount, however written
    else:
        assert q.amount != q.amount.to_integral_value() or (q.is_binary and q.amount % 1024 == 0)


@given(SPELLINGS)
def test_canonical_keeps_the_amount_and_is_a_fixed_point(text: str) -> None:
    q = parse_quantity(text)
    again = parse_quantity(q.canonical)
    assert again.nano == q.nano
    assert again.canonical == q.canonical == canonical(again)
    assert parse_quantity(q.stored).nano == q.amount.quantize(Decimal("1e-3"), rounding="ROUND_UP")
    assert stored(parse_quantity(q.stored)) == q.stored


@given(st.integers(0, 10**6), st.sampled_from(["", "e0", "k", "m"]))
def test_whole_numbers_in_every_spelling_are_their_amount(n: int, how: str) -> None:
    text = {
        "": str(n),
        "e0": f"{n}e0",
        "k": f"{n / 1000}k" if n % 1000 else f"{n // 1000}k",
        "m": f"{n * 1000}m",
    }[how]
    assert parse_amount(text).value == n
