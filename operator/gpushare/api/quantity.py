"""Kubernetes resource quantities (``resource.Quantity``), parsed in one place.

The grammar is Kubernetes' own::

    <quantity>        ::= <sign><number><suffix>      (sign optional: "+" or "-")
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalSI> | <decimalExponent>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= m | "" | k | M | G | T | P | E
    <decimalExponent> ::= e <signed digits> | E <signed digits>

:func:`parse_quantity` is strict: no surrounding whitespace, no other suffix. Like Kubernetes, the
amount is capped at 2^63-1 in magnitude (so ``1e999999`` cannot make a huge number).

Who reads quantities, and how leniently, is decided by the callers, each saying so:
``policy.views.quantity_int`` (the planner, inspect) turns an unreadable value into 0;
``admission.quantity.parse_amount`` (the rules) accepts only plain whole numbers and names the
problem otherwise; the quota helper reads the device plugin's integer variables with
:func:`integer_or_none`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: The largest magnitude a Kubernetes quantity represents (larger ones are capped).
MAX_AMOUNT = Decimal(2**63 - 1)
#: An exponent beyond this is capped before it is applied (10^40 is already far past MAX_AMOUNT).
_MAX_EXPONENT = 40


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity."""


@dataclass(frozen=True)
class Quantity:
    """A parsed quantity: the amount, and how it was written."""

    text: str
    #: The exact amount (capped at MAX_AMOUNT in magnitude).
    amount: Decimal
    #: ``-`` when written negative (``-0`` included), ``+`` when written with a plus, else empty.
    sign: str = ""
    #: The unit suffix as written (``Gi``, ``k``, ``m``), or the exponent (``e3``); empty for none.
    suffix: str = ""

    @property
    def has_exponent(self) -> bool:
        """Written with a decimal exponent (``1e3``) rather than a unit suffix."""
        return bool(self.suffix) and self.suffix not in _BINARY and self.suffix not in _DECIMAL

    @property
    def is_plain(self) -> bool:
        """Written as digits only: no sign, no fraction, no suffix."""
        return self.text.isdigit()

    @property
    def is_whole(self) -> bool:
        return self.amount == self.amount.to_integral_value()

    def __int__(self) -> int:
        """The amount without its fraction (toward zero)."""
        return int(self.amount)


def _cap(amount: Decimal) -> Decimal:
    return max(-MAX_AMOUNT, min(MAX_AMOUNT, amount))


def parse_quantity(text: str) -> Quantity:
    """Parse ``text`` by the Kubernetes grammar, or raise :class:`QuantityError`."""
    m = _QUANTITY_RE.fullmatch(text)
    if m is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    number = Decimal(m["number"])
    if m["exponent"] is not None:
        digits = m["exponent"].lstrip("+-").lstrip("0")
        exponent = _MAX_EXPONENT if len(digits) > 3 else int(digits or "0")
        if m["exponent"].startswith("-"):
            exponent = -exponent
        suffix = text[len(m["sign"]) + len(m["number"]) :]
        amount = number.scaleb(max(-_MAX_EXPONENT, min(_MAX_EXPONENT, exponent)))
    else:
        suffix = m["suffix"] or ""
        binary = suffix in _BINARY
        amount = number * (2 ** _BINARY[suffix]) if binary else number.scaleb(_DECIMAL[suffix])
    if m["sign"] == "-":
        amount = -amount
    return Quantity(text=text, amount=_cap(amount), sign=m["sign"], suffix=suffix)


def quantity_or_none(raw: object) -> Quantity | None:
    """A quantity from a JSON value: a string (surrounding whitespace ignored) or an int; None for
    anything else (bool, float, null, objects) and for text that does not parse."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return Quantity(text=str(raw), amount=_cap(Decimal(raw)), sign="-" if raw < 0 else "")
    if not isinstance(raw, str):
        return None
    try:
        return parse_quantity(raw.strip())
    except QuantityError:
        return None


def plain_int(raw: object) -> int | None:
    """The common case without the full parse: an int, or a string of up to 18 digits."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw if -MAX_AMOUNT <= raw <= MAX_AMOUNT else None
    if isinstance(raw, str):
        text = raw.strip()
        if len(text) <= 18 and text.isascii() and text.isdigit():
            return int(text)
    return None


def amount_int(raw: object) -> int | None:
    """The amount of a quantity (see :func:`quantity_or_none`) without its fraction, or None."""
    plain = plain_int(raw)
    if plain is not None:
        return plain
    q = quantity_or_none(raw)
    return None if q is None else int(q)


def integer_or_none(raw: object) -> int | None:
    """An integer written as one (an int, or digits with an optional sign; surrounding whitespace
    ignored), else None: no fraction, unit suffix or exponent."""
    plain = plain_int(raw)
    if plain is not None:
        return plain
    q = quantity_or_none(raw)
    if q is None or q.suffix or "." in q.text:
        return None
    return int(q)
