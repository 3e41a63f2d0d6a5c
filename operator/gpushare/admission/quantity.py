"""Quantities of the GPU-sharing extended resources (``aliyun.com/gpu-mem``, ``gpu-core.percentage``).

Both are counted in whole units (GiB of GPU memory, percent of one GPU), so only non-negative
integers are meaningful: an int from YAML (``2``) or the API's string form (``"2"``). Anything
else (``"1.5"``, ``"2Gi"``, ``"-1"``, ``"abc"``, ``true``) is rejected with a reason; the rules
turn that reason into a denial, never an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_INT_RE = re.compile(r"^[0-9]+$")
_SUFFIX_RE = re.compile(r"^[0-9.]+([a-zA-Z]+)$")


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
        return clip(repr(raw) if not _INT_RE.match(raw) else raw)
    if isinstance(raw, dict | list):
        return f"<{type(raw).__name__} of {len(raw)} item(s)>"
    return clip(str(raw))


@dataclass(frozen=True)
class Quantity:
    """A parsed quantity: ``value`` when it is a non-negative integer, else ``error`` says why not."""

    raw: object
    value: int | None = None
    error: str | None = None

    @property
    def shown(self) -> str:
        """The value as the user wrote it, for messages (cut to a readable length)."""
        return shown_value(self.raw)


def parse_quantity(raw: object) -> Quantity:
    """Parse a GPU-sharing quantity; never raises."""
    if isinstance(raw, bool):
        return Quantity(raw, error="is a boolean, not a whole number")
    if isinstance(raw, int):
        if raw < 0:
            return Quantity(raw, error="is negative")
        return Quantity(raw, value=raw)
    if isinstance(raw, float):
        if raw < 0:
            return Quantity(raw, error="is negative")
        return Quantity(raw, error="is not a whole number")
    if isinstance(raw, str):
        if len(raw) > 64:
            return Quantity(raw, error="is not a number")
        text = raw.strip()
        if _INT_RE.match(text):
            return Quantity(raw, value=int(text))
        if text.startswith("-"):
            return Quantity(raw, error="is negative")
        suffix = _SUFFIX_RE.match(text)
        if suffix:
            return Quantity(
                raw,
                error=f"has a unit suffix {suffix.group(1)!r}",
            )
        if re.match(r"^[0-9]*\.[0-9]+$", text):
            return Quantity(raw, error="is not a whole number")
        return Quantity(raw, error="is not a number")
    if raw is None:
        return Quantity(raw, error="is empty")
    return Quantity(raw, error=f"is a {type(raw).__name__}, not a number")
