"""The CEL layout (gpushare.admission.celfmt): it changes only whitespace outside string literals.

Random expressions (names, numbers, string literals full of brackets, quotes, escapes and
separators, every operator the generator writes, calls, macros, lists, maps, conditionals) are
laid out at random widths; the result must be the same tokens, the same text once whitespace
outside literals is gone, the same literals in the same order, and a fixed point. The shipped
expressions are laid out by the builders; their lines are checked in test_admission_cel.py and
their meaning against the real apiserver in tests/integration/test_admission_policy.py."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpushare.admission.celfmt import (
    layout,
    readable,
    same_expression,
    split_literals,
    tokens,
    yaml_dump,
    yaml_dump_all,
)

#: A string literal as the generator (and the strategies below) write them.
_LITERAL = re.compile(
    r"""r'[^'\n]*'|r"[^"\n]*"|'''(?:\\.|[^\\])*?'''|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*\""""
)


def _split_outside(expr: str) -> list[str]:
    """``expr`` as characters, each string literal kept as one item."""
    out: list[str] = []
    i = 0
    while i < len(expr):
        match = (
            _LITERAL.match(expr, i) if expr[i] in "'\"r" and (i == 0 or not expr[i - 1].isalnum()) else None
        )
        if match is not None:
            out.append(match.group())
            i = match.end()
        else:
            out.append(expr[i])
            i += 1
    return out


def _outside(expr: str) -> tuple[str, list[str]]:
    """``expr`` without whitespace outside its string literals, and its literals in order (an
    independent reading of the literals: a regex, not celfmt's scanner)."""
    items = _split_outside(expr)
    literals = [item for item in items if len(item) > 1]
    return "".join(item for item in items if len(item) > 1 or not item.isspace()), literals


_chars = st.sampled_from([*"ab c,()[]{}?:&|+-=!.\\'\"é", "&&", "||", "//", "\n"])


@st.composite
def _string_literal(draw: st.DrawFn) -> str:
    body = "".join(draw(st.lists(_chars, max_size=12)))
    kind = draw(st.sampled_from(["single", "double", "raw", "triple"]))
    if kind == "single":
        return "'" + body.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    if kind == "double":
        return '"' + body.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if kind == "raw":
        return "r'" + body.replace("'", "").replace("\n", "") + "'"
    return "'''" + body.replace("'", "").replace("\\", "/").replace("\n", "") + "'''"


_names = st.sampled_from(["a", "e.cn", "variables.gpu", "object.spec.template", "x1", "r", "in_", "size"])
_atoms = st.one_of(
    _names,
    st.integers(-5, 10**6).map(str),
    st.sampled_from(["1.5e+3", "2e-1", "true", "null"]),
    _string_literal(),
)


def _compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    ops = ["&&", "||", "+", "==", "!=", ">=", "<", "in", "%", "-"]
    return st.one_of(
        st.tuples(inner, st.sampled_from(ops), inner).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : ({t[2]}))"),
        inner.map(lambda t: f"({t})"),
        inner.map(lambda t: f"!({t})"),
        st.tuples(_names, st.sampled_from(["all", "exists", "map", "filter"]), inner).map(
            lambda t: f"{t[0]}.{t[1]}(x, {t[2]})"
        ),
        st.tuples(_names, st.lists(inner, max_size=4)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.lists(inner, max_size=5).map(lambda items: "[" + ", ".join(items) + "]"),
        st.lists(st.tuples(_string_literal(), inner), max_size=4).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        ),
        st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(inner, inner, inner).map(lambda t: f"{{'k': {t[0]} ? {t[1]} : {t[2]}}}"),
    )


_expressions = st.recursive(_atoms, _compound, max_leaves=40)


@st.composite
def _spaced(draw: st.DrawFn) -> str:
    """An expression with some of its spaces turned into runs, line breaks or tabs."""
    expr = draw(_expressions)
    spaces = draw(st.sampled_from([" ", "  ", "\n", "\n    ", "\t"]))
    if not draw(st.booleans()):
        return expr
    return "".join(spaces if ch == " " and draw(st.booleans()) else ch for ch in _split_outside(expr))


@settings(max_examples=400, deadline=None)
@given(_spaced(), st.integers(8, 120), st.integers(1, 4))
def test_the_layout_changes_only_whitespace_outside_string_literals(expr: str, width: int, step: int) -> None:
    out = layout(expr, width, step)
    squeezed, literals = _outside(expr)
    out_squeezed, out_literals = _outside(out)
    assert out_squeezed == squeezed
    assert out_literals == literals
    assert tokens(out) == tokens(expr)
    assert same_expression(out, expr)
    assert all(line == line.rstrip() for line in out.split("\n")), out
    assert layout(out, width, step) == out  # a fixed point: laying out again changes nothing


@settings(max_examples=200, deadline=None)
@given(_expressions)
def test_an_expression_that_fits_stays_as_it_is(expr: str) -> None:
    assert layout(expr, len(expr)) == expr


def test_the_layout_breaks_at_the_loosest_separator_and_indents_brackets() -> None:
    expr = (
        "object != null && (has(object.spec) && object.spec.containers.exists(x1, "
        "has(x1.resources) && x1.resources.limits.exists(r, r.startsWith('aliyun.com/gpu'))))"
    )
    assert layout(expr, 60) == (
        "object != null\n"
        "&& (has(object.spec)\n"  # a bracketed chain of the same operator continues at its indent
        "&& object.spec.containers.exists(x1,\n"
        "  has(x1.resources)\n"
        "  && x1.resources.limits.exists(r,\n"
        "    r.startsWith('aliyun.com/gpu'))))"
    )
    chain = "(v == 'a' ? [1, 2] : (v == 'b' ? [3] : (v == 'c' ? [4, 5, 6] : [])))"
    assert (
        layout(chain, 20)
        == "(v == 'a'\n  ? [1, 2]\n  : (v == 'b'\n  ? [3]\n  : (v == 'c'\n  ? [4, 5, 6]\n  : [])))"
    )
    calls = "variables.containers.filter(e, e.name != 'x').map(e, {'label': e.label, 'name': e.name})"
    assert layout(calls, 50) == (
        "variables.containers.filter(e, e.name != 'x')\n  .map(e, {'label': e.label, 'name': e.name})"
    )


def test_string_literals_are_never_broken() -> None:
    text = "'" + "a && b, (c ? d : e) " * 10 + "'"
    out = layout(f"f({text}, {text}) + g", 30)
    assert out.count(text) == 2
    # a map's "k: v" and optional syntax (?'c', v.?e) are no conditionals
    assert layout("{'a': 1, 'b': x ? y : z, ?'c': w, 'd': v.?e}", 30) == (
        "{'a': 1, 'b': x ? y : z,\n  ?'c': w, 'd': v.?e}"
    )


@pytest.mark.parametrize("bad", ["(a", "a)", "'abc", "f(a]", "a // b"])
def test_malformed_expressions_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        layout(bad)


def test_yaml_writes_multi_line_strings_as_literal_blocks() -> None:
    doc = {"spec": {"expression": "a\n&& b", "message": "one line", "odd": "trailing \nspace"}}
    text = yaml_dump(doc, sort_keys=False)
    assert "expression: |-\n    a\n    && b\n" in text
    assert yaml.safe_load(text) == doc
    assert list(yaml.safe_load_all(yaml_dump_all([doc, doc]))) == [doc, doc]


@settings(max_examples=200, deadline=None)
@given(_expressions, st.integers(12, 90))
def test_split_literals_keeps_every_string_and_all_else(expr: str, size: int) -> None:
    """A long literal becomes ``('..' + '..')`` of the same text; nothing else changes."""
    out = split_literals(expr, size)
    _, literals = _outside(expr)
    _, out_literals = _outside(out)
    assert "".join(_body(lit) for lit in out_literals) == "".join(_body(lit) for lit in literals)
    assert _joined(_shape(out)) == _joined(_shape(expr))
    assert all(
        len(lit) <= size or " " not in lit.rstrip("'\" ")[1:] for lit in set(out_literals) - set(literals)
    )
    assert layout(readable(expr)) == readable(expr)


def _body(literal: str) -> str:
    """A literal's text between its quotes (a split never cuts an escape)."""
    literal = literal.removeprefix("r")
    quote = literal[:3] if literal.startswith(("'''", '"""')) else literal[0]
    return literal[len(quote) : -len(quote)]


def _shape(expr: str) -> str:
    """``expr`` without whitespace outside literals, each literal an ``L``."""
    squeezed, literals = _outside(expr)
    for literal in literals:
        squeezed = squeezed.replace(literal, "\0", 1)
    return squeezed.replace("\0", "L")


def _joined(shape: str) -> str:
    """A shape with each bracketed concatenation of literals one literal."""
    while (joined := re.sub(r"\(L(?:\+L)+\)", "L", shape)) != shape:
        shape = joined
    return shape
