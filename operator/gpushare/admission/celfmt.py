"""Readable CEL: a generated expression laid out over lines a reviewer can read (pure).

:func:`layout` takes any CEL expression as a string and changes only the whitespace outside its
string literals: CEL treats a line break as any other whitespace, so the laid-out expression
means, and costs, what the one-line one does (tests/unit/test_celfmt.py holds it for random
expressions, and the apiserver compiles the shipped ones in the integration tests). It knows
nothing of how the expressions are built.

The rules, those of most code formatters:

* an expression (or a bracket's contents) that fits in :data:`WIDTH` columns stays on one line;
* one that does not is broken at its loosest separators outside brackets: the commas of a call,
  list or map, else a conditional's ``?`` and ``:``, else ``||``, else ``&&``, else ``+``; an
  operator starts its line, a comma ends one; short arguments, operands and list items share a
  line while it has room (a conditional's branches never do);
* a bracket whose contents do not fit keeps its first item on its own line and indents the
  rest by :data:`STEP` spaces; closing brackets trail the last line (``...)))``);
* a chain whose last operand is a bracketed chain of the same kind continues it at the same
  indent: ``a && (b && (c && d))`` and ``a ? x : (b ? y : z)`` read as chains, not staircases;
* string literals are never broken, so a line can be longer than :data:`WIDTH` by a literal.

A message longer than a line is a long literal: :func:`split_literals` writes it as a bracketed
concatenation of shorter ones (the same string; the one change that is not whitespace), and
:func:`readable` is the two steps the generated manifests take.

:func:`yaml_dump` / :func:`yaml_dump_all` write objects with every multi-line string as a
literal block scalar (``|-``), so the generated manifests read as code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

#: The columns a line of an expression aims at, its indentation included.
WIDTH = 100
#: Spaces per level of brackets.
STEP = 2
#: The longest string literal :func:`split_literals` keeps whole (quotes included).
LITERAL = 80

#: Separators, loosest first: a level is broken at the loosest kind it holds.
_LOOSENESS: tuple[frozenset[str], ...] = (
    frozenset({","}),
    frozenset({"?", ":"}),
    frozenset({"||"}),
    frozenset({"&&"}),
    frozenset({"+"}),
)
#: Separators whose pieces may share a line (a conditional's branches each get their own).
_FILLED = frozenset({",", "||", "&&", "+"})
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_SPACE = re.compile(r"\s+")
_EXPONENT = re.compile(r"(?<![\w.])[0-9][0-9.]*[eE]$")


@dataclass(frozen=True)
class _Sep:
    text: str


@dataclass
class _Group:
    open: str
    close: str
    parts: list[_Part] = field(default_factory=list)
    #: ``?`` seen since the last comma with no ``:`` yet (a map's ``k: v`` is no conditional).
    pending: int = 0


_Part = str | _Sep | _Group


def _string_end(expr: str, start: int) -> int:
    """The index just past the string literal whose quote is at ``start`` (CEL's quotes: ``'``,
    ``"``, tripled; a raw literal's ``r`` prefix turns escapes off)."""
    quote = expr[start]
    head = start
    while head > 0 and start - head < 2 and expr[head - 1] in "rRbB":
        head -= 1
    word = head > 0 and (expr[head - 1].isalnum() or expr[head - 1] in "_.")
    raw = not word and "r" in expr[head:start].lower()
    if expr.startswith(quote * 3, start):
        quote *= 3
    i = start + len(quote)
    while i < len(expr):
        if expr[i] == "\\" and not raw:
            i += 2
            continue
        if expr.startswith(quote, i):
            return i + len(quote)
        if len(quote) == 1 and expr[i] in "\r\n":
            break
        i += 1
    raise ValueError(f"unterminated string literal at {start}: {expr[start : start + 40]!r}")


def _parse(expr: str) -> _Group:
    """``expr`` as nested groups of atoms (text with its whitespace runs made one space) and
    separators; :class:`ValueError` when its brackets or quotes do not balance."""
    root = _Group("", "")
    stack = [root]
    buf: list[str] = []

    def flush() -> None:
        if buf:
            stack[-1].parts.append("".join(buf))
            buf.clear()

    def previous() -> str:
        """The last character before the current one that is not whitespace."""
        text = "".join(buf).rstrip()
        if text:
            return text[-1]
        parts = stack[-1].parts
        if parts and isinstance(parts[-1], _Sep):
            return parts[-1].text[-1]
        return stack[-1].open if not parts else "x"

    i = 0
    while i < len(expr):
        ch = expr[i]
        if ch in "'\"":
            end = _string_end(expr, i)
            buf.append(expr[i:end])
            i = end
        elif ch.isspace():
            if not buf or not buf[-1].isspace():
                buf.append(" ")
            i += 1
        elif ch == "/" and expr.startswith("//", i):
            raise ValueError(f"a comment at {i}: comments are not laid out")
        elif ch in _CLOSE:
            flush()
            group = _Group(ch, _CLOSE[ch])
            stack[-1].parts.append(group)
            stack.append(group)
            i += 1
        elif ch in ")]}":
            flush()
            if len(stack) == 1 or stack[-1].close != ch:
                raise ValueError(f"unbalanced {ch!r} at {i}")
            stack.pop()
            i += 1
        elif expr.startswith(("&&", "||"), i):
            flush()
            stack[-1].parts.append(_Sep(expr[i : i + 2]))
            i += 2
        elif ch == "?" and previous() not in ".[{(,":  # not optional syntax (a.?b, [?x], {?k: v})
            flush()
            stack[-1].pending += 1
            stack[-1].parts.append(_Sep("?"))
            i += 1
        elif ch == ":" and (stack[-1].open != "{" or stack[-1].pending > 0):
            flush()
            stack[-1].pending = max(0, stack[-1].pending - 1)
            stack[-1].parts.append(_Sep(":"))
            i += 1
        elif ch == "," or (ch == "+" and not _EXPONENT.search("".join(buf))):
            flush()
            if ch == ",":
                stack[-1].pending = 0
            stack[-1].parts.append(_Sep(ch))
            i += 1
        else:
            if ch == "." and buf == [" "] and stack[-1].parts and isinstance(stack[-1].parts[-1], _Group):
                buf.clear()  # ") .map(": the line break a layout put before a chained call
            buf.append(ch)
            i += 1
    flush()
    if len(stack) != 1:
        raise ValueError(f"unbalanced {stack[-1].open!r}")
    return root


def _flat(part: _Part) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, _Sep):
        return part.text
    return part.open + _flat_all(_strip(part.parts)) + part.close


def _flat_all(parts: Iterable[_Part]) -> str:
    return "".join(_flat(p) for p in parts)


def _strip(parts: Sequence[_Part]) -> list[_Part]:
    """``parts`` without the whitespace at either end (a line break or bracket replaces it)."""
    out = list(parts)
    if out and isinstance(out[0], str):
        out[0] = out[0].lstrip()
    if out and isinstance(out[-1], str):
        out[-1] = out[-1].rstrip()
    return [p for p in out if p != ""]


def _column(text: str, start: int) -> int:
    """The column after ``text`` written from column ``start``."""
    newline = text.rfind("\n")
    return start + len(text) if newline < 0 else len(text) - newline - 1


def _single_group(parts: Sequence[_Part]) -> _Group | None:
    """The bracket that is the whole of ``parts`` (``(a || b)``), if it is."""
    return parts[0] if len(parts) == 1 and isinstance(parts[0], _Group) else None


class _Layout:
    def __init__(self, width: int, step: int) -> None:
        self.width = width
        self.step = step

    def parts(self, parts: Sequence[_Part], column: int, indent: int) -> str:
        """``parts`` written from ``column``; lines they break onto start at ``indent``."""
        parts = _strip(parts)
        flat = _flat_all(parts)
        if column + len(flat) <= self.width:
            return flat
        kinds = {p.text for p in parts if isinstance(p, _Sep)}
        loosest = next((k for k in _LOOSENESS if kinds & k), None)
        if loosest is None:
            return self.sequence(parts, column, indent)
        pieces: list[tuple[str, list[_Part]]] = [("", [])]
        for p in parts:
            if isinstance(p, _Sep) and p.text in loosest:
                pieces.append((p.text, []))
            else:
                pieces[-1][1].append(p)
        if "," in loosest:
            return self.items([_strip(piece) for _, piece in pieces], column, indent)
        return self.operands([(op, _strip(piece)) for op, piece in pieces], column, indent)

    def items(self, pieces: list[list[_Part]], column: int, indent: int) -> str:
        """Comma-separated items: as many on a line as fit, the comma at the end of each."""
        out = ""
        col = column
        broken = False
        for n, piece in enumerate(pieces):
            comma = "," if n < len(pieces) - 1 else ""
            flat = _flat_all(piece) + comma
            if not flat:  # after a trailing comma
                continue
            if n > 0:
                if not broken and col + 1 + len(flat) <= self.width:
                    out += " " + flat
                    col += 1 + len(flat)
                    continue
                out += "\n" + " " * indent
                col = indent
            text = self.parts(piece, col, indent) + comma
            broken = "\n" in text
            out += text
            col = _column(text, col)
        return out

    def operands(self, pieces: list[tuple[str, list[_Part]]], column: int, indent: int) -> str:
        """Operands of one operator kind: each later one on a new line led by its operator
        (``&&``, ``||``, ``+`` pack short operands on a line)."""
        fill = pieces[1][0] in _FILLED
        out = ""
        col = column
        broken = False
        for n, (op, piece) in enumerate(pieces):
            lead = f"{op} " if op else ""
            flat = lead + _flat_all(piece)
            if n > 0:
                if fill and not broken and col + 1 + len(flat) <= self.width:
                    out += " " + flat
                    col += 1 + len(flat)
                    continue
                out += "\n" + " " * indent
                col = indent
            else:
                col = column
            chain = _single_group(piece) if n == len(pieces) - 1 and self.continues(op, piece) else None
            if chain is not None:
                # ``a && (b && c)``, ``a ? x : (b ? y : z)``: the bracket continues the chain at this
                # indent (a staircase would say nothing more)
                text = lead + "(" + self.parts(chain.parts, col + len(lead) + 1, indent) + ")"
            else:
                # an operand's own separators break one step in (its brackets step in by themselves)
                deeper = indent + self.step if any(isinstance(p, _Sep) for p in piece) else indent
                text = lead + self.parts(piece, col + len(lead), deeper)
            broken = "\n" in text
            out += text
            col = _column(text, col)
        return out

    @staticmethod
    def continues(op: str, piece: Sequence[_Part]) -> bool:
        """Whether the last operand ``op piece`` is a bracket holding a chain of the same kind
        (``&& (b && c)``; for a conditional, its ``:`` branch holding a conditional)."""
        group = _single_group(piece)
        if group is None or group.open != "(" or op in ("?", ","):
            return False
        kinds = {p.text for p in group.parts if isinstance(p, _Sep)}
        inner = next((k for k in _LOOSENESS if kinds & k), None)
        return inner is not None and op in inner

    def sequence(self, parts: Sequence[_Part], column: int, indent: int) -> str:
        """Parts with no separator between them (names, literals, calls, brackets), in order; a
        bracket that does not fit where it starts opens a level, and a call chained after a
        bracket (``.map(...)``) that does not fit either starts a line one step in."""
        out = ""
        col = column
        base = indent
        for n, p in enumerate(parts):
            if not isinstance(p, _Group):
                text = _flat(p)
                if n > 0 and text.startswith(".") and isinstance(parts[n - 1], _Group):
                    call = _flat(parts[n + 1]) if n + 1 < len(parts) else ""
                    if col + len(text) + len(call) > self.width and col > indent + self.step:
                        base = indent + self.step
                        out += "\n" + " " * base
                        col = base
                out += text
                col += len(text)
                continue
            flat = _flat(p)
            after = 0  # the text up to the next bracket (e.g. a call's name)
            for q in parts[n + 1 :]:
                if isinstance(q, _Group):
                    break
                after += len(_flat(q))
            if col + len(flat) + after <= self.width or not p.parts:
                out += flat
                col += len(flat)
                continue
            text = p.open + self.parts(p.parts, col + 1, base + self.step) + p.close
            out += text
            col = _column(text, col)
        return out


def split_literals(expr: str, size: int = LITERAL) -> str:
    """``expr`` with each quoted string literal longer than ``size`` characters written as a
    bracketed concatenation of literals of at most ``size`` (split after spaces):
    ``('a long ' + 'message')``. The value is the same string; raw, bytes and triple-quoted
    literals, and a word longer than ``size``, stay whole."""
    out: list[str] = []
    i = 0
    while i < len(expr):
        if expr[i] not in "'\"":
            out.append(expr[i])
            i += 1
            continue
        end = _string_end(expr, i)
        literal = expr[i:end]
        prefixed = i > 0 and expr[i - 1] in "rRbB"
        i = end
        if len(literal) <= size or prefixed or literal.startswith(literal[0] * 3):
            out.append(literal)
            continue
        quote, body = literal[0], literal[1:-1]
        chunks = [""]
        for word in re.split(r"(?<= )", body):  # each word with the spaces after it
            if chunks[-1] and len(chunks[-1]) + len(word) + 2 > size:
                chunks.append("")
            chunks[-1] += word
        out.append(
            literal if len(chunks) == 1 else "(" + " + ".join(f"{quote}{c}{quote}" for c in chunks) + ")"
        )
    return "".join(out)


def readable(expr: str) -> str:
    """``expr`` as the generated manifests ship it: long literals split (:func:`split_literals`),
    then laid out (:func:`layout`)."""
    return layout(split_literals(expr))


def layout(expr: str, width: int = WIDTH, step: int = STEP) -> str:
    """``expr`` laid out over lines (on one line, whitespace runs made single spaces, when it
    fits in ``width`` columns). Only whitespace outside string literals changes."""
    return _Layout(width, step).parts(_parse(expr).parts, 0, 0)


_TOKEN = re.compile(r"\s*(?:([\w]+)|(&&|\|\||==|!=|<=|>=)|(\S))")


def tokens(expr: str) -> list[str]:
    """``expr``'s tokens: names and numbers, operators, brackets and whole string literals (the
    whitespace between them dropped)."""
    out: list[str] = []
    i = 0
    while i < len(expr):
        if expr[i] in "'\"":
            end = _string_end(expr, i)
            out.append(expr[i:end])
            i = end
            continue
        match = _TOKEN.match(expr, i)
        if match is None:  # only whitespace is left
            break
        token = match.group(1) or match.group(2) or match.group(3)
        if token in ("'", '"'):
            i = match.start(3)
            continue
        out.append(token)
        i = match.end()
    return out


def same_expression(a: str, b: str) -> bool:
    """Whether two expressions differ at most in the whitespace between their tokens (one laid
    out, the other not, or laid out differently)."""
    try:
        return tokens(a) == tokens(b)
    except ValueError:
        return a == b


# --- YAML ------------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """A safe dumper that writes multi-line strings as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.split("\n")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def yaml_dump(data: Any, **kwargs: Any) -> str:
    """``yaml.safe_dump`` with multi-line strings as literal blocks (``|-``)."""
    text: str = yaml.dump(data, Dumper=_Dumper, **kwargs)
    return text


def yaml_dump_all(docs: Iterable[Any], **kwargs: Any) -> str:
    """``yaml.safe_dump_all`` with multi-line strings as literal blocks (``|-``)."""
    text: str = yaml.dump_all(docs, Dumper=_Dumper, **kwargs)
    return text
