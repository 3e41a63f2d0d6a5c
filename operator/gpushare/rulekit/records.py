"""The record of an admission rule (:class:`AdmissionRule`), and how its messages become CEL.

A record is defined once (``gpushare.backends.ack.admission.catalog`` for the pod and workload
rules, ``gpushare.admission.catalog`` for the pool rules and the assembled table) and projected
several ways, so that no id, message or list is written twice:

* the Python engine emits findings of a record, its messages from the record's :class:`Case`
  texts (:meth:`AdmissionRule.text`);
* the HTTP code of a denial (:func:`gpushare.admission.review.verdict`) is the record's ``code``;
* the ValidatingAdmissionPolicy (:mod:`gpushare.admission.vap`) writes one validation per
  record with a :class:`CelForm`, whose messages are the same :class:`Case` texts rendered as CEL
  string concatenations (:func:`cel_text`);
* the tables of docs/reference/admission-rules.md (gpushare.docsgen).

Where the two engines must differ, :attr:`AdmissionRule.differs` says how and why.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gpushare.rulekit import cel

Verdict = Literal["deny", "warn"]

#: A denial of a value invalid in itself (422 Unprocessable Entity) or of a policy (403 Forbidden).
CODE_INVALID = 422
CODE_FORBIDDEN = 403
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Case:
    """One way a rule is broken: the problem (after ``field=value``) and the fix, with
    ``{placeholders}`` that each engine fills (Python with ``str.format``, CEL with expressions)."""

    problem: str
    fix: str


@dataclass(frozen=True)
class CelMessage:
    """Which case a broken container entry ``e`` gets in the policy, and the CEL strings for its
    field, its value and the case's placeholders."""

    when: str
    case: str
    field: str
    value: str | None
    values: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class CelForm:
    """A stateless rule in CEL: ``broken`` over one GPU container entry ``e`` (the fields of a
    backend's GPU entries, ``gpushare.backends.ack.admission.cel.gpu_entries``); the first message
    whose ``when`` holds is written."""

    broken: str
    messages: tuple[CelMessage, ...]
    #: The message for a container the policy can only walk (paths with several wildcards).
    summary: str
    #: Whose entries ``e`` are: ACK's GPU containers (``"gpu"``) or the containers asking for
    #: ``nvidia.com/*`` (``"nvidia"``, ``gpushare.backends.nvidia.admission.cel.nvidia_entries``).
    entries: Literal["gpu", "nvidia"] = "gpu"
    #: Only the policy over custom workload kinds holds it: the apiserver's own validation of Pods
    #: and of the built-in kinds' pod templates refuses the same objects before admission runs.
    custom_kinds_only: bool = False


@dataclass(frozen=True)
class PodCelForm:
    """A stateless rule on a field of a GPU-sharing pod's spec, in CEL: ``broken`` over a pod spec
    ``p`` (the policy adds "and the object asks for GPU sharing"); the message is the case's, after
    ``<pod spec path>.<field>=<value>``, with ``value`` and ``values`` CEL strings over ``p``."""

    broken: str
    case: str
    field: str
    value: str
    values: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: The message for a pod template the policy can only walk (paths with wildcards).
    summary: str = ""


@dataclass(frozen=True)
class AdmissionRule:
    id: str
    verdict: Verdict
    #: True when the target pool's ``spec.admission.mode`` decides deny / warn / skip.
    pool_mode: bool
    #: What must hold (the rules table), and the fix in general.
    what: str
    fix: str
    #: The HTTP code of a denial: 422 for a value invalid in itself, else 403.
    code: int = CODE_FORBIDDEN
    #: The messages both engines write, by case.
    cases: Mapping[str, Case] = dataclasses.field(default_factory=dict)
    #: The rule in the ValidatingAdmissionPolicy, when it needs no cluster state: over each GPU
    #: container (``cel``) or over each GPU-sharing pod spec (``pod_cel``).
    cel: CelForm | None = None
    pod_cel: PodCelForm | None = None
    #: Where the policy must answer differently from the Python engine, and why.
    differs: str = ""
    #: The rules table's "Pool mode" cell when it is not plain yes/no.
    pool_mode_text: str = ""

    @property
    def tag(self) -> str:
        return f"(rule {self.id})"

    def text(self, case: str, **values: object) -> tuple[str, str]:
        """The problem and the fix of one case, with its placeholders filled."""
        chosen = self.cases[case]
        return chosen.problem.format(**values), chosen.fix.format(**values)


def cel_text(template: str, values: Mapping[str, str]) -> str:
    """A CEL string expression for ``template``: the literal text as CEL string literals, each
    ``{name}`` as the CEL expression ``values[name]`` (a string)."""
    parts: list[str] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(template):
        if m.start() > pos:
            parts.append(cel.string_literal(template[pos : m.start()]))
        parts.append(f"({values[m[1]]})")
        pos = m.end()
    if pos < len(template) or not parts:
        parts.append(cel.string_literal(template[pos:]))
    return " + ".join(parts)


def cel_message(rule: AdmissionRule, message: CelMessage) -> str:
    """The CEL string of one case, as the Python engine writes it after the container's name:
    ``field=value problem (rule id); fix``."""
    case = rule.cases[message.case]
    value = f" + '=' + {message.value}" if message.value is not None else ""
    template = f"{case.problem} {rule.tag}; {case.fix}"
    return f"{message.field}{value} + ' ' + {cel_text(template, message.values)}"
