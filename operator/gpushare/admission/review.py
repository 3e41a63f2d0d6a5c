"""From findings to an admission decision, and the shape check of raw AdmissionReviews (pure).

``decide`` turns the findings for one object into what the webhook answers: allowed or not, the
HTTP-style code (each rule's ``code``: 422 for invalid values, 403 for policy denials), one
message listing every
denial, and the warnings ``kubectl`` prints. ``review_problem`` finds what is wrong with a
malformed AdmissionReview before the framework touches it, so that it gets a 400, never a 500.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from gpushare.admission.catalog import RULES
from gpushare.rulekit.model import Finding
from gpushare.rulekit.records import CODE_FORBIDDEN, CODE_INVALID

CODE_BAD_REQUEST = 400

#: Largest AdmissionReview body accepted by default (``--webhook-max-body-bytes``). Measured: a
#: Pod with 10 containers of 30 env vars each is a 58 KB review on UPDATE (object and oldObject),
#: 30 such containers about 170 KB; at 512 KiB ``json.loads`` holds the event loop for about 10 ms
#: (docs/security.md).
MAX_REVIEW_BYTES = 512 * 1024
#: Deepest JSON nesting accepted; Kubernetes objects nest about 20 levels (a pod template in a
#: CronJob with affinity terms), and Python's parser and the rules recurse per level.
MAX_REVIEW_DEPTH = 200

#: ``[``/``{`` -> +1 and ``]``/``}`` -> -1 (as signed bytes); every other byte is deleted.
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: Bytes scanned per step of :func:`deeper_than` (each step about a millisecond at most).
_DEPTH_STEP = 32 * 1024


def deeper_than(raw: bytes, limit: int) -> bool:
    """Whether UTF-8 JSON ``raw`` nests ``[``/``{`` more than ``limit`` levels, without parsing it.

    Linear in the size, in steps of ``_DEPTH_STEP`` bytes of C-speed byte operations (so another
    thread, the event loop, gets the GIL between steps): strings are cut out, brackets kept as
    +1/-1, and the running depth summed. In valid JSON a backslash appears only inside strings
    and escapes exactly the next byte, so dropping escaped backslashes (left to right, as
    ``replace`` pairs them) and then escaped quotes leaves only the quotes that open and close
    strings. Input that is not valid JSON may be cut wrongly; the parser refuses it anyway.
    """
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    depth, inside = 0, False
    for start in range(0, len(raw), _DEPTH_STEP):
        parts = raw[start : start + _DEPTH_STEP].split(b'"')
        outside = b"".join(parts[1::2] if inside else parts[::2])
        inside ^= len(parts) % 2 == 0  # an odd number of quotes in this step
        signs = memoryview(outside.translate(_SIGNS, _NOT_BRACKETS)).cast("b")
        if signs and max(accumulate(signs, initial=depth)) > limit:
            return True
        depth += sum(signs)
    return False


def raw_review_problem(
    raw: bytes, max_bytes: int = MAX_REVIEW_BYTES, max_depth: int = MAX_REVIEW_DEPTH
) -> str | None:
    """Why a raw review body must be refused before it is parsed, or None (size, encoding and
    nesting depth). The apiserver sends UTF-8 JSON; ``json.loads`` would also guess UTF-16 and
    UTF-32 from the bytes, which no byte-level check can follow, so anything else is refused."""
    if len(raw) > max_bytes:
        return f"the body is {len(raw)} bytes, more than the {max_bytes} an AdmissionReview may have"
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return None if _utf8(raw) else _NOT_UTF8
    if not _utf8(raw):
        return _NOT_UTF8
    if deeper_than(raw, max_depth):
        return f"the body nests more than {max_depth} levels deep (an AdmissionReview needs about 20)"
    return None


_NOT_UTF8 = "the body is not UTF-8 JSON (the apiserver sends UTF-8)"


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not raw.startswith(b"\xef\xbb\xbf")  # a BOM: json.loads refuses it in a str


def parse_review(raw: bytes) -> Any:
    """The JSON of a body that passed :func:`raw_review_problem` (raises ``ValueError``)."""
    return json.loads(raw.decode("utf-8"))


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


#: The decision with nothing to say (one object: the webhook counts it without looking further).
ALLOWED = Decision(True)


def verdict(findings: list[Finding]) -> Decision:
    if not findings:
        return ALLOWED
    denials = [f for f in findings if f.verdict == "deny"]
    warnings = tuple(f.message for f in findings if f.verdict == "warn")
    if not denials:
        return Decision(True, 200, "", warnings, tuple(findings))
    # 422 when any denial is of a value invalid in itself, else 403 (each rule's ``code``).
    code = CODE_INVALID if any(RULES[f.rule_id].code == CODE_INVALID for f in denials) else CODE_FORBIDDEN
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
