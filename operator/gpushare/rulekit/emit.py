"""Findings written from rule records, and the admission mode of the pools a pod targets (pure).

:class:`Emitter` collects one object's findings, each message complete on its own:
``<object>: <where>=<value> <problem> (rule <id>); <fix>``. :func:`pool_verdict` is the verdict of
a rule whose record says the target pool decides (``pool_mode``): the strictest
``spec.admission.mode`` among the pools (Enforce denies, Warn warns, Off skips).
"""

from __future__ import annotations

from typing import Literal

from gpushare.rulekit.model import Context, Finding
from gpushare.rulekit.podspecs import ContainerRef
from gpushare.rulekit.quantity import clip
from gpushare.rulekit.records import AdmissionRule, Verdict

AdmissionMode = Literal["Enforce", "Warn", "Off"]
_MODE_ORDER: dict[str, int] = {"Off": 0, "Warn": 1, "Enforce": 2}
#: Longest field path shown in a message (keys come from the manifest).
MAX_FIELD_SHOWN = 200


class Emitter:
    """The findings of one object (``pod_path``: the pod template, named in container messages)."""

    def __init__(self, obj_name: str, pod_path: str | None = None) -> None:
        self.obj = obj_name
        #: Named in container messages when an object has several pod templates (replicas, steps).
        self.pod_path = pod_path
        self.out: list[Finding] = []

    def case(
        self,
        rule: AdmissionRule,
        case: str,
        *,
        container: ContainerRef | None,
        field: str,
        value: str | None,
        **values: object,
    ) -> None:
        """A finding with one of the rule's own messages (catalog ``cases``, shared with the policy)."""
        problem, fix = rule.text(case, **values)
        self.add(rule, container=container, field=field, value=value, problem=problem, fix=fix)

    def add(
        self,
        rule: AdmissionRule,
        *,
        container: ContainerRef | None,
        field: str,
        value: str | None,
        problem: str,
        fix: str,
        verdict: Verdict | None = None,
        note: str = "",
    ) -> None:
        where = f"{container.display}: {field.removeprefix(container.path + '.')}" if container else field
        if container and self.pod_path:
            where = f"{self.pod_path} {where}"
        where = clip(where, MAX_FIELD_SHOWN)
        shown = f"={value}" if value is not None else ""
        message = f"{self.obj}: {where}{shown} {problem} {rule.tag}; {fix}{note}"
        self.out.append(
            Finding(
                rule_id=rule.id,
                verdict=verdict or rule.verdict,
                object=self.obj,
                container=container.name if container else None,
                field=field,
                value=value,
                message=message,
            )
        )


def admission_mode(ctx: Context, pools: set[str], unpooled: bool) -> tuple[AdmissionMode, str]:
    """The strictest ``admission.mode`` among ``pools`` (Enforce when none or unpooled nodes)."""
    if unpooled or not pools:
        return "Enforce", ""
    modes: dict[str, list[str]] = {}
    for name in sorted(pools):
        pool = ctx.pool(name)
        modes.setdefault(pool.spec.admission.mode if pool else "Enforce", []).append(name)
    strictest = max(modes, key=lambda m: _MODE_ORDER[m])
    mode: AdmissionMode = "Enforce" if strictest == "Enforce" else ("Warn" if strictest == "Warn" else "Off")
    names = ", ".join(modes[strictest])
    return mode, names


def pool_verdict(
    rule: AdmissionRule, ctx: Context, pools: set[str], unpooled: bool
) -> tuple[Verdict | None, str]:
    """deny/warn/None(skip) for a pool-targeting rule, and a note naming the pool mode when it mattered."""
    mode, names = admission_mode(ctx, pools, unpooled)
    base = rule.verdict
    if mode == "Off":
        return None, ""
    if mode == "Warn" and base == "deny":
        return "warn", f" [admission.mode Warn on pool {names}]"
    return base, ""
