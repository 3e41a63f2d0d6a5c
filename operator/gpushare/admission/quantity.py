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


@dataclass(frozen=True)
class Quantity:
    """A parsed quantity: ``value`` when it is a non-negative integer, else ``error`` says why not."""

    raw: object
    value: int | None = None
    error: str | None = None

    @property
    def shown(self) -> str:
        """The value as the user wrote it, for messages."""
        if isinstance(self.raw, str):
            return repr(self.raw) if not _INT_RE.match(self.raw) else self.raw
        return str(self.raw)


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
