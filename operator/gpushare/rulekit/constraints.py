"""A pod's node constraints: its ``nodeName``, ``nodeSelector`` and required node affinity (pure).

The ``requiredDuringScheduling...`` terms of a node affinity are ORed, the expressions inside a
term ANDed, and the nodeSelector (and nodeName) is ANDed into every term. Which pools and nodes the
constraints reach is a backend's reading (``gpushare.backends.ack.admission.targeting``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpushare import constants as c
from gpushare.api.selector import NAME_FIELD, Requirement, Term, term_possible


@dataclass(frozen=True)
class Constraints:
    """A pod's node constraints. ``terms`` is empty when the affinity terms can match no node."""

    present: bool
    terms: tuple[Term, ...]
    field: str  # where they are written, for messages
    #: The nodeSelector as written, when there is no required node affinity.
    selector: Mapping[str, str] | None = None

    def render(self) -> str:
        if self.selector is not None:
            return json.dumps(dict(self.selector), separators=(", ", ": "), sort_keys=True)
        if not self.terms:
            return "<matches no node>"
        return " OR ".join("(" + ", ".join(r.render() for r in t) + ")" for t in self.terms)


def _label_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _requirements(items: Any, is_field: bool) -> list[Requirement] | None:
    """Parse matchExpressions/matchFields; None when malformed."""
    if items is None:
        return []
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            return None
        key, op, values = item.get("key"), item.get("operator"), item.get("values") or []
        if not isinstance(key, str) or not isinstance(op, str) or not isinstance(values, list):
            return None
        out.append(Requirement(key, op, tuple(_label_value(v) for v in values), is_field))
    return out


def node_constraints(spec_path: str, spec: Mapping[str, Any]) -> Constraints:
    """The node constraints of a pod spec (nodeName AND nodeSelector AND (term OR term ...)).

    ``spec.nodeName`` (a pod bound by hand, bypassing the scheduler) counts as naming that node.
    """
    selector = spec.get("nodeSelector")
    base: list[Requirement] = []
    if isinstance(selector, Mapping):
        # In key order, as the apiserver stores a map: check and the webhook name them alike.
        base = [Requirement(str(k), "In", (_label_value(selector[k]),)) for k in sorted(selector, key=str)]
    node_name = spec.get("nodeName")
    if isinstance(node_name, str) and node_name:
        base.append(Requirement(NAME_FIELD, "In", (node_name,), is_field=True))
    affinity = spec.get("affinity")
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_aff, Mapping)
        else None
    )
    raw_terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    where = f"{spec_path}.nodeSelector"
    if isinstance(raw_terms, list) and raw_terms:
        where = f"{spec_path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        if base:
            where = f"{spec_path}.nodeSelector+affinity"
        terms: list[Term] = []
        for raw in raw_terms:
            if not isinstance(raw, Mapping):
                continue
            exprs = _requirements(raw.get("matchExpressions"), False)
            fields = _requirements(raw.get("matchFields"), True)
            if exprs is None or fields is None or not (exprs or fields):
                continue  # a null/empty/malformed term matches no node
            terms.append((*base, *exprs, *fields))
        return Constraints(True, tuple(terms), where)
    shown = {r.key: r.values[0] for r in base if not r.is_field}
    if any(r.is_field for r in base):
        where = f"{spec_path}.nodeName" if not shown else f"{spec_path}.nodeName+nodeSelector"
        return Constraints(True, (tuple(base),), where)
    return Constraints(bool(base), (tuple(base),), where, shown)


# --- matching -------------------------------------------------------------------------------------

#: Labels that name one node; with nodes known, a term pinning them is resolved by those nodes alone.
IDENTITY_LABELS: tuple[str, ...] = (c.LABEL_HOSTNAME,)


def names_nodes(term: Term) -> bool:
    """Does the term pin node names (hostname label In, or matchFields metadata.name In)?"""
    return any(
        r.operator == "In" and (r.key in IDENTITY_LABELS or (r.is_field and r.key == NAME_FIELD))
        for r in term
    )


def identity_only(term: Term) -> bool:
    return all(r.is_field or r.key in IDENTITY_LABELS for r in term)


def exact(labels: Mapping[str, str]) -> dict[str, frozenset[str] | None]:
    return {k: frozenset((v,)) for k, v in labels.items()}


def reaches_node(constraints: Constraints, labels: Mapping[str, str], name: str) -> bool:
    """Whether a pod with these constraints can land on the node with these labels."""
    if not constraints.present:
        return True
    return any(term_possible(term, exact(labels), exact=True, name=name) for term in constraints.terms)
