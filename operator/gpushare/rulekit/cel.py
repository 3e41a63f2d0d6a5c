"""CEL building blocks, generated from the workload-kinds table (:mod:`gpushare.rulekit.kinds`; pure).

The table says, per kind, where its pod-likes are and, relative to each, where the containers and
the pod's labels are. Paths use the table's syntax: dotted field names from the object root, where

* ``name[*]`` means every item of the list ``name`` (``spec.tasks[*].template.spec``), and
* ``*`` means every value of the map reached so far (``spec.pytorchReplicaSpecs.*.template.spec``).

:func:`kind_paths` turns one table entry into absolute container paths (with the word used in
messages) and label paths; :func:`parse_path` is the one translation of that syntax into CEL steps.
A path CEL cannot select (a key that is not a CEL identifier, ``*[*]``) makes the kind "unknown to
CEL": its webhook gets no matchConditions (it is sent whole) and the policy leaves it out.

From that the module writes what names no backend:

* walks over the paths (:func:`exists_at`, :func:`all_at`) and tests of a container's resource
  names (:func:`container_asks`, :func:`names_in`), from which ``gpushare.admission.cel`` writes
  the webhook's ``matchConditions`` with the backends' resources and pod labels;
* the ValidatingAdmissionPolicy's variables: the request's containers (:func:`containers_variable`,
  :func:`container_groups_variable`), over which a backend's GPU entries
  (``gpushare.backends.ack.admission.cel.gpu_entries``) and each stateless rule's CEL form are
  written; ``gpushare.admission.vap`` assembles them;
* the building blocks of the rules' CEL forms: :func:`number`, :func:`reason`, :func:`shown`,
  :func:`res_field`.

Every expression is safe on objects that lack any of the fields (``has()`` before each step) and
on requests without an object (``object != null``). Values are read the way
:func:`gpushare.rulekit.quantity.parse_amount` reads them, with Kubernetes' CEL quantity library.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpushare.rulekit.kinds import KindsError, WorkloadKind, container_label, pod_labels_path
from gpushare.rulekit.kinds import parse_path as parse_table_path
from gpushare.rulekit.quantity import (
    IS_BOOLEAN,
    IS_EMPTY,
    IS_NEGATIVE,
    MAX_SHOWN,
    MAX_TEXT,
    NOT_A_NUMBER,
    NOT_WHOLE,
    SUFFIX_REASON,
    type_reason,
)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CEL_RESERVED = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)


class PathError(ValueError):
    """A pod-spec or container path that the generator cannot turn into CEL."""


@dataclass(frozen=True)
class Step:
    """One step of a path: a field, every item of a list field, or every value of a map."""

    field: str | None  # None for "*" (map values)
    items: bool = False

    @property
    def text(self) -> str:
        if self.field is None:
            return "*"
        return f"{self.field}[*]" if self.items else self.field


@functools.lru_cache(maxsize=512)
def parse_path(path: str) -> tuple[Step, ...]:
    """A kinds-table path (``"spec.tasks[*].template.spec"``) -> CEL steps; :class:`PathError` when
    the path is malformed or names something CEL cannot select."""
    try:
        segments = parse_table_path(path)
    except KindsError as exc:
        raise PathError(str(exc)) from None
    steps: list[Step] = []
    for seg in segments:
        if seg == "[*]":
            last = steps[-1] if steps else None
            if last is None or last.field is None or last.items:
                raise PathError(f"{path!r}: '[*]' must follow a field name")
            steps[-1] = Step(last.field, True)
        elif seg == "*":
            if not steps:
                raise PathError(f"{path!r}: '*' needs a map before it")
            steps.append(Step(None))
        elif not _IDENT.match(seg) or seg in _CEL_RESERVED:
            raise PathError(f"{path!r}: {seg!r} is not a field name CEL can select")
        else:
            steps.append(Step(seg))
    return tuple(steps)


@dataclass(frozen=True)
class KindPaths:
    """Where one resource keeps its containers and its pods' labels (absolute table paths)."""

    group: str
    plural: str
    containers: tuple[tuple[str, str], ...] = ()  # (container path, label)
    labels: tuple[str, ...] = ()  # paths of pod label maps
    pod_specs: tuple[str, ...] = ()  # paths of the pod specs

    def all_containers(self) -> list[tuple[str, str]]:
        return list(self.containers)


def kind_paths(kind: WorkloadKind) -> KindPaths | None:
    """The CEL view of one table entry, or None when some path cannot be written in CEL."""
    containers = tuple(
        (f"{source.path}.{rel}", container_label(rel)) for source in kind.sources for rel in source.containers
    )
    labels = tuple(pod_labels_path(source.path, source.labels) for source in kind.sources)
    try:
        for path in (*(p for p, _ in containers), *labels):
            parse_path(path)
    except PathError:
        return None
    return KindPaths(kind.group, kind.plural, containers, labels, tuple(s.path for s in kind.sources))


# --- expression building blocks --------------------------------------------------------------------


def string_literal(text: str) -> str:
    """A CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_str = string_literal


class Vars:
    """Fresh comprehension variable names (nested macros must not shadow each other)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def _walk(base: str, steps: Sequence[Step], leaf: Callable[[str], str], quant: str, fresh: Vars) -> str:
    """``exists``/``all`` of ``leaf(x)`` over every node ``x`` the path reaches from ``base``.

    ``quant`` is ``exists`` (missing fields make it false) or ``all`` (missing fields make it true).
    """
    if not steps:
        return leaf(base)
    step, rest = steps[0], steps[1:]
    join, guard_fail = (" && ", "") if quant == "exists" else (" || ", "!")
    if step.field is None:
        key = fresh("k")
        inner = _walk(f"{base}[{key}]", rest, leaf, quant, fresh)
        return f"{base}.{quant}({key}, {inner})"
    node = f"{base}.{step.field}"
    guard = f"{guard_fail}has({node})"
    if step.items:
        var = fresh("x")
        inner = _walk(var, rest, leaf, quant, fresh)
        return f"({guard}{join}{node}.{quant}({var}, {inner}))"
    return f"({guard}{join}{_walk(node, rest, leaf, quant, fresh)})"


def exists_at(path: str, leaf: Callable[[str], str], base: str = "object", fresh: Vars | None = None) -> str:
    return _walk(base, parse_path(path), leaf, "exists", fresh or Vars())


def all_at(path: str, leaf: Callable[[str], str], base: str = "object") -> str:
    return _walk(base, parse_path(path), leaf, "all", Vars())


def any_key(container: str, where: str, test: Callable[[str], str], var: str = "r") -> str:
    """Some resource name of the container's ``where`` (requests, limits) passes ``test``."""
    return (
        f"(has({container}.resources) && has({container}.resources.{where})"
        f" && {container}.resources.{where}.exists({var}, {test(var)}))"
    )


def prefix_key(var: str, prefixes: Sequence[str]) -> str:
    """The resource name ``var`` starts with one of ``prefixes``."""
    tests = [f"{var}.startsWith({_str(p)})" for p in prefixes]
    return tests[0] if len(tests) == 1 else "(" + " || ".join(tests) + ")"


def container_asks(container: str, prefixes: Sequence[str]) -> str:
    """A name starting with one of ``prefixes`` in the container's requests or limits."""

    def test(var: str) -> str:
        return prefix_key(var, prefixes)

    return f"({any_key(container, 'requests', test)} || {any_key(container, 'limits', test)})"


def is_flat(path: str) -> bool:
    """A table path without wildcards (one place, which a message can name)."""
    return not any(s.field is None or s.items for s in parse_path(path))


def clipped(v: str) -> str:
    """A string value clipped as :func:`gpushare.rulekit.quantity.clip` clips it."""
    cut = f"{v}.substring(0, {MAX_SHOWN}) + '... (' + string(size({v})) + ' characters)'"
    return f"(size({v}) <= {MAX_SHOWN} ? {v} : {cut})"


def names_in(container: str, names: Sequence[str]) -> str:
    """Any of ``names`` in the container's requests or limits."""
    out = []
    for where in ("requests", "limits"):
        m = f"{container}.resources.{where}"
        found = " || ".join(f"{_str(n)} in {m}" for n in names)
        out.append(f"(has({container}.resources) && has({m}) && ({found}))")
    return f"({' || '.join(out)})"


# --- values, as the rules engine reads them (gpushare.rulekit.quantity.parse_amount) -----------
#
# The policy judges what the apiserver stores. A quantity is read with Kubernetes' own CEL quantity
# library (``isQuantity``, ``quantity``), so ``5e1``, ``0.05k`` and ``50000m`` are 50 as they are to
# the apiserver (which stores them as ``50`` in a built-in object); a binary suffix on a whole number of
# KiB (``2Gi``, the one spelling the apiserver keeps; ``1.5Ki`` is stored as ``1536``) is refused.


def _amount(q: str) -> str:
    """The whole part of quantity ``q`` as an int (``isInteger`` is false for ``5000m``, whose
    amount is the whole 5: Kubernetes' ``AsInt64`` does not reduce a negative scale)."""
    return f"({q}.isInteger() ? {q}.asInteger() : int({q}.asApproximateFloat()))"


def _whole(q: str) -> str:
    return f"({q}.isInteger() || quantity(string({_amount(q)})).compareTo({q}) == 0)"


def number(v: str) -> str:
    """The value ``v`` as a whole number >= 0 (:func:`parse_amount`'s ``value``), or -1 when the
    engine finds it malformed. ``v`` is a variable (it is read several times)."""
    q = f"quantity({v})"
    n = _amount(q)
    # The usual value first: a whole, non-negative number without a binary suffix ("2", "30",
    # "5e1") is its integer, with four reads of the quantity library instead of eight (the
    # library's parse is most of a value's cost); every other value takes the general branch.
    plain = f"{q}.isInteger() && {q}.asInteger() >= 0 && !{v}.endsWith('i')"
    return (
        f"(type({v}) == int ? ({v} >= 0 ? {v} : -1)"
        f" : (type({v}) == string && size({v}) <= {MAX_TEXT} && isQuantity({v})"
        f" ? ({plain} ? {q}.asInteger()"
        f" : (({q}.isLessThan(quantity('0')) || !{_whole(q)}"
        f" || ({v}.endsWith('i') && {n} >= 1024 && {n} % 1024 == 0)) ? -1 : {n}))"
        " : -1))"
    )


def entry_number(v: str) -> str:
    """:func:`number` for a GPU entry's value, read once per request: a string of up to 18 ASCII
    digits (what the apiserver stores for a whole number) is read with ``int()`` behind one
    anchored regex the apiserver compiles once, a twelfth of the allocations of the quantity
    library's reads; anything else takes :func:`number`."""
    return f"(type({v}) == string && {v}.matches('^[0-9]{{1,18}}$') ? int({v}) : {number(v)})"


def reason(v: str) -> str:
    """Why ``v`` is malformed, in the engine's words (:func:`parse_amount`'s ``error``)."""
    q = f"quantity({v})"
    return (
        f"(type({v}) == bool ? {_str(IS_BOOLEAN)}"
        f" : (type({v}) == double ? ({v} < 0.0 ? {_str(IS_NEGATIVE)} : {_str(NOT_WHOLE)})"
        f" : (type({v}) == int ? {_str(IS_NEGATIVE)}"
        f" : (type({v}) == null_type ? {_str(IS_EMPTY)}"
        f" : (type({v}) == map ? {_str(type_reason('dict'))}"
        f" : (type({v}) == list ? {_str(type_reason('list'))}"
        f" : (type({v}) != string || size({v}) > {MAX_TEXT} ? {_str(NOT_A_NUMBER)}"
        f" : (!isQuantity({v}) ? ({v}.startsWith('-') ? {_str(IS_NEGATIVE)} : {_str(NOT_A_NUMBER)})"
        f" : ({q}.isLessThan(quantity('0')) ? {_str(IS_NEGATIVE)}"
        f" : (!{_whole(q)} ? {_str(NOT_WHOLE)}"
        f" : {_str(SUFFIX_REASON.split('{', 1)[0])} + {v}.substring(size({v}) - 2)"
        f" + {_str(SUFFIX_REASON.split('}', 1)[1])}))))))))))"
    )


def shown(v: str) -> str:
    """The value as the rules engine prints it: ``33``, ``5e1``, ``'1.5'`` (quoted when malformed)."""
    return (
        f'(type({v}) == string ? ({number(v)} >= 0 ? {v} : "\'" + {v} + "\'")'
        f" : (type({v}) == int || type({v}) == double || type({v}) == bool ? string({v}) : 'a non-number'))"
    )


def res_field(where: str, resource: str) -> str:
    """The CEL string ``resources.<where>["<resource>"]`` (``where`` a CEL string)."""
    return f"'resources.' + {where} + '[\"{resource}\"]'"


def value_of(e: str, resource: str) -> str:
    """The effective value of ``resource`` in entry ``e`` (the limit when set, else the request)."""
    r = _str(resource)
    return f"({r} in {e}.l ? {e}.l[{r}] : ({r} in {e}.q ? {e}.q[{r}] : null))"


def mismatch(e: str, resource: str) -> str:
    """A request of ``resource`` in entry ``e`` without a limit, or one that differs from it (by
    number; else by the text, or the amount of two quantities)."""
    r = _str(resource)
    req, lim = f"{e}.q[{r}]", f"{e}.l[{r}]"
    a, b = number(req), number(lim)
    same_amount = (
        f"(type({req}) == string && type({lim}) == string && isQuantity({req}) && isQuantity({lim})"
        f" && quantity({req}).compareTo(quantity({lim})) == 0)"
    )
    differs = f"({a} >= 0 && {b} >= 0 ? {a} != {b} : !({req} == {lim} || {same_amount}))"
    return f"({r} in {e}.q && (!({r} in {e}.l) || ({req} != {lim} && {differs})))"


#: A VAP variable: the object named as the rules engine does (``Kind/namespace/name``).
OBJECT_NAME = (
    "object.kind + '/' + (has(object.metadata.namespace) && object.metadata.namespace != ''"
    " ? object.metadata.namespace + '/' : '')"
    " + (has(object.metadata.name) && object.metadata.name != '' ? object.metadata.name"
    " : (has(object.metadata.generateName) ? object.metadata.generateName : '<unnamed>'))"
)
RESOURCE = "request.resource.group + '/' + request.resource.resource"


def _nodes(base: str, steps: Sequence[Step]) -> list[str]:
    """The CEL node after each step (fields only)."""
    return [base + "." + ".".join(s.field or "" for s in steps[: i + 1]) for i in range(len(steps))]


def _default_name(path: str) -> str:
    """The container name the rules engine shows when the manifest has none (podspecs)."""
    last = parse_path(path)[-1]
    if last.items or last.field is None:
        return "?"
    return "main" if last.field in ("container", "script") else last.field


def entry(x: str, label: str, default: str = "?") -> str:
    def res(where: str) -> str:
        return f"(has({x}.resources) && has({x}.resources.{where}) ? {x}.resources.{where} : {{}})"

    # Map literals must be homogeneous for the apiserver's type checker: every value is dyn.
    name = f"(has({x}.name) ? {x}.name : {_str(default)})"
    return (
        f"{{'label': dyn({_str(label)}), 'name': dyn({name}), 'l': dyn({res('limits')}),"
        f" 'q': dyn({res('requests')})}}"
    )


def _flat(base: str, steps: Sequence[Step], label: str, default: str, var: str = "x") -> str | None:
    """A list of container entries at ``steps`` from ``base`` when at most the last step is a
    wildcard (a list); else None."""
    if any(s.field is None for s in steps) or any(s.items for s in steps[:-1]):
        return None
    if not steps:
        return f"[{entry(base, label, default)}]"
    nodes = _nodes(base, steps)
    guard = " && ".join(f"has({n})" for n in nodes)
    if steps[-1].items:
        return f"({guard} ? {nodes[-1]}.map({var}, {entry(var, label, default)}) : [])"
    return f"({guard} ? [{entry(nodes[-1], label, default)}] : [])"


def _grouped(base: str, steps: Sequence[Step], label: str, default: str) -> str | None:
    """A list of lists of container entries: the first wildcard maps over its items (or map values),
    the rest of the path is :func:`_flat`; None when the rest has another wildcard before its end."""
    first = next((i for i, s in enumerate(steps) if s.field is None or s.items), None)
    if first is None:
        return None
    if steps[first].field is None:  # "*": the values of the map the steps before reach
        prefix, rest = steps[:first], steps[first + 1 :]
        node = _nodes(base, prefix)[-1]
        inner = _flat(f"{node}[k]", rest, label, default)
        mapped = f"{node}.map(k, {inner})"
    else:
        prefix, rest = steps[: first + 1], steps[first + 1 :]
        node = _nodes(base, prefix)[-1]
        inner = _flat("g", rest, label, default)
        mapped = f"{node}.map(g, {inner})"
    if inner is None:
        return None
    guard = " && ".join(f"has({n})" for n in _nodes(base, prefix))
    return f"({guard} ? {mapped} : [])"


def locations(kinds: Sequence[KindPaths]) -> dict[str, tuple[str, list[str]]]:
    """container path -> (label, ["group/plural", ...]) over every kind."""
    out: dict[str, tuple[str, list[str]]] = {}
    for kind in kinds:
        for path, label in kind.all_containers():
            out.setdefault(path, (label, []))[1].append(f"{kind.group}/{kind.plural}")
    return out


def _variable(
    kinds: Sequence[KindPaths],
    build: Callable[[str, Sequence[Step], str, str], str | None],
    resource_var: str,
) -> str:
    """One list for the request's kind: a chain of ``resource == kind ? its lists : ...``, so that
    only the request's own paths are evaluated (kinds with the same paths share a branch)."""
    per: dict[str, list[str]] = {}
    for path, (label, resources) in locations(kinds).items():
        expr = build("object", parse_path(path), label, _default_name(path))
        if expr is None:
            continue
        for resource in resources:
            per.setdefault(resource, []).append(expr)
    shared: dict[tuple[str, ...], list[str]] = {}
    for resource, exprs in per.items():
        shared.setdefault(tuple(exprs), []).append(resource)
    if len(shared) == 1 and len(per) == len(kinds):
        # every kind has these same paths (a policy of one kind): no test of the request's resource
        return " + ".join(next(iter(shared)))
    text = "[]"
    for branch, names in reversed(list(shared.items())):
        known = ", ".join(_str(r) for r in names)
        test = f"{resource_var} == {known}" if len(names) == 1 else f"{resource_var} in [{known}]"
        text = f"({test} ? {' + '.join(branch)} : {text})"
    return text


def containers_variable(kinds: Sequence[KindPaths], resource_var: str = "variables.resource") -> str:
    """The ``containers`` variable: every container under a path with no wildcard before its last
    step, as one list of entries."""
    return _variable(kinds, _flat, resource_var)


def container_groups_variable(kinds: Sequence[KindPaths], resource_var: str = "variables.resource") -> str:
    """The ``containerGroups`` variable: the containers under paths with one more wildcard (a map of
    replica specs, a list of worker groups or of templates), as a list of lists of entries."""
    return _variable(
        kinds,
        lambda b, s, lab, d: None if _flat(b, s, lab, d) is not None else _grouped(b, s, lab, d),
        resource_var,
    )


def _covered(path: str) -> bool:
    """Whether a container path is in one of the two variables (else each rule walks it itself)."""
    steps = parse_path(path)
    return _flat("object", steps, "", "") is not None or _grouped("object", steps, "", "") is not None


def uncovered(kinds: Sequence[KindPaths]) -> dict[str, tuple[str, list[str]]]:
    """The container paths no variable covers (each rule walks them itself), as :func:`locations`."""
    return {path: where for path, where in locations(kinds).items() if not _covered(path)}


def is_resource(kinds: Sequence[KindPaths]) -> str:
    """Whether the request is for one of ``kinds`` (plain comparisons of its group and resource)."""
    by_group: dict[str, list[str]] = {}
    for k in kinds:
        by_group.setdefault(k.group, []).append(k.plural)
    tests = []
    for group, plurals in by_group.items():
        names = ", ".join(_str(p) for p in plurals)
        plural = (
            f"request.resource.resource == {names}"
            if len(plurals) == 1
            else f"request.resource.resource in [{names}]"
        )
        tests.append(f"request.resource.group == {_str(group)} && {plural}")
    return " || ".join(f"({t})" for t in tests) if len(tests) > 1 else tests[0]
