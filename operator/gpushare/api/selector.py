"""Label-selector semantics, written once: matching, query rendering and the analysis admission needs.

A selector is a conjunction of :class:`Requirement` terms. A pool's ``nodeSelector`` (matchLabels
and matchExpressions), a device plugin's pod selector, a pod's ``nodeSelector`` and each of its
required node-affinity terms (``matchExpressions``, ``matchFields``) all become such terms, so that
one function decides what ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt`` and ``Lt`` mean.

Matching is done against what is known of a label: :data:`Possible` is the set of values it may
have, or None when it is absent. A real object's labels are the exact case (one value or absent);
admission's targeting analysis also asks about partially known nodes (a pool's future node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: The operators of a node selector term; label selectors use the first four.
OPERATORS: tuple[str, ...] = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
#: The field a ``matchFields`` term may test (the node's name).
NAME_FIELD = "metadata.name"

#: What is known of one label: the values it may have, or None when it is absent.
Possible = frozenset[str] | None
#: A partial picture of an object's labels. Keys not present are unknown (any value or absence is
#: possible) unless a match is asked to be ``exact``.
Candidate = Mapping[str, Possible]


def _is_int(text: str) -> bool:
    digits = text.removeprefix("-")
    return digits.isascii() and digits.isdigit()


@dataclass(frozen=True)
class Requirement:
    """One term: a label key (or, for ``matchFields``, ``metadata.name``), an operator and values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    #: True for ``matchFields`` (``metadata.name``), which selects node names rather than labels.
    is_field: bool = False

    def accepts(self, value: str | None) -> bool:
        """Does a label with this value (None: absent) satisfy the term? The one definition of the
        operators; everything else here is built on it."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt"):
            if value is None or len(self.values) != 1 or not _is_int(self.values[0]) or not _is_int(value):
                return False
            return int(value) > int(self.values[0]) if op == "Gt" else int(value) < int(self.values[0])
        return False  # unknown operators are rejected by the apiserver; they match nothing

    def possible(self, known: Possible) -> bool:
        """Can a label whose value is one of ``known`` (None: absent) satisfy this term?"""
        if known is None:
            return self.accepts(None)
        return any(self.accepts(value) for value in known)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Does an object with exactly these labels satisfy this term?"""
        return self.accepts(labels.get(self.key))

    def render(self) -> str:
        """The term in the ``labelSelector=`` query syntax (``Gt``/``Lt`` spelled out)."""
        if self.operator == "In" and len(self.values) == 1:
            return f"{self.key}={self.values[0]}"
        if self.operator in ("In", "NotIn"):
            return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        return f"{self.key} {self.operator} {','.join(self.values)}"


#: A conjunction of requirements: a label selector, or one node-affinity term with its nodeSelector.
Term = tuple[Requirement, ...]


def equal(labels: Mapping[str, str]) -> list[Requirement]:
    """``matchLabels`` (or a pod's ``nodeSelector``) as requirements: each key In its one value."""
    return [Requirement(str(k), "In", (str(v),)) for k, v in labels.items()]


def matches(term: Iterable[Requirement], labels: Mapping[str, str] | None) -> bool:
    """Do these exact labels satisfy every requirement? An empty term matches everything."""
    labels = labels or {}
    for req in term:  # noqa: SIM110 - a loop, not all(<generator>): the planner asks nodes x pools times
        if not req.accepts(labels.get(req.key)):
            return False
    return True


def render(term: Iterable[Requirement]) -> str:
    """The term in the ``labelSelector=`` query syntax of the Kubernetes API."""
    return ",".join(req.render() for req in term)


def keys(term: Iterable[Requirement]) -> set[str]:
    """The label keys the term tests."""
    return {req.key for req in term if not req.is_field}


def term_possible(term: Term, labels: Candidate, *, exact: bool = False, name: str | None = None) -> bool:
    """Can an object with these (possibly partial) labels, named ``name``, satisfy every requirement?"""
    for req in term:
        if req.is_field:
            if req.key != NAME_FIELD or name is None:
                continue
            if not req.possible(frozenset((name,))):
                return False
            continue
        if req.key in labels:
            known = labels[req.key]
        elif exact:
            known = None
        else:
            continue
        if not req.possible(known):
            return False
    return True


def candidate(term: Iterable[Requirement]) -> dict[str, Possible]:
    """What every object the term selects is known to carry: ``In`` narrows a label's values
    (intersecting repeated keys), ``DoesNotExist`` makes it absent; other terms leave it unknown."""
    out: dict[str, Possible] = {}
    for req in term:
        if req.is_field:
            continue
        if req.operator == "In":
            prior = out.get(req.key)
            vals = frozenset(req.values)
            out[req.key] = vals if prior is None else prior & vals
        elif req.operator == "DoesNotExist":
            out[req.key] = None
    return out


def allowed(term: Term, key: str, options: Iterable[str | None]) -> list[str | None]:
    """The options (a value, or None for absent) that satisfy every requirement of ``term`` on ``key``."""
    reqs = tuple(r for r in term if r.key == key and not r.is_field)
    out = []
    for opt in options:
        known = None if opt is None else frozenset((opt,))
        if all(r.possible(known) for r in reqs):
            out.append(opt)
    return out


def pinned(term: Term, key: str) -> set[str] | None:
    """The values ``term`` allows for ``key`` when it requires one of them (In), else None."""
    out: set[str] | None = None
    for r in term:
        if r.key == key and not r.is_field and r.operator == "In":
            out = set(r.values) if out is None else out & set(r.values)
    return out


def constrains(term: Term, key: str) -> bool:
    return any(r.key == key and not r.is_field for r in term)


def implies(term: Term, selector: Sequence[Requirement]) -> bool:
    """Does every object satisfying ``term`` satisfy ``selector`` too (judged conservatively: only
    values ``term`` pins with ``In`` count)?"""
    for req in selector:
        fixed = pinned(term, req.key)
        if req.operator == "In" and (fixed is None or not fixed <= set(req.values)):
            return False
        if req.operator == "NotIn" and (fixed is None or fixed & set(req.values)):
            return False
        if req.operator == "Exists" and fixed is None:
            return False
        if req.operator in ("DoesNotExist", "Gt", "Lt"):
            return False
    return True
