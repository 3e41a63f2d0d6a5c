"""From findings to an admission decision, and the shape check of raw AdmissionReviews (pure).

``decide`` turns the findings for one object into what the webhook answers: allowed or not, the
HTTP-style code (422 for invalid values, 403 for policy denials), one message listing every
denial, and the warnings ``kubectl`` prints. ``review_problem`` finds what is wrong with a
malformed AdmissionReview before the framework touches it, so that it gets a 400, never a 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpushare.admission.model import Finding

#: Rules about a value that is invalid in itself: denials answer 422 (Unprocessable Entity).
INVALID_VALUE_RULES = frozenset(
    {
        "GS001-core-percentage-step",
        "GS002-core-percentage-range",
        "GS003-core-without-mem",
        "GS004-mem-positive-integer",
        "GS006-request-limit-mismatch",
        "GS012-unknown-gpu-resource",
        "GP001-pool-schema",
        "GP002-pool-compute-without-isolation",
        "GP003-pool-empty-selector",
    }
)
CODE_INVALID = 422
CODE_FORBIDDEN = 403
CODE_BAD_REQUEST = 400


@dataclass(frozen=True)
class Decision:
    allowed: bool
    code: int = 200
    message: str = ""
    warnings: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(f.rule_id for f in self.findings)


def decide(findings: list[Finding]) -> Decision:
    denials = [f for f in findings if f.verdict == "deny"]
    warnings = tuple(f.message for f in findings if f.verdict == "warn")
    if not denials:
        return Decision(True, 200, "", warnings, tuple(findings))
    code = CODE_INVALID if any(f.rule_id in INVALID_VALUE_RULES for f in denials) else CODE_FORBIDDEN
    message = "\n".join(f.message for f in denials)
    return Decision(False, code, message, warnings, tuple(findings))


def review_problem(data: Any) -> tuple[str | None, str] | None:
    """``(uid or None, problem)`` when ``data`` is not a usable AdmissionReview, else None.

    With a uid the webhook can still answer with an AdmissionReview (allowed: false, code 400);
    without one the only sane answer is an HTTP 400.
    """
    if not isinstance(data, Mapping):
        return None, f"the body is a JSON {type(data).__name__}, not an AdmissionReview object"
    if data.get("kind") != "AdmissionReview":
        return None, f"kind is {data.get('kind')!r}, not 'AdmissionReview'"
    request = data.get("request")
    if not isinstance(request, Mapping):
        return None, "request is missing or not an object"
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return None, "request.uid is missing"
    resource = request.get("resource")
    if not isinstance(resource, Mapping) or not all(
        isinstance(resource.get(k), str) for k in ("group", "version", "resource")
    ):
        return uid, "request.resource must have string group, version and resource"
    if not isinstance(request.get("operation"), str):
        return uid, "request.operation is missing"
    if not isinstance(request.get("userInfo"), Mapping):
        return uid, "request.userInfo is missing"
    obj, old = request.get("object"), request.get("oldObject")
    if obj is None and old is None:
        return uid, "request.object and request.oldObject are both missing"
    for name, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, Mapping):
            return uid, f"request.{name} is not an object"
    return None


def denial_review(data: Any, uid: str, message: str, code: int = CODE_BAD_REQUEST) -> dict[str, Any]:
    """An AdmissionReview response that denies the request with ``code`` and ``message``."""
    api_version = data.get("apiVersion") if isinstance(data, Mapping) else None
    return {
        "apiVersion": api_version if isinstance(api_version, str) else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": False, "status": {"code": code, "message": message}},
    }
