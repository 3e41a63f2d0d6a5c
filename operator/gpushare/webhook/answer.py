"""All admission meaning of the webhook, for both of its paths (decisions from ``gpushare.admission``).

``respond`` answers one well-formed review: a review routed to another resource than its handler's
is denied, an object that asks for no GPU sharing is allowed without any state (``fast_allow``),
and the rest is judged by ``admit`` against the live context, the failure policy deciding what a
failure in the rules becomes. The HTTPS server (``gpushare.webhook.server``) only keeps HTTP in
bounds and hands each parsed review here; Kopf's validating handlers
(``gpushare.webhook.registration``), used until the indexes are handed over or with
``--webhook-via-kopf``, are a thin adapter over the same ``admit``. Every answer is counted in
``gpushare_admission_requests_total`` and timed in ``gpushare_admission_duration_seconds``.
"""

from __future__ import annotations

import functools
import logging
import marshal
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

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
from gpushare.admission.review import ALLOWED, CODE_BAD_REQUEST, Decision, verdict
from gpushare.admission.webhook_config import TARGETS_BY_ID, WebhookTarget
from gpushare.webhook.context import ContextCache

logger = logging.getLogger("gpushare.webhook")


def admit(
    target: WebhookTarget,
    body: Mapping[str, Any],
    operation: str | None,
    ctx_fn: Callable[[], Context],
    table: KindTable = DEFAULT_TABLE,
    failure_policy: str = "Fail",
    old: Mapping[str, Any] | None = None,
    asks: bool | None = None,
) -> Decision:
    """Decide one request (raises nothing; the handler turns a denial into ``kopf.AdmissionError``).

    A pool's UPDATE that leaves its spec as it was (``old``: a finalizer, an annotation, labels,
    status) is allowed: the rules judge the spec, and the operator's own bookkeeping on a pool
    (its cleanup finalizer) must go through even while the pool overlaps another.

    A failure inside the rules is answered as the webhook's failure policy says (the target's own
    when it has one: pools are always ``Ignore``): ``Fail`` denies (code 400), ``Ignore`` allows
    with a warning; either way it is logged in one line. ``asks``: whether the object asks for GPU
    sharing, when the caller has looked already (``respond``, after ``fast_allow``)."""
    if operation not in target.operations:
        return ALLOWED
    if (
        target.kind == c.KIND
        and operation == "UPDATE"
        and old is not None
        and old.get("spec") == body.get("spec")
    ):
        return ALLOWED
    obj = dict(body)
    if target.kind != c.KIND and not (requests_gpu_sharing(obj, table) if asks is None else asks):
        return ALLOWED  # fast path: no GPU sharing, no state
    try:
        return verdict(evaluate(obj, ctx_fn(), table))
    except Exception as exc:  # a bug must not become a 500 (kopf's default code)
        name = _safe_name(obj, table)
        logger.warning("Admission rules failed on %s: %s: %s", name, type(exc).__name__, exc)
        why = (
            f"{name}: gpushare could not evaluate the GPU-sharing rules"
            f" ({type(exc).__name__}: {str(exc)[:200]})"
        )
        if (target.failure_policy or failure_policy) == "Ignore":
            return Decision(True, warnings=(f"{why}; allowed (failurePolicy Ignore)",))
        return Decision(False, CODE_BAD_REQUEST, why)


def _safe_name(obj: Mapping[str, Any], table: KindTable) -> str:
    try:
        return object_name(dict(obj), table)
    except Exception:  # the name of a hostile object is not worth a second failure
        return "the object"


def _routed_to(target: WebhookTarget, request: Mapping[str, Any]) -> bool:
    """The review is about the resource the handler is for (a configuration could route others)."""
    resource = request.get("resource") or {}
    return (resource.get("group"), resource.get("resource")) == (target.group, target.plural)


def misrouted(handler_id: str, target: WebhookTarget, request: Mapping[str, Any]) -> str | None:
    """Why a review does not belong to the handler at its path (a wrong path never allows)."""
    if _routed_to(target, request):
        return None
    resource = request.get("resource") or {}
    got = "/".join(str(resource.get(k, ""))[:63] for k in ("group", "version", "resource"))
    return f"{handler_id} judges {target.plural}{'.' + target.group if target.group else ''}, not {got}"


def failure_response(
    handler_id: str, review: Mapping[str, Any], exc: Exception, failure_policy: str = "Fail"
) -> dict[str, Any]:
    """The answer to a review whose evaluation failed past the shape checks (a bug, or Kopf's
    fallback failing), as the failure policy says: ``Fail`` denies (code 400), ``Ignore`` allows
    with a warning; logged in one line, and counted as ``decision="error"`` of its kind (what the
    alert GPUShareWebhookErrors watches), whichever the policy."""
    logger.warning("Could not serve an AdmissionReview for %s: %s: %s", handler_id, type(exc).__name__, exc)
    target = TARGETS_BY_ID.get(handler_id)
    if target is not None:
        _requests(target.kind, "error", "none").inc()
    uid = review["request"]["uid"]
    what = f"gpushare webhook could not evaluate this request ({type(exc).__name__}: {str(exc)[:200]})"
    if failure_policy == "Ignore":
        return {"uid": uid, "allowed": True, "warnings": [f"{what}; allowed (failurePolicy Ignore)"]}
    return {"uid": uid, "allowed": False, "status": {"code": CODE_BAD_REQUEST, "message": what}}


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
    record(target.kind, ALLOWED, time.perf_counter() - started)
    return True


#: The metadata that tells apart objects made from one template (a Job's or a ReplicaSet's pods).
#: The rules never read it: it only names the object in a finding's message.
IDENTITY_FIELDS = frozenset(
    {"name", "generateName", "uid", "resourceVersion", "creationTimestamp", "managedFields"}
)


class CleanAllows:
    """Reviews of the current context that were allowed with nothing to say, by the object less
    its identity (``IDENTITY_FIELDS``). A burst of a workload's pods (one Job of many replicas)
    is judged once: the rules are pure functions of the object and the context, and an answer
    with no finding holds no name. Cleared whenever the context changes (a pool or a node the
    rules read); at most ``size`` entries, the oldest forgotten first. Denials, warnings and
    pools are always judged."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._context: Context | None = None
        self._seen: dict[bytes, None] = {}
        self.hits = 0

    @staticmethod
    def key(kind: str, operation: object, obj: Mapping[str, Any]) -> bytes | None:
        """The object less its identity as bytes (``marshal`` version 2: C speed, about a quarter
        of ``json.dumps``'s time on a pod; no back-references, so equal objects give equal bytes,
        and unequal ones unequal bytes). Only this process reads it back: never stored."""
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            return None
        rest = {k: v for k, v in obj.items() if k != "metadata"}
        same = {k: v for k, v in meta.items() if k not in IDENTITY_FIELDS}
        try:
            return marshal.dumps(cast(Any, (kind, operation, same, rest)), 2)
        except ValueError:  # not JSON's types (a parsed review has only those)
            return None

    def holds(self, context: Context, key: bytes) -> bool:
        if context is not self._context:
            self._context = context
            self._seen.clear()
            return False
        if key in self._seen:
            self.hits += 1
            return True
        return False

    def add(self, context: Context, key: bytes) -> None:
        if context is not self._context:
            return
        if len(self._seen) >= self.size:
            del self._seen[next(iter(self._seen))]
        self._seen[key] = None


def live_context(cache: ContextCache) -> Context | None:
    """The context ``respond`` judges with, once the startup handler has handed over the indexes
    (read on the event loop: the indexes change there)."""
    return cache.live() if cache.ready else None


def respond(
    handler_id: str,
    review: Mapping[str, Any],
    context: Context | None,
    targets: Mapping[str, WebhookTarget] = TARGETS_BY_ID,
    table: KindTable = DEFAULT_TABLE,
    failure_policy: str = "Fail",
    allows: CleanAllows | None = None,
) -> dict[str, Any] | None:
    """The answer to one well-formed review, without Kopf's per-request machinery (memos, diffs,
    causes, handler bookkeeping: most of a request's CPU), from the same ``admit`` and the same
    index snapshot the Kopf handler would use.

    In order: a review routed to another resource than the handler's is denied (code 400: a wrong
    path never allows); an object identical but for its identity to one allowed with nothing to
    say under ``context`` is allowed again (``allows``: a workload's pods, judged once); one that
    asks for no GPU sharing, or for an operation the handler does not check, is allowed without
    any state (``fast_allow``); the rest is judged with ``context``. None (let Kopf answer) for a
    handler id it does not know, a review with no object (a DELETE), or no ``context`` yet (the
    indexes not handed over, or ``--webhook-via-kopf``).

    The memo comes before ``fast_allow``: the apiserver's ``matchConditions`` send only objects
    that ask for GPU sharing, so that scan would find one every time."""
    target = targets.get(handler_id)
    if target is None:
        return None
    started = time.perf_counter()
    request = review.get("request") or {}
    wrong = misrouted(handler_id, target, request)
    if wrong is not None:
        logger.info("Rejected a misrouted AdmissionReview: %s", wrong)
        return {
            "uid": request["uid"],
            "allowed": False,
            "status": {"code": CODE_BAD_REQUEST, "message": f"malformed AdmissionReview: {wrong}"},
        }
    obj = request.get("object")
    operation = request.get("operation")
    key = (
        allows.key(target.kind, operation, obj)
        if allows is not None and context is not None and target.kind != c.KIND and isinstance(obj, Mapping)
        else None
    )
    if key is not None and allows is not None and context is not None and allows.holds(context, key):
        record(target.kind, ALLOWED, time.perf_counter() - started)
        return {"uid": request["uid"], "allowed": True}
    if fast_allow(handler_id, review, targets, table):
        return {"uid": request["uid"], "allowed": True}
    if not isinstance(obj, Mapping) or context is None:
        return None
    old = request.get("oldObject")
    decision = admit(
        target,
        obj,
        operation,
        lambda: context,
        table,
        failure_policy,
        old if isinstance(old, Mapping) else None,
        asks=True if target.kind != c.KIND else None,  # fast_allow looked: it does
    )
    if key is not None and allows is not None and decision == ALLOWED:  # nothing to say
        allows.add(context, key)
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
    if decision is ALLOWED:  # the common answer: its two series looked up once
        _requests(kind, "allowed", "none").inc()
        _seconds(kind, "allowed").observe(elapsed)
        return
    label = "denied" if not decision.allowed else ("warned" if decision.warnings else "allowed")
    if decision.code == CODE_BAD_REQUEST and not decision.allowed and not decision.findings:
        label = "error"
    rules = sorted(set(decision.rules)) or ["none"]
    for rule in rules:
        _requests(kind, label, rule).inc()
    _seconds(kind, label).observe(elapsed)


# Each review counts once and observes once: the labelled children are looked up once per label
# set (the client library's ``labels()`` builds and checks its key on every call). The label sets
# are few: kinds x decisions x rules of the catalog.
@functools.cache
def _requests(kind: str, decision: str, rule: str) -> Any:
    return metrics.ADMISSION_REQUESTS.labels(kind=kind, decision=decision, rule=rule)


@functools.cache
def _seconds(kind: str, decision: str) -> Any:
    return metrics.ADMISSION_SECONDS.labels(kind=kind, decision=decision)
