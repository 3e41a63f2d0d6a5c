"""Values of the GPU-sharing extended resources (``aliyun.com/gpu-mem``, ``gpu-core.percentage``).

Both are counted in whole units (GiB of GPU memory, percent of one GPU), so only non-negative
integers are meaningful: an int from YAML (``2``) or the API's string form (``"2"``). Anything
else (``"1.5"``, ``"2Gi"``, ``"1e3"``, ``"-1"``, ``"abc"``, ``true``) is rejected with a reason; the rules
turn that reason into a denial, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpushare.api.quantity import plain_int, quantity_or_none

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


@dataclass(frozen=True)
class Amount:
    """A GPU-sharing request value: ``value`` when it is a non-negative whole number, else ``error``
    says why not."""

    raw: object
    value: int | None = None
    error: str | None = None

    @property
    def shown(self) -> str:
        """The value as the user wrote it, for messages (cut to a readable length)."""
        return shown_value(self.raw)


def parse_amount(raw: object) -> Amount:
    """Judge a GPU-sharing request value; never raises.

    The text is read by the one Kubernetes quantity parser (:mod:`gpushare.api.quantity`); of the
    quantities, only plain digits are accepted (the ValidatingAdmissionPolicy's CEL reads the same).
    """
    if isinstance(raw, bool):
        return Amount(raw, error="is a boolean, not a whole number")
    if isinstance(raw, float):
        return Amount(raw, error="is negative" if raw < 0 else "is not a whole number")
    if raw is None:
        return Amount(raw, error="is empty")
    if isinstance(raw, str) and len(raw) > 64:
        return Amount(raw, error="is not a number")
    if not isinstance(raw, int | str):
        return Amount(raw, error=f"is a {type(raw).__name__}, not a number")
    plain = plain_int(raw)
    if plain is not None and plain >= 0:
        return Amount(raw, value=plain)
    q = quantity_or_none(raw)
    if q is None:
        return Amount(raw, error="is negative" if str(raw).strip().startswith("-") else "is not a number")
    if q.sign == "-":
        return Amount(raw, error="is negative")
    if q.suffix:
        what = "an exponent" if q.has_exponent else "a unit suffix"
        return Amount(raw, error=f"has {what} {q.suffix!r}")
    if not q.is_whole or "." in q.text:
        return Amount(raw, error="is not a whole number")
    if not q.is_plain:
        return Amount(raw, error="is not a plain whole number (digits only)")
    return Amount(raw, value=int(q))
