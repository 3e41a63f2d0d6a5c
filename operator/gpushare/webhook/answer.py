"""The webhook's answer to one review (decisions come from ``gpushare.admission``).

``admit`` is the decision shared by every path; ``fast_allow`` answers "allowed" before anything
else for objects that request no GPU sharing; ``respond`` is the whole answer without Kopf's
per-request machinery (the direct path). Every answer is counted in
``gpushare_admission_requests_total`` and timed in ``gpushare_admission_duration_seconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpushare import constants as c
from gpushare import metrics
from gpushare.admission import (
    DEFAULT_TABLE,
    Context,
    KindTable,
    evaluate,
    object_name,
    requests_gpu_sharing,
)
from gpushare.admission.review import CODE_BAD_REQUEST, Decision, decide
from gpushare.admission.webhook_config import TARGETS_BY_ID, WebhookTarget
from gpushare.webhook.context import ContextCache

logger = logging.getLogger("gpushare.webhook")


def admit(
    target: WebhookTarget,
    body: Mapping[str, Any],
    operation: str | None,
    ctx_fn: Callable[[], Context],
    table: KindTable = DEFAULT_TABLE,
) -> Decision:
    """Decide one request (raises nothing; the handler turns a denial into ``kopf.AdmissionError``)."""
    if operation not in target.operations:
        return Decision(True)
    obj = dict(body)
    if target.kind != c.KIND and not requests_gpu_sharing(obj, table):
        return Decision(True)  # fast path: no GPU sharing, no state
    try:
        return decide(evaluate(obj, ctx_fn(), table))
    except Exception as exc:  # a bug must not become a 500 (kopf's default code)
        logger.exception("Admission rules failed on %s", object_name(obj, table))
        return Decision(
            False,
            CODE_BAD_REQUEST,
            f"{object_name(obj, table)}: gpushare could not evaluate the GPU-sharing rules"
            f" ({type(exc).__name__}: {exc})",
        )


def _routed_to(target: WebhookTarget, request: Mapping[str, Any]) -> bool:
    """The review is about the resource the handler is for (a configuration could route others)."""
    resource = request.get("resource") or {}
    return (resource.get("group"), resource.get("resource")) == (target.group, target.plural)


def fast_allow(
    handler_id: str,
    review: Mapping[str, Any],
    targets: Mapping[str, WebhookTarget] = TARGETS_BY_ID,
    table: KindTable = DEFAULT_TABLE,
) -> bool:
    """True when the request can be allowed before Kopf: no GPU sharing requested, or an operation
    the handler does not check. Same answer as the handler, at a fraction of the cost."""
    started = time.perf_counter()
    target = targets.get(handler_id)
    if target is None or target.kind == c.KIND:
        return False
    request = review.get("request") or {}
    if not _routed_to(target, request):
        return False  # let Kopf decide
    obj = request.get("object")
    if request.get("operation") in target.operations and (
        not isinstance(obj, Mapping) or requests_gpu_sharing(obj, table)
    ):
        return False
    record(target.kind, Decision(True), time.perf_counter() - started)
    return True


def respond(
    handler_id: str,
    review: Mapping[str, Any],
    cache: ContextCache,
    targets: Mapping[str, WebhookTarget] = TARGETS_BY_ID,
    table: KindTable = DEFAULT_TABLE,
) -> dict[str, Any] | None:
    """The whole answer without Kopf's per-request machinery (memos, diffs, causes, handler
    bookkeeping: most of a request's CPU), from the same ``admit`` and the same index snapshot the
    Kopf handler would use. None (let Kopf answer) until the startup handler has handed over the
    indexes, or for a review routed to an unexpected resource."""
    if not cache.ready:
        return None
    target = targets.get(handler_id)
    if target is None:
        return None
    request = review.get("request") or {}
    if not _routed_to(target, request):
        return None
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return None
    started = time.perf_counter()
    decision = admit(target, obj, request.get("operation"), cache.live, table)
    record(target.kind, decision, time.perf_counter() - started)
    log_decision(obj, decision, table)
    answer: dict[str, Any] = {"uid": request["uid"], "allowed": decision.allowed}
    if decision.warnings:
        answer["warnings"] = list(decision.warnings)
    if not decision.allowed:
        answer["status"] = {"code": decision.code, "message": decision.message}
    return answer


def log_decision(body: Mapping[str, Any], decision: Decision, table: KindTable = DEFAULT_TABLE) -> None:
    if decision.findings:
        logger.info(
            "%s %s: %s",
            "Admitted" if decision.allowed else "Denied",
            object_name(dict(body), table),
            ", ".join(sorted(set(decision.rules))),
        )


def record(kind: str, decision: Decision, elapsed: float) -> None:
    label = "denied" if not decision.allowed else ("warned" if decision.warnings else "allowed")
    if decision.code == CODE_BAD_REQUEST and not decision.allowed and not decision.findings:
        label = "error"
    rules = sorted(set(decision.rules)) or ["none"]
    for rule in rules:
        metrics.ADMISSION_REQUESTS.labels(kind=kind, decision=label, rule=rule).inc()
    metrics.ADMISSION_SECONDS.labels(kind=kind, decision=label).observe(elapsed)
