"""The generated CEL as one line, for tests that look for a piece of it (support for several modules).

The shipped expressions are laid out over lines and their long literals split
(:func:`gpushare.admission.celfmt.readable`); :func:`one_line` undoes both, giving back the
generator's text, so a test can look for ``'text ' + (value)`` in it as written.
"""

from __future__ import annotations

import re
import sys

from gpushare.admission.celfmt import layout

#: A bracketed concatenation of same-quoted literals only, as ``split_literals`` writes one.
_SPLIT = re.compile(
    r"""\((?P<s>'(?:\\.|[^'\\])*'(?: \+ '(?:\\.|[^'\\])*')+)\)"""
    r"""|\((?P<d>"(?:\\.|[^"\\])*"(?: \+ "(?:\\.|[^"\\])*")+)\)"""
)
_PIECE = re.compile(r"""'((?:\\.|[^'\\])*)'|"((?:\\.|[^"\\])*)\"""")


def _joined(match: re.Match[str]) -> str:
    quote = "'" if match.group("s") is not None else '"'
    bodies = [m.group(1) if quote == "'" else m.group(2) for m in _PIECE.finditer(match.group())]
    return quote + "".join(bodies) + quote


def one_line(expr: str) -> str:
    """``expr`` on one line with its split literals joined again."""
    return _SPLIT.sub(_joined, layout(expr, sys.maxsize))
