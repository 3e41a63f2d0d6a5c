"""The NVIDIA gate: whether ``nvidia.com/gpu`` pods reach the webhook at all (pure, no client).

A pod asking for ``nvidia.com/gpu`` with a nodeSelector, affinity or nodeName is common in any GPU
cluster; the NVIDIA rules judge it only when it may be aimed at an NVIDIA pool. So the shipped
ValidatingWebhookConfiguration (``gpushare.admission.webhook_config``) matches NVIDIA's requests
only by ``nvidia.com/gpu.shared`` (which only sharing users create): the gate is *closed*, and a
cluster with no NVIDIA pool pays nothing for its ``nvidia.com/gpu`` pods. While at least one NVIDIA
pool exists the operator *opens* it: each gpushare entry's ``asks-for-gpu-sharing`` condition
becomes the one that also matches ``nvidia.com/gpu`` in a pod spec with node constraints
(:func:`gpushare.admission.cel.gpu_sharing_condition`, ``"all"``); when none is left it closes it
again. The writes are :func:`gate_patch` (here) and ``gpushare.webhook.gate`` (the API call).

Only a condition gpushare wrote is changed: an entry whose condition is neither of the two
expressions gpushare generates for its kind (edited by hand, or written by another version) is
left as it is and reported (:attr:`GatePatch.foreign`); an entry without the condition (a kind
sent whole, e.g. the chart's ``workloadKinds``) has nothing to gate.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpushare.admission.cel import gpu_sharing_condition
from gpushare.admission.celfmt import readable, tokens
from gpushare.admission.webhook_config import MATCH_CONDITION_NAME, WebhookTarget, kind_paths, webhook_name


def is_nvidia_pool(body: Mapping[str, Any]) -> bool:
    """Whether a GPUSharePool (as JSON) is an NVIDIA pool: it has ``spec.nvidia`` (its backend's
    one-of field; the CRD refuses a pool with both backends' fields)."""
    spec = body.get("spec")
    return isinstance(spec, Mapping) and isinstance(spec.get("nvidia"), Mapping)


def gate_wanted(pools: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the gate should be open: at least one NVIDIA pool exists (one being deleted
    included: its nodes are still NVIDIA-shared until its cleanup is done)."""
    return any(is_nvidia_pool(p) for p in pools)


@functools.lru_cache(maxsize=256)
def condition(target: WebhookTarget, open_: bool) -> str | None:
    """The expression of the target's ``asks-for-gpu-sharing`` condition with the gate open or
    closed, laid out as the shipped configuration has it (:mod:`gpushare.admission.celfmt`); None
    for a target without one (pools; kinds CEL cannot select)."""
    paths = kind_paths(target)
    if paths is None:
        return None
    return readable(gpu_sharing_condition(paths, "all" if open_ else "shared"))


@functools.lru_cache(maxsize=256)
def _condition_tokens(target: WebhookTarget, open_: bool) -> tuple[str, ...] | None:
    wanted = condition(target, open_)
    return None if wanted is None else tuple(tokens(wanted))


def _is(expression: Any, target: WebhookTarget, open_: bool) -> bool:
    """Whether ``expression`` is gpushare's condition for the gate open or closed, however it is
    laid out (a configuration applied before the expressions were laid out over lines, too)."""
    if not isinstance(expression, str) or condition(target, open_) is None:
        return False
    if expression == condition(target, open_):
        return True
    try:
        return tuple(tokens(expression)) == _condition_tokens(target, open_)
    except ValueError:  # an unterminated literal: not ours
        return False


def gate_of(hook: Mapping[str, Any], target: WebhookTarget) -> bool | None:
    """Whether an entry's gate is open (True) or closed (False) as its condition says; None when
    it has no condition of ours or one gpushare did not write."""
    for cond in hook.get("matchConditions") or ():
        if isinstance(cond, Mapping) and cond.get("name") == MATCH_CONDITION_NAME:
            expression = cond.get("expression")
            if _is(expression, target, True):
                return True
            if _is(expression, target, False):
                return False
            return None
    return None


@dataclass(frozen=True)
class GatePatch:
    """What :func:`gate_patch` decided: the JSON patch (``[]``: nothing to write) and the entries
    left alone because their condition is not one gpushare wrote (by webhook name)."""

    ops: tuple[dict[str, Any], ...] = ()
    foreign: tuple[str, ...] = ()


def gate_patch(current: Mapping[str, Any], open_: bool, targets: Sequence[WebhookTarget]) -> GatePatch:
    """The JSON patch that opens (``open_``) or closes the gate on ``current``'s gpushare entries.

    The first op tests the resourceVersion that was read (a concurrent writer makes the patch fail
    and the caller reads again). Only the expression of each entry's ``asks-for-gpu-sharing``
    condition is replaced, and only where it is the other of gpushare's two expressions.
    """
    by_name = {webhook_name(t.handler_id): t for t in targets}
    ops: list[dict[str, Any]] = []
    foreign: list[str] = []
    for index, hook in enumerate(current.get("webhooks") or ()):
        if not isinstance(hook, Mapping):
            continue
        target = by_name.get(str(hook.get("name")))
        if target is None or condition(target, open_) is None:
            continue
        for j, cond in enumerate(hook.get("matchConditions") or ()):
            if not isinstance(cond, Mapping) or cond.get("name") != MATCH_CONDITION_NAME:
                continue
            expression = cond.get("expression")
            if _is(expression, target, open_):
                break
            if not _is(expression, target, not open_):
                foreign.append(str(hook.get("name")))
                break
            ops.append(
                {
                    "op": "replace",
                    "path": f"/webhooks/{index}/matchConditions/{j}/expression",
                    "value": condition(target, open_),
                }
            )
            break
    if not ops:
        return GatePatch((), tuple(foreign))
    version = (current.get("metadata") or {}).get("resourceVersion")
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": version}
    return GatePatch((test, *ops), tuple(foreign))


def check_due(want: bool, decided: bool | None, checked: float | None, now: float, resync: float) -> bool:
    """Whether the operator reads the configuration again: the gate it wants differs from the one it
    last decided (or it never looked), or ``resync`` seconds passed since it last looked (a
    ``helm upgrade`` or ``kubectl apply`` re-renders the shipped, closed condition)."""
    return decided is None or checked is None or want != decided or now - checked >= resync
