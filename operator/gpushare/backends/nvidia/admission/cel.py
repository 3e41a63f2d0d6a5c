"""NVIDIA's containers in CEL: what the ValidatingAdmissionPolicy reads of each, once per request.

:func:`nvidia_entries` turns the request's container entries (``gpushare.rulekit.cel``'s
variables) into the containers asking for an ``nvidia.com/*`` resource, with the names whose
quantities Kubernetes refuses sorted by case (``NVIDIA_QUANTITY``; in Python,
:func:`gpushare.backends.nvidia.admission.rules.kubernetes_quantity`). Quantities are read with
Kubernetes' CEL quantity library, as the apiserver reads them.
"""

from __future__ import annotations

from gpushare import constants as c
from gpushare.rulekit.cel import clipped, string_literal
from gpushare.rulekit.quantity import MAX_TEXT

#: NVIDIA's resources are extended resources: the prefix of their names.
PREFIX = c.RES_NVIDIA_PREFIX
#: What a container asks for that aims its pod at an NVIDIA pool only when the pod's own fields
#: constrain its nodes (whole GPUs also run on any GPU node): ``nvidia.com/gpu`` by name, and MIG
#: devices (``nvidia.com/mig-<profile>``, the device plugin's mixed strategy) by prefix. The
#: webhook's matchConditions (``gpushare.admission.cel``) and its fast gate
#: (``gpushare.admission.podspecs``) read them here, as the rules do (:func:`.rules.aimed`).
AIMED_NAMES: tuple[str, ...] = (c.RES_NVIDIA_GPU,)
AIMED_PREFIXES: tuple[str, ...] = (c.RES_NVIDIA_MIG_PREFIX,)
_NV = f"r.startsWith({string_literal(PREFIX)})"


def _text(v: str) -> str:
    """``v`` as the text of a Kubernetes quantity (a string in the quantity grammar, surrounding
    whitespace ignored, or a JSON number, which a custom resource without a schema keeps), else
    ``''`` (no quantity is empty; CEL's type checker wants both branches of a choice of one type)."""
    return (
        f"(type({v}) == string ? (size({v}) <= {MAX_TEXT} && isQuantity({v}.trim()) ? {v}.trim() : '')"
        f" : (type({v}) == int || type({v}) == double) && isQuantity(string({v})) ? string({v}) : '')"
    )


def case_of(s: str) -> str:
    """The ``NVIDIA_QUANTITY`` case of a quantity's text ``s`` (:func:`_text`): ``malformed``,
    ``negative``, ``not-integer`` (Kubernetes' ``MilliValue() % 1000 == 0``: the whole part
    compared with the quantity, as :func:`gpushare.rulekit.cel.number` does), or ``''``."""
    q = f"quantity({s})"
    whole = f"({q}.isInteger() || quantity(string(int({q}.asApproximateFloat()))).compareTo({q}) == 0)"
    return (
        f"({s} == '' ? 'malformed' : {q}.isLessThan(quantity('0')) ? 'negative'"
        f" : !{whole} ? 'not-integer' : '')"
    )


def shown(v: str) -> str:
    """The value as the rules engine prints it (:func:`gpushare.rulekit.quantity.shown_value`):
    digits bare, other text quoted, JSON values as Python writes them; clipped."""
    quoted = f"({v}.matches('^[0-9]+$') ? {v} : \"'\" + {v} + \"'\")"
    return (
        f"(type({v}) == string ? {clipped(quoted)} : type({v}) == bool ? ({v} ? 'True' : 'False')"
        f" : type({v}) == map || type({v}) == list"
        f" ? '<' + (type({v}) == map ? 'dict' : 'list') + ' of ' + string(size({v})) + ' item(s)>'"
        f" : type({v}) == null_type ? 'None' : string({v}))"
    )


def nvidia_entries(entries: str) -> str:
    """The containers of a list of container entries that ask for an ``nvidia.com/*`` resource,
    each with ``label``, ``name``, ``l``/``q`` (limits, requests) and what breaks
    ``NVIDIA_QUANTITY``: ``b`` the ``[where, name, case]`` of each refused quantity (limits first),
    ``nl`` the requests without a limit, ``nd`` the requests of another amount than their limit
    (compared when both are quantities, as the apiserver compares them).

    Two steps, so that each value is read once: its quantity text (``tl``/``tq``: ``[name, text]``),
    then its case."""
    asks = f"(e.l.exists(r, {_NV}) || e.q.exists(r, {_NV}))"
    texts = (
        "{'label': e.label, 'name': e.name, 'l': e.l, 'q': e.q,"
        f" 'tl': dyn(e.l.filter(r, {_NV}).map(r, [dyn(r), dyn({_text('e.l[r]')})])),"
        f" 'tq': dyn(e.q.filter(r, {_NV}).map(r, [dyn(r), dyn({_text('e.q[r]')})]))}}"
    )

    def bad(t: str, where: str) -> str:
        row = f"[dyn({string_literal(where)}), x[0], dyn({case_of('x[1]')})]"
        return f"e.{t}.map(x, {row}).filter(x, x[2] != '')"

    differs = (
        "e.tl.exists(y, y[0] == x[0] && x[1] != '' && y[1] != ''"
        " && quantity(x[1]).compareTo(quantity(y[1])) != 0)"
    )
    cases = (
        "{'label': e.label, 'name': e.name, 'l': e.l, 'q': e.q,"
        f" 'b': dyn({bad('tl', 'limits')} + {bad('tq', 'requests')}),"
        f" 'nl': dyn(e.q.filter(r, {_NV} && !(r in e.l))),"
        f" 'nd': dyn(e.tq.filter(x, {differs}).map(x, x[0]))}}"
    )
    return f"{entries}.filter(e, {asks}).map(e, {texts}).map(e, {cases})"
