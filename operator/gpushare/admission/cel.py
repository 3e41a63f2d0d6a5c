"""CEL generated from one description of where pod specs live per kind (pure; no client).

The description is a list of **paths** per kind (``gpushare.admission.podspecs.POD_SPEC_PATHS``):
dotted field names from the object root, where

* ``name[]`` means every item of the list ``name`` (``spec.tasks[].template.spec``), and
* ``*`` means every value of the map reached so far (``spec.pytorchReplicaSpecs.*.template.spec``).

A *pod-spec path* ends at a PodSpec; its containers are ``containers[]``, ``initContainers[]`` and
``ephemeralContainers[]``, and the pod's labels are in the sibling ``metadata`` (``spec`` ->
``metadata``, ``spec.template.spec`` -> ``spec.template.metadata``). A *container path* ends at one
container (``spec.templates[].container``, for kinds whose templates hold containers directly).

From that the module writes:

* :func:`gpu_sharing_condition`: the ``matchConditions`` expression of the webhook (is GPU sharing
  asked for anywhere in the object?), so objects without it never reach the webhook;
* :func:`rule_validation`: one ValidatingAdmissionPolicy validation per stateless rule, with a
  ``messageExpression`` that names the rule id and the fix like the Python rules engine.

Every expression is safe on objects that lack any of the fields (``has()`` before each step) and
on requests without an object (``object != null``). Values are compared the way
:func:`gpushare.admission.quantity.parse_quantity` reads them: an int, or a string of digits.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpushare import constants as c

#: The container lists of a PodSpec, with the word used in messages (same order as the rules).
POD_CONTAINER_LISTS: tuple[tuple[str, str], ...] = (
    ("containers", "container"),
    ("initContainers", "init container"),
    ("ephemeralContainers", "ephemeral container"),
)

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
        return f"{self.field}[]" if self.items else self.field


@functools.lru_cache(maxsize=256)
def parse_path(path: str) -> tuple[Step, ...]:
    """``"spec.tasks[].template.spec"`` -> steps; raises :class:`PathError` on anything else."""
    if not path:
        raise PathError("empty path")
    steps: list[Step] = []
    for part in path.split("."):
        if part == "*":
            if not steps:
                raise PathError(f"{path!r}: '*' needs a map before it")
            steps.append(Step(None))
            continue
        items = part.endswith("[]")
        name = part[:-2] if items else part
        if not _IDENT.match(name) or name in _CEL_RESERVED:
            raise PathError(f"{path!r}: {name!r} is not a field name CEL can select")
        steps.append(Step(name, items))
    return tuple(steps)


def container_paths(pod_spec_path: str) -> list[tuple[str, str]]:
    """``[(container path, label)]`` of a pod-spec path."""
    return [(f"{pod_spec_path}.{key}[]", label) for key, label in POD_CONTAINER_LISTS]


def pod_metadata_path(pod_spec_path: str) -> str | None:
    """Where the pod's metadata is for a pod-spec path (``a.b.spec`` -> ``a.b.metadata``)."""
    head, _, last = pod_spec_path.rpartition(".")
    if last != "spec":
        return None
    return f"{head}.metadata" if head else "metadata"


@dataclass(frozen=True)
class KindPaths:
    """Where one resource keeps its pod specs (and containers held directly, if any)."""

    group: str
    plural: str
    pod_specs: tuple[str, ...]
    containers: tuple[tuple[str, str], ...] = ()  # (container path, label)

    def all_containers(self) -> list[tuple[str, str]]:
        out = [cp for p in self.pod_specs for cp in container_paths(p)]
        out.extend(self.containers)
        return out


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
    """The webhook's matchCondition: does the object ask for GPU sharing anywhere?"""
    parts = [exists_at(path, container_asks_gpu) for path, _ in kind.all_containers()]
    for spec_path in kind.pod_specs:
        meta = pod_metadata_path(spec_path)
        if meta is not None:
            parts.append(
                exists_at(meta, lambda m: f"(has({m}.labels) && {_str(POD_LABEL_GPU_COUNT)} in {m}.labels)")
            )
    if not parts:
        return "object != null"  # nothing known to look at: match everything
    return "object != null && (" + " || ".join(parts) + ")"


# --- the stateless rules as ValidatingAdmissionPolicy validations ----------------------------------
#
# The policy has a variable ``containers``: one entry per container of the object, found through
# the same paths, as ``{'label', 'name', 'l' (limits), 'q' (requests)}`` (missing maps are {}).
# Each rule is a predicate over one entry; values are read as parse_quantity reads them and bound
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


def _gs012_detail(e: str) -> str:
    tag = _tag("GS012-unknown-gpu-resource")
    known = ", ".join(c.KNOWN_GPU_RESOURCES)

    def name(m: str, where: str) -> str:
        return (
            f"'resources.{where}[\"' + {e}.{m}.filter(r, {_unknown_name('r')})[0]"
            f" + '\"] is not a GPU resource any node offers {tag}; use one of {known}'"
        )

    return f"({e}.l.exists(r, {_unknown_name('r')}) ? {name('l', 'limits')} : {name('q', 'requests')})"


STATELESS_RULES: tuple[CelRule, ...] = (
    CelRule(
        "GS012-unknown-gpu-resource",
        lambda e: f"({e}.l.exists(r, {_unknown_name('r')}) || {e}.q.exists(r, {_unknown_name('r')}))",
        _gs012_detail,
        f"asks for an aliyun.com/gpu* resource no node offers {_tag('GS012-unknown-gpu-resource')};"
        f" use one of {', '.join(c.KNOWN_GPU_RESOURCES)}",
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


def _list_path(path: str) -> tuple[str, str] | None:
    """``spec.containers[]`` -> (has() guards, ``object.spec.containers``) when nothing but the last
    step is a list or a map wildcard; else None."""
    steps = parse_path(path)
    if not steps[-1].items or any(s.field is None or s.items for s in steps[:-1]):
        return None
    nodes = ["object." + ".".join(s.field or "" for s in steps[: i + 1]) for i in range(len(steps))]
    return " && ".join(f"has({n})" for n in nodes), nodes[-1]


def _entry(x: str, label: str) -> str:
    def res(where: str) -> str:
        return f"(has({x}.resources) && has({x}.resources.{where}) ? {x}.resources.{where} : {{}})"

    # Map literals must be homogeneous for the apiserver's type checker: every value is dyn.
    name = f"(has({x}.name) ? {x}.name : '?')"
    return (
        f"{{'label': dyn({_str(label)}), 'name': dyn({name}), 'l': dyn({res('limits')}),"
        f" 'q': dyn({res('requests')})}}"
    )


def _locations(kinds: Sequence[KindPaths]) -> dict[str, tuple[str, list[str]]]:
    """container path -> (label, ["group/plural", ...]) over every kind."""
    out: dict[str, tuple[str, list[str]]] = {}
    for kind in kinds:
        for path, label in kind.all_containers():
            out.setdefault(path, (label, []))[1].append(f"{kind.group}/{kind.plural}")
    return out


def containers_variable(kinds: Sequence[KindPaths], resource_var: str = "variables.resource") -> str:
    """The ``containers`` variable: every container under a path without wildcards before its list."""
    parts = []
    for path, (label, resources) in _locations(kinds).items():
        listed = _list_path(path)
        if listed is None:
            continue
        guard, node = listed
        known = ", ".join(_str(r) for r in resources)
        parts.append(f"({resource_var} in [{known}] && {guard} ? {node}.map(x, {_entry('x', label)}) : [])")
    return " + ".join(parts) if parts else "[]"


def _entry_ok(rule: CelRule, label: str, x: str) -> str:
    entry = _entry(x, label)
    return rule.bind(entry, "!" + rule.bad(entry))


def rule_validation(
    rule: CelRule,
    kinds: Sequence[KindPaths],
    *,
    containers_var: str = "variables.containers",
    name_var: str = "variables.objectName",
    resource_var: str = "variables.resource",
) -> dict[str, str]:
    """The VAP validation of one rule: expression, messageExpression, message, reason."""
    checks = [f"{containers_var}.all(e, {rule.bind('e', '!' + rule.bad('e'))})"]
    message = (
        f"{name_var} + ': ' + {containers_var}.filter(e, {rule.bind('e', rule.bad('e'))})"
        f".map(e, e.label + ' \"' + e.name + '\": ' + {rule.bind('e', rule.detail('e'), text=True)})[0]"
    )
    for path, (label, resources) in _locations(kinds).items():
        if _list_path(path) is not None:
            continue  # in the containers variable
        known = ", ".join(_str(r) for r in resources)
        ok = all_at(path, functools.partial(_entry_ok, rule, label))
        checks.append(f"(!({resource_var} in [{known}]) || {ok})")
        message = (
            f"({containers_var}.exists(e, {rule.bind('e', rule.bad('e'))}) ? {message}"
            f" : {name_var} + {_str(f': a {label} under {path} {rule.summary}')})"
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
