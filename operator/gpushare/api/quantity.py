"""Kubernetes resource quantities (``resource.Quantity``), parsed in one place.

The grammar is Kubernetes' own::

    <quantity>        ::= <sign><number><suffix>      (sign optional: "+" or "-")
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalSI> | <decimalExponent>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
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

import math
import re
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal
from typing import Any

_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
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

    @property
    def is_binary(self) -> bool:
        """Written with a binary suffix (``Ki`` .. ``Ei``)."""
        return self.suffix in _BINARY

    @property
    def nano(self) -> Decimal:
        """The amount as Kubernetes keeps it: rounded up (away from zero) to nano units."""
        return self.amount.quantize(_NANO, rounding=ROUND_UP) if self.amount % _NANO else self.amount

    @property
    def canonical(self) -> str:
        """The canonical text of this quantity (see :func:`canonical`)."""
        return canonical(self)

    @property
    def stored(self) -> str:
        """The text the apiserver stores for this quantity in a built-in object (see :func:`stored`)."""
        return stored(self)


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


#: Kubernetes keeps nine decimal places (``n``); finer amounts are rounded up (away from zero).
_NANO = Decimal("1e-9")
_MILLI = Decimal("1e-3")
_DECIMAL_SUFFIX = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIX = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


def canonical(q: Quantity, unit: Decimal = _NANO) -> str:
    """The canonical text of a quantity, as ``resource.Quantity`` writes it (``String()``).

    This is what the apiserver stores and what every admission plugin sees for a quantity field
    of a built-in type (a container's ``resources``): the amount rounded up to nano units, then

    * written with a binary suffix (``Gi``): as mantissa and the largest power of 1024 that
      divides it, when the amount is whole and at least 1024 in magnitude (``2048Mi`` -> ``2Gi``,
      ``1536Mi`` stays); else as decimal (``0.5Ki`` -> ``512``);
    * written with an exponent (``5e1``): as mantissa and a power of ten that is a multiple of 3,
      the mantissa an integer without trailing zeros in groups of three (``5e1`` -> ``50``,
      ``5e3`` -> ``5e3``);
    * otherwise (plain or a decimal SI suffix): the same, with the SI suffix for the power
      (``5000`` -> ``5k``, ``0.05k`` -> ``50``, ``1.5`` -> ``1500m``, ``50000m`` -> ``50``).

    Zero is ``0`` however written (``-0``, ``0Gi``). ``unit`` is the precision kept (a
    ``ResourceList`` of a built-in object keeps milli units: see :func:`stored`).
    """
    amount = q.amount.quantize(unit, rounding=ROUND_UP) if q.amount % unit else q.amount
    if amount == 0:
        return "0"
    if q.is_binary and abs(amount) >= 1024 and amount == amount.to_integral_value():
        mantissa, power = int(amount), 0
        while mantissa % 1024 == 0 and power < 6:
            mantissa //= 1024
            power += 1
        return f"{mantissa}{_BINARY_SUFFIX[power]}"
    sign, digits, exponent = amount.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    shift = exponent % 3  # lower the exponent to a multiple of 3 (toward minus infinity)
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    text = f"{'-' if sign else ''}{mantissa}"
    if q.has_exponent:
        return text if exponent == 0 else f"{text}e{exponent}"
    return text + _DECIMAL_SUFFIX[exponent]


def stored(q: Quantity) -> str:
    """The text the apiserver keeps for a quantity field of a built-in object (a container's
    ``resources``), which is what admission plugins see: the text as written when
    ``resource.ParseQuantity`` finds it already canonical on its fast path, else :func:`canonical`.

    Its fast path (no more than 18 digits) keeps a decimal text whose digits (leading zeros
    dropped) do not start with 0 or end in 000 and whose power of ten is a multiple of 3 (``33e0``,
    ``1E3``, ``+5``, ``1.500``), and a binary text of at most about 15 digits of amount whose
    number is not a multiple of 8 (``3Gi``; ``2048Mi`` is rewritten ``2Gi``). A resource list
    is then rounded up to milli units (``5n`` is stored as ``1m``), which rewrites any text finer
    than that.
    """
    if q.text == "0":
        return q.text
    m = _QUANTITY_RE.fullmatch(q.text)
    if m is None:  # built from an int
        return canonical(q, _MILLI)
    num, _, denom = m["number"].partition(".")
    num = num.lstrip("0") or "0"
    suffix = m["suffix"] or ""
    if suffix in _BINARY:
        exponent = _BINARY[suffix]
        precision = 15 - len(num) - exponent * 3 // 10 - 1
        if not denom and precision >= 0 and int(num) << exponent <= MAX_AMOUNT and int(num) & 7:
            return q.text
        return canonical(q, _MILLI)
    if m["exponent"] is not None:
        digits = m["exponent"].lstrip("+-")
        if len(digits) > 18:
            return canonical(q, _MILLI)
        exponent = int(digits) * (-1 if m["exponent"].startswith("-") else 1)
    else:
        exponent = _DECIMAL[suffix]
    scale = exponent - len(denom)
    shifted = num + denom
    fast = len(shifted) <= 18 and scale >= -3 and scale % 3 == 0
    if fast and not shifted.endswith("000") and not shifted.startswith("0"):
        return q.text
    return canonical(q, _MILLI)


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


def quantity_int(value: Any) -> int:
    """A Kubernetes quantity as a whole number (``"4"``, ``4``, ``"2k"``, ``"1e3"``), fraction dropped.

    Lenient on purpose, for odd live data: a value that is not a quantity (see
    :func:`amount_int`) counts as 0, and a float (YAML written by hand)
    as its whole part, rather than failing the whole plan; the admission rules reject such requests
    up front.
    """
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    return amount_int(value) or 0
