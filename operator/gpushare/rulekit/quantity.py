"""Values of the GPU-sharing extended resources (a backend's GPU memory and compute share).

They are counted in whole units (GiB or MiB of GPU memory, percent of one GPU). A value is judged
as the apiserver stores it: a Kubernetes quantity is canonicalized before any admission plugin
sees it (``5e1``, ``0.05k`` and ``50000m`` are stored as ``50``, ``5000`` as ``5k``), so every
spelling of a whole amount is that amount. Refused, with a reason: a fraction (``1.5``), a
negative amount, a binary suffix the apiserver keeps (``2Gi``: a whole number of KiB written with
``Ki``..``Ei``; ``1.5Ki`` is stored as ``1536``), text that is no quantity, and JSON that is no
number or string. The rules turn the reason into a denial, never an exception; the
ValidatingAdmissionPolicy's CEL (:func:`gpushare.rulekit.cel.number`,
:func:`gpushare.rulekit.cel.reason`) reads the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpushare.api.quantity import Quantity, plain_int, quantity_or_none

#: Longest value shown in a message; longer ones are cut (a manifest value can be megabytes long).
MAX_SHOWN = 40


def clip(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def shown_value(raw: object) -> str:
    """A user-written value for a message: strings that are not plain integers quoted; all clipped."""
    if isinstance(raw, str):
        return clip(raw if raw.isascii() and raw.isdigit() else repr(raw))
    if isinstance(raw, dict | list):
        return f"<{type(raw).__name__} of {len(raw)} item(s)>"
    return clip(str(raw))


#: Longest text read as a number (a manifest value can be megabytes long).
MAX_TEXT = 64
#: Why a value is not a whole number of units (the policy's CEL writes the same words).
IS_BOOLEAN = "is a boolean, not a whole number"
IS_NEGATIVE = "is negative"
IS_EMPTY = "is empty"
NOT_WHOLE = "is not a whole number"
NOT_A_NUMBER = "is not a number"
SUFFIX_REASON = "has a unit suffix '{suffix}'"
#: Kubernetes writes a binary-suffixed amount with its suffix only when it is a whole number of
#: this (``2048Mi`` -> ``2Gi``); else as decimal (``0.5Ki`` -> ``512``, ``1.5Ki`` -> ``1536``).
BINARY_FLOOR = 1024


def type_reason(name: str) -> str:
    return f"is a {name}, not a number"


@dataclass(frozen=True)
class Amount:
    """A GPU-sharing request value: ``value`` when it is a non-negative whole number, else ``error``
    says why not."""

    raw: object
    value: int | None = None
    error: str | None = None

    @property
    def shown(self) -> str:
        """The value as written, for messages (cut to a readable length): quoted when it is text
        that is not a whole number (as the policy's CEL shows it)."""
        if self.value is not None and isinstance(self.raw, str):
            return clip(self.raw)
        return shown_value(self.raw)


def parse_amount(raw: object) -> Amount:
    """Judge a GPU-sharing request value as the apiserver stores it; never raises.

    The text is read by the one Kubernetes quantity parser (:mod:`gpushare.api.quantity`), so any
    spelling of a whole amount is accepted (``50``, ``5e1``, ``0.05k``, ``50000m``), the same
    verdict as for its canonical form (:func:`gpushare.api.quantity.canonical`).
    """
    if isinstance(raw, bool):
        return Amount(raw, error=IS_BOOLEAN)
    if isinstance(raw, float):
        return Amount(raw, error=IS_NEGATIVE if raw < 0 else NOT_WHOLE)
    if raw is None:
        return Amount(raw, error=IS_EMPTY)
    if isinstance(raw, str) and len(raw) > MAX_TEXT:
        return Amount(raw, error=NOT_A_NUMBER)
    if not isinstance(raw, int | str):
        return Amount(raw, error=type_reason(type(raw).__name__))
    plain = plain_int(raw)
    if plain is not None and plain >= 0:
        return Amount(raw, value=plain)
    q = quantity_or_none(raw)
    if q is None:
        return Amount(raw, error=IS_NEGATIVE if str(raw).strip().startswith("-") else NOT_A_NUMBER)
    return _judge(raw, q)


def _judge(raw: object, q: Quantity) -> Amount:
    if q.amount < 0:
        return Amount(raw, error=IS_NEGATIVE)
    if not q.is_whole:
        return Amount(raw, error=NOT_WHOLE)
    if q.is_binary and q.amount >= BINARY_FLOOR and q.amount % BINARY_FLOOR == 0:
        return Amount(raw, error=SUFFIX_REASON.format(suffix=q.suffix))
    return Amount(raw, value=int(q))


def same_amount(a: object, b: object) -> bool:
    """Whether two values of a request and its limit are the same: the same number, else the same
    text, else two quantity strings of the same amount (as the apiserver compares them)."""
    x, y = parse_amount(a), parse_amount(b)
    if x.value is not None and y.value is not None:
        return x.value == y.value
    if a == b and isinstance(a, bool) == isinstance(b, bool):
        return True
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    qa, qb = quantity_or_none(a), quantity_or_none(b)
    return qa is not None and qb is not None and qa.nano == qb.nano


def parse_count(raw: object) -> Amount:
    """A count written as a label value (such as ACK's multi-GPU label, ``"2"``): labels are text, stored
    as written, so only plain digits count (the scheduler reads them with ``strconv.Atoi``)."""
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 18:
        return Amount(raw, value=int(raw))
    amount = parse_amount(raw)
    if amount.error is not None:
        return amount
    return Amount(raw, error="is not a plain whole number (digits only)")
