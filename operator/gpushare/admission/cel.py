"""CEL generated from the workload-kinds table (:mod:`gpushare.admission.kinds`; pure, no client).

The table says, per kind, where its pod-likes are and, relative to each, where the containers and
the pod's labels are. Paths use the table's syntax: dotted field names from the object root, where

* ``name[*]`` means every item of the list ``name`` (``spec.tasks[*].template.spec``), and
* ``*`` means every value of the map reached so far (``spec.pytorchReplicaSpecs.*.template.spec``).

:func:`kind_paths` turns one table entry into absolute container paths (with the word used in
messages) and label paths; :func:`parse_path` is the one translation of that syntax into CEL steps.
A path CEL cannot select (a key that is not a CEL identifier, ``*[*]``) makes the kind "unknown to
CEL": its webhook gets no matchConditions (it is sent whole) and the policy leaves it out.

From that the module writes:

* :func:`gpu_sharing_condition`: the ``matchConditions`` expression of the webhook (is GPU sharing
  asked for anywhere in the object?), so objects without it never reach the webhook;
* :func:`rule_validation`: one ValidatingAdmissionPolicy validation per stateless rule, with a
  ``messageExpression`` that names the rule id and the fix like the Python rules engine.

Every expression is safe on objects that lack any of the fields (``has()`` before each step) and
on requests without an object (``object != null``). Values are compared the way
:func:`gpushare.admission.quantity.parse_amount` reads them: an int, or a string of digits.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpushare import constants as c
from gpushare.admission.kinds import KindsError, WorkloadKind, container_label, pod_labels_path
from gpushare.admission.kinds import parse_path as parse_table_path

#: ACK's multi-GPU sharing pod label (it has the name of the node resource it refers to).
POD_LABEL_GPU_COUNT = c.RES_GPU_COUNT

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
    return KindPaths(kind.group, kind.plural, containers, labels)


# --- expression building blocks --------------------------------------------------------------------


def _str(text: str) -> str:
    """A CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _Vars:
    """Fresh comprehension variable names (nested macros must not shadow each other)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def _walk(base: str, steps: Sequence[Step], leaf: Callable[[str], str], quant: str, fresh: _Vars) -> str:
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


def exists_at(path: str, leaf: Callable[[str], str], base: str = "object") -> str:
    return _walk(base, parse_path(path), leaf, "exists", _Vars())


def all_at(path: str, leaf: Callable[[str], str], base: str = "object") -> str:
    return _walk(base, parse_path(path), leaf, "all", _Vars())


def _any_key(container: str, where: str, test: Callable[[str], str], var: str = "r") -> str:
    return (
        f"(has({container}.resources) && has({container}.resources.{where})"
        f" && {container}.resources.{where}.exists({var}, {test(var)}))"
    )


def _gpu_key(var: str) -> str:
    return f"{var}.startsWith({_str(c.GPU_RESOURCE_PREFIX)})"


def container_asks_gpu(container: str) -> str:
    """Any ``aliyun.com/gpu*`` name in the container's requests or limits."""
    return f"({_any_key(container, 'requests', _gpu_key)} || {_any_key(container, 'limits', _gpu_key)})"


def gpu_sharing_condition(kind: KindPaths) -> str:
    """The webhook's matchCondition: does the object ask for GPU sharing anywhere (a container's
    ``aliyun.com/gpu*`` resource, or ACK's ``aliyun.com/gpu-count`` pod label)?"""
    parts = [exists_at(path, container_asks_gpu) for path, _ in kind.all_containers()]
    parts.extend(exists_at(path, lambda m: f"{_str(POD_LABEL_GPU_COUNT)} in {m}") for path in kind.labels)
    if not parts:
        return "object != null"  # nothing known to look at: match everything
    return "object != null && (" + " || ".join(parts) + ")"


# --- the stateless rules as ValidatingAdmissionPolicy validations ----------------------------------
#
# The policy has a variable ``containers``: one entry per container of the object, found through
# the same paths, as ``{'label', 'name', 'l' (limits), 'q' (requests)}`` (missing maps are {}).
# Each rule is a predicate over one entry; values are read as parse_amount reads them and bound
# once with the one-element-list idiom (``[value].all(v, ...)``), which every CEL version has.

CORE = c.RES_GPU_CORE
MEM = c.RES_GPU_MEM


def _bind(name: str, value: str, body: str, *, text: bool = False) -> str:
    return f"[{value}].map({name}, {body})[0]" if text else f"[{value}].all({name}, {body})"


def number(v: str) -> str:
    """-2 absent (null), -1 malformed, else the whole number (capped above at 1000000)."""
    return (
        f"({v} == null ? -2 : (type({v}) == int ? ({v} >= 0 ? {v} : -1)"
        f" : (type({v}) == string && {v}.matches('^[0-9]{{1,18}}$') ? int({v})"
        f" : (type({v}) == string && {v}.matches('^[0-9]+$') ? 1000000 : -1))))"
    )


def _value(e: str, resource: str) -> str:
    """The effective value (limit when set, else request; rules.py ``_pick``), or null."""
    r = _str(resource)
    return f"({r} in {e}.l ? {e}.l[{r}] : ({r} in {e}.q ? {e}.q[{r}] : null))"


def _where(e: str, resource: str) -> str:
    return f"({_str(resource)} in {e}.l ? 'limits' : 'requests')"


def with_values(e: str, body: str, *, text: bool = False) -> str:
    """Bind cv/mv (core and memory values) and cn/mn (their numbers) around ``body``."""
    inner = _bind("mn", number("mv"), body, text=text)
    inner = _bind("cn", number("cv"), inner, text=text)
    inner = _bind("mv", _value(e, MEM), inner, text=text)
    return _bind("cv", _value(e, CORE), inner, text=text)


def shown(v: str, n: str) -> str:
    """The value as the rules engine prints it: ``33``, ``'1.5'``."""
    return (
        f'(type({v}) == string ? ({n} >= 0 ? {v} : "\'" + {v} + "\'")'
        f" : (type({v}) == int || type({v}) == double || type({v}) == bool ? string({v}) : 'a non-number'))"
    )


def _tag(rule_id: str) -> str:
    return f"(rule {rule_id})"


@dataclass(frozen=True)
class CelRule:
    """One stateless rule over one container entry ``e`` (with cv, mv, cn, mn bound)."""

    rule_id: str
    bad: Callable[[str], str]  # e -> CEL bool
    detail: Callable[[str], str]  # e -> CEL string: ``field=value problem (rule id); fix``
    #: The same without the container's values (for containers under wildcard paths).
    summary: str
    #: Whether ``bad``/``detail`` read cv, mv, cn, mn (see :func:`with_values`).
    values: bool = True

    def bind(self, e: str, body: str, *, text: bool = False) -> str:
        return with_values(e, body, text=text) if self.values else body


def _gs001_detail(e: str) -> str:
    tag = _tag("GS001-core-percentage-step")
    return (
        f"'resources.' + {_where(e, CORE)} + '[\"{CORE}\"]=' + {shown('cv', 'cn')} + (cn >= 0"
        f" ? ' is not a multiple of 5 {tag}; use ' + string(cn - cn % 5) + ' or ' + string(cn - cn % 5 + 5)"
        f" : ' is not a whole number; the GPU compute share is a whole multiple of 5 from 5 to 100 {tag};"
        " write a number such as 30')"
    )


def _gs002_detail(e: str) -> str:
    tag = _tag("GS002-core-percentage-range")
    return (
        f"'resources.' + {_where(e, CORE)} + '[\"{CORE}\"]=' + {shown('cv', 'cn')}"
        f" + ' is outside 5..100 (percent of one GPU) {tag}; '"
        " + (cn < 5 ? 'use 5 for the smallest share' : 'use at most 100 (one whole GPU)')"
    )


def _gs003_detail(e: str) -> str:
    tag = _tag("GS003-core-without-mem")
    return (
        f'\'resources.limits["{MEM}"] is missing but the container asks for "{CORE}"=\' + {shown("cv", "cn")}'
        f" + ' {tag}; add \"{MEM}\" (GiB of GPU memory) to the same container'"
    )


def _gs004_detail(e: str) -> str:
    tag = _tag("GS004-mem-positive-integer")
    return (
        f"'resources.' + {_where(e, MEM)} + '[\"{MEM}\"]=' + {shown('mv', 'mn')} + (mn == 0"
        f" ? ' is zero; GPU memory is a positive whole number of GiB {tag};"
        f' ask for at least 1, or remove "{MEM}"\''
        f" : ' is not a whole number; GPU memory is a positive whole number of GiB {tag};"
        " write a whole number of GiB such as 2')"
    )


def _mismatch(e: str, resource: str) -> str:
    r = _str(resource)
    req, lim = f"{e}.q[{r}]", f"{e}.l[{r}]"
    same = _bind("a", number(req), _bind("b", number(lim), f"(a >= 0 && b >= 0 ? a == b : {req} == {lim})"))
    return f"({r} in {e}.q && (!({r} in {e}.l) || !{same}))"


def _gs006_detail(e: str) -> str:
    tag = _tag("GS006-request-limit-mismatch")

    def one(resource: str) -> str:
        r = _str(resource)
        req, lim = f"{e}.q[{r}]", f"{e}.l[{r}]"
        return (
            f"'resources.requests[\"{resource}\"]=' + {shown(req, number(req))} + ({r} in {e}.l"
            f" ? ' differs from the limit ' + {shown(lim, number(lim))}"
            f" + ' {tag}; set requests equal to limits,"
            " or drop requests'"
            f" : ' is set without a limit; extended resources are allocated by their limit {tag};"
            f' set resources.limits["{resource}"] to the same value\')'
        )

    return f"({_mismatch(e, MEM)} ? {one(MEM)} : {one(CORE)})"


def _unknown_name(var: str) -> str:
    known = ", ".join(_str(n) for n in c.KNOWN_GPU_RESOURCES)
    return f"({_gpu_key(var)} && !({var} in [{known}]))"


#: GS012's problem and fix as the rules engine writes them (rules.py ``_check_names``), less the
#: did-you-mean (difflib has no CEL counterpart).
GS012_TEXT = (
    "is not a resource any GPU-sharing node offers; the pod would stay Pending"
    f" {_tag('GS012-unknown-gpu-resource')}; the device plugin offers {c.RES_GPU_MEM} and {c.RES_GPU_CORE}"
)


def _gs012_detail(e: str) -> str:
    def name(m: str, where: str) -> str:
        value = f"{e}.{m}[u]"
        return (
            f"[{e}.{m}.filter(r, {_unknown_name('r')})[0]].map(u, 'resources.{where}[\"' + u + '\"]='"
            f" + {shown(value, number(value))} + {_str(' ' + GS012_TEXT)})[0]"
        )

    return f"({e}.l.exists(r, {_unknown_name('r')}) ? {name('l', 'limits')} : {name('q', 'requests')})"


STATELESS_RULES: tuple[CelRule, ...] = (
    CelRule(
        "GS012-unknown-gpu-resource",
        lambda e: f"({e}.l.exists(r, {_unknown_name('r')}) || {e}.q.exists(r, {_unknown_name('r')}))",
        _gs012_detail,
        f"asks for an aliyun.com/gpu* resource no node offers {_tag('GS012-unknown-gpu-resource')};"
        f" the device plugin offers {c.RES_GPU_MEM} and {c.RES_GPU_CORE}",
        values=False,
    ),
    CelRule(
        "GS006-request-limit-mismatch",
        lambda e: f"({_mismatch(e, MEM)} || {_mismatch(e, CORE)})",
        _gs006_detail,
        f"requests a GPU-sharing resource that differs from (or lacks) its limit"
        f" {_tag('GS006-request-limit-mismatch')}; set requests equal to limits, or drop requests",
        values=False,
    ),
    CelRule(
        "GS004-mem-positive-integer",
        lambda e: "(mn == -1 || mn == 0)",
        _gs004_detail,
        f'"{MEM}" is not a positive whole number of GiB {_tag("GS004-mem-positive-integer")};'
        " write a whole number of GiB such as 2",
    ),
    CelRule(
        "GS001-core-percentage-step",
        lambda e: "(cn == -1 || (cn >= 5 && cn <= 100 && cn % 5 != 0))",
        _gs001_detail,
        f'"{CORE}" is not a whole multiple of 5 {_tag("GS001-core-percentage-step")};'
        " use the nearest multiple of 5",
    ),
    CelRule(
        "GS002-core-percentage-range",
        lambda e: "(cn >= 0 && (cn < 5 || cn > 100))",
        _gs002_detail,
        f'"{CORE}" is outside 5..100 {_tag("GS002-core-percentage-range")}; ask for 5..100',
    ),
    CelRule(
        "GS003-core-without-mem",
        lambda e: "(cn != -2 && mn == -2)",
        _gs003_detail,
        f'asks for "{CORE}" without "{MEM}" {_tag("GS003-core-without-mem")};'
        f' add "{MEM}" (GiB of GPU memory) to the same container',
    ),
)

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


def _entry(x: str, label: str, default: str = "?") -> str:
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
        return f"[{_entry(base, label, default)}]"
    nodes = _nodes(base, steps)
    guard = " && ".join(f"has({n})" for n in nodes)
    if steps[-1].items:
        return f"({guard} ? {nodes[-1]}.map({var}, {_entry(var, label, default)}) : [])"
    return f"({guard} ? [{_entry(nodes[-1], label, default)}] : [])"


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


def _locations(kinds: Sequence[KindPaths]) -> dict[str, tuple[str, list[str]]]:
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
    parts = []
    for path, (label, resources) in _locations(kinds).items():
        expr = build("object", parse_path(path), label, _default_name(path))
        if expr is None:
            continue
        known = ", ".join(_str(r) for r in resources)
        parts.append(f"({resource_var} in [{known}] ? {expr} : [])")
    return " + ".join(parts) if parts else "[]"


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


def _entry_ok(rule: CelRule, label: str, x: str) -> str:
    """The rule holds for the container at ``x`` (its entry bound once as ``e``: the rule reads ``e``
    many times, and an inlined entry would multiply the expression's size)."""
    return f"[{_entry(x, label)}].all(e, {rule.bind('e', '!' + rule.bad('e'))})"


def rule_validation(
    rule: CelRule,
    kinds: Sequence[KindPaths],
    *,
    containers_var: str = "variables.containers",
    groups_var: str = "variables.containerGroups",
    name_var: str = "variables.objectName",
    resource_var: str = "variables.resource",
) -> dict[str, str]:
    """The VAP validation of one rule: expression, messageExpression, message, reason."""
    ok = rule.bind("e", "!" + rule.bad("e"))
    bad = rule.bind("e", rule.bad("e"))
    shown_entry = (
        f".map(e, e.label + ' \"' + e.name + '\": ' + {rule.bind('e', rule.detail('e'), text=True)})[0]"
    )
    checks = [f"{containers_var}.all(e, {ok})", f"{groups_var}.all(g, g.all(e, {ok}))"]
    fallback = _str(f"a container {rule.summary}")
    for path, (label, resources) in _locations(kinds).items():
        if _covered(path):
            continue
        known = ", ".join(_str(r) for r in resources)
        walked = all_at(path, functools.partial(_entry_ok, rule, label))
        checks.append(f"(!({resource_var} in [{known}]) || {walked})")
    message = (
        f"{name_var} + ': ' + ({containers_var}.exists(e, {bad})"
        f" ? {containers_var}.filter(e, {bad}){shown_entry}"
        f" : ({groups_var}.exists(g, g.exists(e, {bad}))"
        f" ? {groups_var}.filter(g, g.exists(e, {bad}))[0].filter(e, {bad}){shown_entry}"
        f" : {fallback}))"
    )
    return {
        "expression": " && ".join(checks),
        "messageExpression": message,
        "message": f"{rule.summary}",
        "reason": "Invalid",
    }


def gpu_sharing_anywhere(kinds: Sequence[KindPaths], resource: str = RESOURCE) -> str:
    """matchCondition for a policy over several kinds: the GPU-sharing condition of the request's kind."""
    parts = [
        f"({resource} == {_str(k.group + '/' + k.plural)} && "
        f"{gpu_sharing_condition(k).removeprefix('object != null && ')})"
        for k in kinds
    ]
    return "object != null && (" + " || ".join(parts) + ")"
