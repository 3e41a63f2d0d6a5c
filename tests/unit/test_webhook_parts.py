"""Pure parts of the webhook: decisions, review shape checks, the shipped configuration, certificates,
the Kopf handler's decision function and options, and the HTTPS server on malformed input."""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import datetime as dt
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml
from cryptography import x509

from gpushare.admission import EMPTY_CONTEXT, Context, Finding, evaluate, node_info
from gpushare.admission.review import (
    MAX_REVIEW_DEPTH,
    Decision,
    deeper_than,
    denial_review,
    raw_review_problem,
    review_problem,
    verdict,
)
from gpushare.admission.webhook_config import (
    TARGETS,
    TARGETS_BY_ID,
    WebhookSettings,
    build_configuration,
    render_manifest,
)
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.cli.run import add_webhook_arguments, webhook_options
from gpushare.k8s.retry import Backoff
from gpushare.k8s.webhook_api import WebhookCertError
from gpushare.webhook import answer as answer_module
from gpushare.webhook import lifecycle, tls
from gpushare.webhook.answer import admit, fast_allow, live_context, respond
from gpushare.webhook.context import ContextCache
from gpushare.webhook.lifecycle import CertLifecycle
from gpushare.webhook.options import WebhookOptions
from gpushare.webhook.registration import build_server
from gpushare.webhook.server import GPUShareWebhookServer

REPO = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"


def finding(rule: str, verdict: str = "deny", message: str = "m") -> Finding:
    return Finding(rule, verdict, "Pod/ns/p", None, "spec", None, message)  # type: ignore[arg-type]


# --- decisions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("findings", "allowed", "code", "warnings"),
    [
        pytest.param([], True, 200, (), id="clean"),
        pytest.param([finding("GS010-no-isolation-sizing", "warn", "w")], True, 200, ("w",), id="warning"),
        pytest.param([finding("GS001-core-percentage-step")], False, 422, (), id="invalid-value"),
        pytest.param([finding("GS009-pool-kind-mismatch")], False, 403, (), id="policy"),
        pytest.param(
            [finding("GS009-pool-kind-mismatch"), finding("GS004-mem-positive-integer")],
            False,
            422,
            (),
            id="both",
        ),
        pytest.param([finding("GP004-pool-overlap")], False, 403, (), id="overlap"),
        pytest.param([finding("GP002-pool-compute-without-isolation")], False, 422, (), id="pool-invalid"),
    ],
)
def test_decide(findings: list[Finding], allowed: bool, code: int, warnings: tuple[str, ...]) -> None:
    d = verdict(findings)
    assert (d.allowed, d.code, d.warnings) == (allowed, code, warnings)


def test_denial_message_lists_every_denial_and_no_warning() -> None:
    d = verdict(
        [
            finding("GS001-core-percentage-step", message="a"),
            finding("GS010-no-isolation-sizing", "warn", "w"),
            finding("GS007-pool-target-missing", message="b"),
        ]
    )
    assert d.message == "a\nb"
    assert d.warnings == ("w",)


def _review(**request: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "uid": "u",
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "userInfo": {"username": "x"},
        "object": {"kind": "Pod"},
    }
    base.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": base}


@pytest.mark.parametrize(
    ("data", "uid", "problem"),
    [
        pytest.param([], None, "JSON list", id="array"),
        pytest.param({"kind": "Other"}, None, "not 'AdmissionReview'", id="kind"),
        pytest.param({"kind": "AdmissionReview"}, None, "request is missing", id="no-request"),
        pytest.param(_review(uid=None), None, "uid", id="no-uid"),
        pytest.param(_review(resource={"group": ""}), "u", "resource", id="resource"),
        pytest.param(_review(operation=None), "u", "operation", id="operation"),
        pytest.param(_review(userInfo=None), "u", "userInfo", id="userinfo"),
        pytest.param(_review(object=None), "u", "both missing", id="no-object"),
        pytest.param(_review(object=[1]), "u", "request.object is not an object", id="object-list"),
        pytest.param(_review(object=None, oldObject="x"), "u", "oldObject is not an object", id="old-string"),
    ],
)
def test_review_problem(data: Any, uid: str | None, problem: str) -> None:
    found = review_problem(data)
    assert found is not None
    assert found[0] == uid and problem in found[1]


def test_good_review_has_no_problem_and_denial_review_shape() -> None:
    assert review_problem(_review()) is None
    assert review_problem(_review(operation="DELETE", object=None, oldObject={"kind": "Pod"})) is None
    out = denial_review(_review(), "u", "bad")
    assert out == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u", "allowed": False, "status": {"code": 400, "message": "bad"}},
    }


# --- the shipped configuration --------------------------------------------------------------------


def test_committed_manifest_matches_builder() -> None:
    path = REPO / "manifests" / "webhook" / "webhook.yaml"
    assert path.read_text() == render_manifest(), "run: python -m gpushare.admission.webhook_config > " + str(
        path
    )


def test_configuration_service_mode() -> None:
    cfg = build_configuration(WebhookSettings(namespace="ops", ca_bundle="Q0E="))
    assert [h["name"] for h in cfg["webhooks"]] == [f"{t.handler_id}.gpushare.io" for t in TARGETS]
    for hook, target in zip(cfg["webhooks"], TARGETS, strict=True):
        assert hook["clientConfig"] == {
            "service": {
                "name": "gpushare-webhook",
                "namespace": "ops",
                "port": 443,
                "path": f"/{target.handler_id}",
            },
            "caBundle": "Q0E=",
        }
        # Pools fail open (CEL and the operator's conflict detection guard them); workloads closed.
        want_policy = "Ignore" if target.kind == "GPUSharePool" else "Fail"
        assert hook["timeoutSeconds"] == 5 and hook["failurePolicy"] == want_policy
        assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
        assert hook["objectSelector"]["matchExpressions"] == [
            {"key": "gpushare.io/webhook", "operator": "NotIn", "values": ["ignore"]}
        ]
        if target.namespaced:
            (expr,) = hook["namespaceSelector"]["matchExpressions"]
            assert expr == {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "ops"],
            }
        else:
            assert "namespaceSelector" not in hook
    assert TARGETS_BY_ID["validate-pods"].operations == ("CREATE",)
    assert all(t.operations == ("CREATE", "UPDATE") for t in TARGETS if t.kind != "Pod")


def test_configuration_local_mode_and_limits() -> None:
    cfg = build_configuration(
        WebhookSettings(url_base="https://127.0.0.1:9443/", failure_policy="Ignore", timeout_seconds=2)
    )
    hook = cfg["webhooks"][0]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/validate-pods"}
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 2
    # --webhook-failure-policy Fail never makes the pools' entry fail closed.
    pools = build_configuration(WebhookSettings(failure_policy="Fail"))["webhooks"][-1]
    assert pools["name"] == "validate-gpusharepools.gpushare.io" and pools["failurePolicy"] == "Ignore"
    with pytest.raises(ValueError, match=r"timeoutSeconds must be 1\.\.5"):
        WebhookSettings(timeout_seconds=10)
    with pytest.raises(ValueError, match="failurePolicy"):
        WebhookSettings(failure_policy="Maybe")  # type: ignore[arg-type]


# --- certificates ---------------------------------------------------------------------------------

SANS = ["127.0.0.1", "localhost"]


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_new_bundle_is_valid_and_has_the_sans() -> None:
    bundle = tls.renew(None, SANS, NOW)
    assert tls.cert_problem(bundle, SANS, NOW) is None
    cert = _cert(bundle.cert)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    cert.verify_directly_issued_by(_cert(bundle.ca_cert))
    assert bundle.ca_bundle == bundle.ca_cert
    assert base64.b64decode(bundle.ca_bundle_b64) == bundle.ca_cert


@pytest.mark.parametrize(
    ("later", "problem"),
    [
        pytest.param(dt.timedelta(days=300), None, id="fresh"),
        pytest.param(dt.timedelta(days=340), "serving certificate expires", id="expiring"),
        pytest.param(dt.timedelta(days=3650 - 300), "CA expires", id="ca-expiring"),
    ],
)
def test_cert_problem_over_time(later: dt.timedelta, problem: str | None) -> None:
    bundle = tls.renew(None, SANS, NOW)
    found = tls.cert_problem(bundle, SANS, NOW + later)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_cert_problem_detects_wrong_sans_wrong_ca_and_garbage() -> None:
    bundle = tls.renew(None, SANS, NOW)
    assert "lacks SANs ['gpushare-webhook.ops.svc']" in str(
        tls.cert_problem(bundle, [*SANS, "gpushare-webhook.ops.svc"], NOW)
    )
    other = tls.renew(None, SANS, NOW)
    mixed = tls.CertBundle(bundle.ca_cert, bundle.ca_key, other.cert, other.key, bundle.ca_bundle)
    assert tls.cert_problem(mixed, SANS, NOW) == "the serving certificate is not signed by the CA"
    broken = tls.CertBundle(b"junk", bundle.ca_key, bundle.cert, bundle.key, b"junk")
    assert "unreadable" in str(tls.cert_problem(broken, SANS, NOW))
    assert tls.cert_problem(None, SANS, NOW) == "no certificate yet"


def test_renewal_keeps_the_ca_and_rollover_trusts_both() -> None:
    first = tls.renew(None, SANS, NOW)
    renewed = tls.renew(first, SANS, NOW + dt.timedelta(days=340))
    assert renewed.ca_cert == first.ca_cert and renewed.cert != first.cert
    assert renewed.ca_bundle == first.ca_cert
    late = NOW + dt.timedelta(days=3650 - 100)
    rolled = tls.renew(first, SANS, late)
    assert rolled.ca_cert != first.ca_cert
    assert rolled.ca_bundle == rolled.ca_cert + first.ca_cert  # old CA still trusted until it expires
    assert tls.cert_problem(rolled, SANS, late) is None
    expired = tls.renew(first, SANS, NOW + dt.timedelta(days=3700))
    assert expired.ca_bundle == expired.ca_cert


def test_serving_cert_never_outlives_its_ca() -> None:
    first = tls.renew(None, SANS, NOW)
    near_end = NOW + dt.timedelta(days=3650 - 400)
    renewed = tls.renew(first, SANS, near_end)
    assert _cert(renewed.cert).not_valid_after_utc <= _cert(renewed.ca_cert).not_valid_after_utc


def test_secret_round_trip_and_incomplete_data() -> None:
    bundle = tls.renew(None, SANS, NOW)
    assert tls.bundle_from_secret_data(tls.secret_data(bundle)) == bundle
    data = tls.secret_data(bundle)
    del data["ca.key"]
    assert tls.bundle_from_secret_data(data) is None
    assert tls.bundle_from_secret_data({"tls.crt": "%%%"}) is None
    assert tls.bundle_from_secret_data(None) is None


def test_serving_sans_per_mode() -> None:
    assert tls.serving_sans(WebhookSettings(url_base="https://127.0.0.1:1")) == ["127.0.0.1", "localhost"]
    assert tls.serving_sans(WebhookSettings(namespace="ops", service="wh")) == [
        "wh.ops.svc",
        "wh.ops.svc.cluster.local",
        "wh.ops",
        "wh",
    ]


def test_write_files_only_when_changed(tmp_path: Path) -> None:
    bundle = tls.renew(None, SANS, NOW)
    files, changed = tls.write_files(bundle, tmp_path / "c")
    assert (
        changed
        and files.certfile.read_bytes() == bundle.cert
        and files.cafile.read_bytes() == bundle.ca_bundle
    )
    assert files.keyfile.stat().st_mode & 0o777 == 0o600
    assert tls.write_files(bundle, tmp_path / "c") == (files, False)


# --- the handler's decision -----------------------------------------------------------------------


def _pod(limits: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    if selector:
        spec["nodeSelector"] = selector
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def _never() -> Context:
    raise AssertionError("the fast path must not build a context")


def test_admit_fast_path_and_operations() -> None:
    pods = TARGETS_BY_ID["validate-pods"]
    assert admit(pods, _pod({"cpu": "1"}), "CREATE", _never) == Decision(True)
    assert admit(pods, _pod({MEM: "2", CORE: "33"}), "UPDATE", _never) == Decision(True)
    assert admit(pods, _pod({MEM: "2", CORE: "33"}), "DELETE", _never) == Decision(True)


def test_admit_denies_and_warns_like_the_engine() -> None:
    pods = TARGETS_BY_ID["validate-pods"]
    bad = _pod({MEM: "2", CORE: "33"}, {"ack.node.gpu.schedule": "core_mem"})
    d = admit(pods, bad, "CREATE", Context)
    assert not d.allowed and d.code == 422 and d.message == evaluate(bad)[0].message
    warned = admit(pods, _pod({MEM: "2"}, {"cgpu.disable.isolation": "true"}), "CREATE", Context)
    assert warned.allowed and len(warned.warnings) == 1 and "GS010" in warned.warnings[0]


def _nvidia_pool(name: str, **nvidia: Any) -> GPUSharePool:
    return parse_pool(
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"matchLabels": {"np": name}},
                "nvidia": {"strategy": "TimeSlicing", "replicas": 4, **nvidia},
            },
        }
    )


def test_admit_judges_nvidia_requests_aimed_at_pools() -> None:
    pods = TARGETS_BY_ID["validate-pods"]
    strict = _nvidia_pool("strict", failRequestsGreaterThanOne=True)

    def ctx() -> Context:
        return Context.build([strict])

    two = _pod({"nvidia.com/gpu": "2"}, {"gpushare.io/pool": "strict"})
    d = admit(pods, two, "CREATE", ctx)
    assert not d.allowed and d.code == 403 and d.message == evaluate(two, ctx())[0].message
    assert "GS019-nvidia-more-than-one-shared-gpu" in d.message and "pool strict" in d.message
    # Whole GPUs aimed at no pool never reach the rules (the matchCondition leaves them out).
    assert admit(pods, _pod({"nvidia.com/gpu": "4"}), "CREATE", _never) == Decision(True)
    assert admit(pods, _pod({"nvidia.com/gpu": "1"}, {"gpushare.io/pool": "strict"}), "CREATE", ctx).allowed


def test_admit_turns_a_crash_into_a_400_denial() -> None:
    def broken() -> Context:
        raise RuntimeError("boom")

    d = admit(TARGETS_BY_ID["validate-pods"], _pod({MEM: "2"}, {"x": "y"}), "CREATE", broken)
    assert (d.allowed, d.code) == (False, 400)
    assert d.message == "Pod/ns/p: gpushare could not evaluate the GPU-sharing rules (RuntimeError: boom)"


def test_state_reuses_context_until_something_changes() -> None:
    state = ContextCache()
    node = node_info({"metadata": {"name": "n1", "labels": {"a": "b"}}})
    same = state.node(node)
    nodes = {"n1": [same]}
    ctx1 = state.context({}, nodes)
    # A heartbeat: an equal NodeInfo comes back as the stored object, the context is reused.
    nodes = {"n1": [state.node(node_info({"metadata": {"name": "n1", "labels": {"a": "b"}}}))]}
    assert state.context({}, nodes) is ctx1
    nodes = {"n1": [state.node(node_info({"metadata": {"name": "n1", "labels": {"a": "c"}}}))]}
    ctx2 = state.context({}, nodes)
    assert ctx2 is not ctx1 and ctx2.nodes[0].labels == {"a": "c"}
    assert state.context({}, {}).nodes == ()


def test_the_node_watch_feeds_the_context_and_heartbeats_keep_it() -> None:
    cache = ContextCache()
    n1 = {"metadata": {"name": "n1", "labels": {"a": "b"}}, "status": {"allocatable": {MEM: "16"}}}
    cache.node_event("ADDED", n1)
    cache.node_event("ADDED", {"metadata": {"name": "n2", "labels": {}}})
    ctx1 = cache.context({}, cache.fed)
    assert sorted(n.name for n in ctx1.nodes) == ["n1", "n2"]
    cache.node_event("MODIFIED", copy.deepcopy(n1))  # a heartbeat: nothing the rules read changed
    assert cache.context({}, cache.fed) is ctx1
    cache.node_event("MODIFIED", {**n1, "metadata": {"name": "n1", "labels": {"a": "c"}}})
    ctx2 = cache.context({}, cache.fed)
    assert ctx2 is not ctx1 and {n.name: dict(n.labels) for n in ctx2.nodes}["n1"] == {"a": "c"}
    cache.node_event("DELETED", {"metadata": {"name": "n2"}})
    assert [n.name for n in cache.context({}, cache.fed).nodes] == ["n1"]
    cache.node_event("ADDED", {"metadata": {"name": "n3"}})
    cache.nodes_listed({"n3"})  # a fresh list after a 410: n1 is gone
    assert [n.name for n in cache.context({}, cache.fed).nodes] == ["n3"]


def test_a_review_reads_one_number_for_the_nodes_and_sees_every_pool_change() -> None:
    """The context is keyed on the fed nodes' version (no scan of every node per review): a
    heartbeat leaves the version alone, a change bumps it, and a pool added or removed in the
    index rebuilds the context even when no node changed."""
    cache = ContextCache()
    n1 = {"metadata": {"name": "n1", "labels": {"np": "a"}}, "status": {"allocatable": {MEM: "16"}}}
    cache.node_event("ADDED", n1)
    version = cache.fed_version
    cache.node_event("MODIFIED", copy.deepcopy(n1))
    assert cache.fed_version == version
    cache.node_event("MODIFIED", {**n1, "metadata": {"name": "n1", "labels": {"np": "b"}}})
    assert cache.fed_version == version + 1
    cache.node_event("DELETED", {"metadata": {"name": "absent"}})  # nothing to forget
    assert cache.fed_version == version + 1
    ctx1 = cache.context({}, cache.fed)
    index = {None: [_nvidia_pool("p")]}
    ctx2 = cache.context(index, cache.fed)
    assert ctx2 is not ctx1 and [p.name for p in ctx2.pools] == ["p"]
    assert cache.context(index, cache.fed) is ctx2
    assert cache.context({}, cache.fed).pools == ()


def test_an_index_of_pool_bodies_is_parsed_once_per_version() -> None:
    """``gpushare run --webhook`` reads the operator's index of pool bodies (one index of the CRD
    per process): each body is parsed once per resourceVersion (the context is reused while none
    changes), an edited pool is read again, and a body that is no valid pool is left out."""
    cache = ContextCache()

    def body(name: str, version: str, replicas: int = 4) -> dict[str, Any]:
        return {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name, "resourceVersion": version},
            "spec": {
                "nodeSelector": {"matchLabels": {"np": name}},
                "nvidia": {"strategy": "TimeSlicing", "replicas": replicas},
            },
        }

    index = {"p": [body("p", "1")], "bad": [{"metadata": {"name": "bad", "resourceVersion": "1"}, "spec": 3}]}
    ctx1 = cache.context(index, cache.fed)
    assert [p.name for p in ctx1.pools] == ["p"]
    assert (
        cache.context({"p": [body("p", "1")], "bad": index["bad"]}, cache.fed) is ctx1
    )  # a copy, same version
    ctx2 = cache.context({"p": [body("p", "2", replicas=8)]}, cache.fed)
    assert ctx2 is not ctx1
    (pool,) = ctx2.pools
    assert pool.spec.nvidia is not None and pool.spec.nvidia.replicas == 8
    assert cache.context({}, cache.fed).pools == ()
    assert cache._bodies == {}  # the deleted pools' parsed bodies are forgotten


def test_webhook_options_from_args() -> None:
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    opts = webhook_options(parser.parse_args(["--webhook", "--webhook-local", "--webhook-port", "9999"]))
    assert opts.local and opts.port == 9999 and opts.addr == "127.0.0.1"
    assert opts.webhook_settings("Q0E=").url_base == "https://127.0.0.1:9999"
    assert opts.webhook_settings(None).url_base == "https://127.0.0.1:9999"
    service = webhook_options(parser.parse_args(["--webhook", "--webhook-failure-policy", "Ignore"]))
    assert service.webhook_settings(None).url_base is None and service.failure_policy == "Ignore"
    with pytest.raises(ValueError, match=r"must be 1\.\.5"):
        webhook_options(parser.parse_args(["--webhook-timeout", "30"]))


def test_failure_policy_defaults_fail_in_a_cluster_and_ignore_in_local_mode() -> None:
    """A development run killed before its cleanup must not leave a fail-closed configuration
    pointing at 127.0.0.1; `--webhook-failure-policy Fail` still tests the fail-closed behaviour."""
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    policy = {
        argv: webhook_options(parser.parse_args(["--webhook", *argv])).failure_policy
        for argv in [(), ("--webhook-local",), ("--webhook-local", "--webhook-failure-policy", "Fail")]
    }
    assert policy == {
        (): "Fail",
        ("--webhook-local",): "Ignore",
        ("--webhook-local", "--webhook-failure-policy", "Fail"): "Fail",
    }


# --- the HTTPS server on malformed input (no apiserver needed) ------------------------------------


async def _fake_kopf(review: Any, **_: Any) -> dict[str, Any]:
    if review["request"]["resource"]["resource"] == "widgets":
        raise KeyError("no handlers for widgets")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }


def _post(port: int, cafile: Path, payload: bytes) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=str(cafile))
    req = urllib.request.Request(f"https://127.0.0.1:{port}/validate-pods", data=payload, method="POST")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


async def test_server_answers_malformed_reviews_with_4xx(tmp_path: Path, unused_tcp_port: int) -> None:
    bundle = tls.renew(None, SANS, dt.datetime.now(dt.UTC))
    files, _ = tls.write_files(bundle, tmp_path)
    calls: list[str] = []

    async def prepare() -> None:
        calls.append("prepare")

    async def on_listening(cfg: Any) -> None:
        calls.append(cfg["url"])

    server = GPUShareWebhookServer(
        addr="127.0.0.1", port=unused_tcp_port, host="127.0.0.1", certfile=str(files.certfile),
        pkeyfile=str(files.keyfile), cafile=str(files.cafile), prepare=prepare, on_listening=on_listening,
    )  # fmt: skip
    # (an async generator, typed AsyncIterator like Kopf's WebhookServer.__call__: aclose() exists)
    gen = cast("AsyncGenerator[kopf.WebhookClientConfig, None]", server(_fake_kopf))  # type: ignore[arg-type]
    cfg = await gen.__anext__()
    try:
        assert calls == ["prepare", f"https://127.0.0.1:{unused_tcp_port}"]
        assert base64.b64decode(cast(str, cfg["caBundle"])) == bundle.ca_bundle
        cases = [
            (b"{", 400, None),
            (b"[]", 400, None),
            (json.dumps({"kind": "AdmissionReview", "request": {}}).encode(), 400, None),
            (json.dumps(_review(userInfo=None)).encode(), 200, 400),
            (
                json.dumps(_review(resource={"group": "x", "version": "v1", "resource": "widgets"})).encode(),
                200,
                400,
            ),
            (json.dumps(_review()).encode(), 200, None),
            (b'{"kind": "AdmissionReview", "request": ' + b"[" * 1200 + b"]" * 1200 + b"}", 400, None),
            (b"[" * 100_000 + b"]" * 100_000, 400, None),
        ]
        for payload, status, code in cases:
            got, body = await asyncio.to_thread(_post, unused_tcp_port, files.cafile, payload)
            assert got == status, (payload, body)
            if status == 200 and code is not None:
                assert body["response"] == {
                    "uid": "u",
                    "allowed": False,
                    "status": {"code": code, "message": body["response"]["status"]["message"]},
                }
                assert (
                    "gpushare webhook" in body["response"]["status"]["message"]
                    or "malformed" in body["response"]["status"]["message"]
                )
            elif status == 200:
                assert body["response"]["allowed"] is True
    finally:
        await gen.aclose()


def test_manifest_is_valid_yaml_with_service_and_configuration() -> None:
    docs = list(yaml.safe_load_all(render_manifest()))
    assert [d["kind"] for d in docs] == ["Service", "ValidatingWebhookConfiguration"]
    assert docs[0]["spec"]["ports"][0]["targetPort"] == 9443


async def test_mounted_certificate_files_mode(tmp_path: Path) -> None:
    """cert-manager: the server uses the mounted files and caBundle comes from their ca.crt."""
    bundle = tls.renew(None, SANS, dt.datetime.now(dt.UTC))
    tls.write_files(bundle, tmp_path)
    options = WebhookOptions(local=True, cert_files_dir=tmp_path, manage_configuration=False)
    certs = CertLifecycle(options)
    server = build_server(options, ContextCache(), certs)
    assert (server.certfile, server.pkeyfile, server.cafile) == tuple(
        str(tmp_path / n) for n in ("tls.crt", "tls.key", "ca.crt")
    )
    assert server.prepare is not None and server.on_listening is not None
    await server.prepare()  # no API client needed: nothing is read from or written to a Secret
    assert certs.ca_bundle == bundle.ca_bundle_b64
    await server.on_listening({"url": "https://127.0.0.1:1"})  # configuration management is off


def test_deleted_nodes_are_forgotten() -> None:
    state = ContextCache()
    a = state.node(node_info({"metadata": {"name": "a"}}))
    b = state.node(node_info({"metadata": {"name": "b"}}))
    state.context({}, {"a": [a], "b": [b]})
    state.context({}, {"a": [a]})
    assert state.node(node_info({"metadata": {"name": "b"}})) is not b


def _count(kind: str) -> float:
    from gpushare import metrics

    value = metrics.REGISTRY.get_sample_value(
        "gpushare_admission_requests_total", {"kind": kind, "decision": "allowed", "rule": "none"}
    )
    return value or 0.0


@pytest.mark.parametrize(
    ("handler_id", "request_", "fast"),
    [
        pytest.param(
            "validate-pods", {"operation": "CREATE", "object": _pod({"cpu": "1"})}, True, id="plain-pod"
        ),
        pytest.param(
            "validate-pods", {"operation": "CREATE", "object": _pod({MEM: "2"})}, False, id="gpu-pod"
        ),
        pytest.param(
            "validate-pods", {"operation": "UPDATE", "object": _pod({MEM: "2"})}, True, id="pod-update"
        ),
        pytest.param("validate-pods", {"operation": "CREATE", "object": None}, False, id="no-object"),
        pytest.param(
            "validate-gpusharepools",
            {"operation": "CREATE", "object": {"kind": "GPUSharePool"}},
            False,
            id="pool",
        ),
        pytest.param(
            "validate-widgets", {"operation": "CREATE", "object": _pod({"cpu": "1"})}, False, id="unknown-id"
        ),
    ],
)
def test_fast_allow(handler_id: str, request_: dict[str, Any], fast: bool) -> None:
    """Allowed before Kopf only when the handler would allow it without looking at state."""
    kind = TARGETS_BY_ID[handler_id].kind if handler_id in TARGETS_BY_ID else "Pod"
    before = _count(kind)
    target = TARGETS_BY_ID.get(handler_id, TARGETS_BY_ID["validate-pods"])
    resource = {"group": target.group, "version": target.version, "resource": target.plural}
    assert fast_allow(handler_id, {"request": {"resource": resource, **request_}}) is fast
    assert _count(kind) == before + (1 if fast else 0)


def test_fast_allow_needs_the_resource_of_the_handler() -> None:
    review = {"request": {"operation": "CREATE", "object": _pod({"cpu": "1"})}}
    review["request"]["resource"] = {"group": "x", "version": "v1", "resource": "widgets"}
    assert fast_allow("validate-pods", review) is False


async def test_configuration_errors_do_not_stop_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    async def forbidden(api: Any, settings_: WebhookSettings, **_: Any) -> str:
        calls.append(settings_.name)
        raise WebhookCertError("cannot create ValidatingWebhookConfiguration gpushare-webhook: 403 Forbidden")

    monkeypatch.setattr(lifecycle, "ensure_configuration", forbidden)
    options = WebhookOptions(cert_dir=tmp_path)
    certs = CertLifecycle(options, register_backoff=Backoff(attempts=5, base_delay=0.001))
    certs.api = object()  # type: ignore[assignment]
    server = build_server(options, ContextCache(), certs)
    assert server.on_listening is not None
    await server.on_listening({"url": "https://x"})
    assert calls == ["gpushare-webhook"] * 5
    assert "Could not update ValidatingWebhookConfiguration gpushare-webhook: cannot create" in caplog.text


# --- raw bodies: size and depth before parsing ----------------------------------------------------


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    ("raw", "deeper"),
    [
        pytest.param(_nested(MAX_REVIEW_DEPTH), False, id="at-the-limit"),
        pytest.param(_nested(MAX_REVIEW_DEPTH + 1), True, id="one-over"),
        pytest.param(b'{"a": "' + b"[" * 5000 + b'"}', False, id="brackets-in-a-string"),
        pytest.param(b"[" + b'"]",[' * 300 + b"]" * 301, True, id="closers-in-strings-do-not-hide-depth"),
        pytest.param(b"[" + b'"\\"]",[' * 300 + b"]" * 301, True, id="escaped-quotes"),
        pytest.param(json.dumps([{"a": [1, {"b": "x"}]}] * 3000).encode(), False, id="wide-not-deep"),
        pytest.param(b"[" * 5000, True, id="unbalanced-opens-count-as-depth"),
        pytest.param(b"]" * 5000 + b"[" * 100, False, id="unbalanced-closes-left-to-the-parser"),
        pytest.param(b'{"a":"' + b'\\"' * 24000 + b"[" * 201, False, id="an-unclosed-string-of-escapes"),
    ],
)
def test_deeper_than_without_parsing(raw: bytes, deeper: bool) -> None:
    assert deeper_than(raw, MAX_REVIEW_DEPTH) is deeper


def test_raw_review_problem_names_size_and_depth() -> None:
    assert raw_review_problem(b"{}") is None
    assert "more than 200 levels" in (raw_review_problem(_nested(1200)) or "")
    assert "bytes" in (raw_review_problem(b" " * 10, max_bytes=5) or "")


# --- answering without Kopf's per-request machinery ------------------------------------------------


def _pod_review(limits: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    obj = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": operation,
            "userInfo": {},
            "object": obj,
        },
    }


def test_respond_uses_the_rules_and_the_handed_over_indexes() -> None:
    state = ContextCache()
    review = _pod_review({MEM: "2", CORE: "33"})
    assert live_context(state) is None  # no indexes yet: Kopf answers
    state.pools_index, state.nodes_index = {}, {}
    context = live_context(state)
    assert context is not None
    answer = respond("validate-pods", review, context)
    assert answer is not None and answer["uid"] == "u" and answer["allowed"] is False
    assert answer["status"]["code"] == 422 and "GS001-core-percentage-step" in answer["status"]["message"]
    assert respond("validate-pods", _pod_review({"cpu": "1"}), context) == {
        "uid": "u",
        "allowed": True,
    }
    wrong = respond("validate-jobs", review, context)  # routed to the wrong handler: never allowed
    assert wrong is not None and wrong["allowed"] is False and wrong["status"]["code"] == 400
    assert "validate-jobs judges jobs.batch, not /v1/pods" in wrong["status"]["message"]
    assert respond("validate-pods", _pod_review({MEM: "2"}, "DELETE"), context) == {
        "uid": "u",
        "allowed": True,
    }


def test_a_workloads_identical_pods_are_judged_once_while_the_context_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CleanAllows: a pod that differs from an allowed one only in its identity is answered
    without the rules; a denial is judged every time (its message names the object); a changed
    context or spec is judged again."""
    pool = parse_pool(
        {"apiVersion": "gpushare.io/v1alpha1", "kind": "GPUSharePool", "metadata": {"name": "a"},
         "spec": {"nodeSelector": {"matchLabels": {"np": "a"}}}}
    )  # fmt: skip
    labelled = {"metadata": {"name": "n1", "labels": {"np": "a"}}, "status": {"allocatable": {MEM: "16"}}}
    node = node_info(labelled)
    ctx = Context.build([pool], [node])
    calls: list[str] = []
    real = evaluate

    def counted(obj: Any, *args: Any) -> Any:
        calls.append(str(obj["metadata"]["name"]))
        return real(obj, *args)

    monkeypatch.setattr(answer_module, "evaluate", counted)
    allows = answer_module.CleanAllows(size=2)

    def pod(name: str, limits: dict[str, str], uid: str) -> dict[str, Any]:
        review = _pod_review(limits)
        obj = review["request"]["object"]
        obj["metadata"].update(name=name, uid=uid, generateName="job-")
        obj["spec"]["nodeSelector"] = {"np": "a"}
        return review

    first = respond("validate-pods", pod("job-1", {MEM: "2"}, "u1"), ctx, allows=allows)
    assert first == {"uid": "u", "allowed": True}
    second = respond("validate-pods", pod("job-2", {MEM: "2"}, "u2"), ctx, allows=allows)
    assert second == first and calls == ["job-1"] and allows.hits == 1
    # The memo is looked up after the routing check: the same object sent to the Pods handler as
    # another resource is refused, never allowed from the memo.
    elsewhere = pod("job-2b", {MEM: "2"}, "u2b")
    elsewhere["request"]["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
    refused = respond("validate-pods", elsewhere, ctx, allows=allows)
    assert refused is not None and refused["allowed"] is False and refused["status"]["code"] == 400
    assert allows.hits == 1
    for name in ("bad-1", "bad-2"):  # denied: judged each time, each message names its pod
        denied = respond("validate-pods", pod(name, {MEM: "2", CORE: "33"}, name), ctx, allows=allows)
        assert denied is not None and denied["allowed"] is False and name in denied["status"]["message"]
    assert calls == ["job-1", "bad-1", "bad-2"]
    respond("validate-pods", pod("job-3", {MEM: "3"}, "u3"), ctx, allows=allows)  # another spec
    assert calls[-1] == "job-3"
    fresh = Context.build([pool], [node])  # the context changed: judged again
    respond("validate-pods", pod("job-4", {MEM: "2"}, "u4"), fresh, allows=allows)
    assert calls[-1] == "job-4" and allows.hits == 1


def test_the_clean_allow_key_tells_apart_what_json_tells_apart() -> None:
    """The memo's key: the same object less its identity gives the same key; any other difference
    in a value, even one ``==`` would not see (``1`` and ``True``, ``1`` and ``1.0``), or in the
    kind or operation, another key."""
    key = answer_module.CleanAllows.key
    pod: dict[str, Any] = {
        "metadata": {"name": "a", "uid": "1", "labels": {"x": "y"}},
        "spec": {"n": 1, "l": [1, "s"]},
    }
    same = copy.deepcopy(pod)
    same["metadata"].update(name="b", uid="2", generateName="job-", creationTimestamp="t", managedFields=[{}])
    assert key("Pod", "CREATE", pod) == key("Pod", "CREATE", same) is not None
    others = []
    for value in (True, 1.0, "1", None, [1]):
        other = copy.deepcopy(pod)
        other["spec"]["n"] = value
        others.append(key("Pod", "CREATE", other))
    relabelled = copy.deepcopy(pod)
    relabelled["metadata"]["labels"] = {"x": "z"}
    others += [key("Pod", "CREATE", relabelled), key("Pod", "UPDATE", pod), key("Job", "CREATE", pod)]
    assert len({key("Pod", "CREATE", pod), *others}) == len(others) + 1
    assert key("Pod", "CREATE", {"spec": {}}) is None  # no metadata: never memoized


def test_a_crash_in_the_rules_follows_the_failure_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in a rule is never a 500: Fail denies with code 400, Ignore allows with a warning."""

    def boom(*_: Any) -> Any:
        raise ZeroDivisionError("a rule bug")

    monkeypatch.setattr(answer_module, "evaluate", boom)
    review = _pod_review({MEM: "2"})
    denied = respond("validate-pods", review, EMPTY_CONTEXT)
    assert denied is not None and denied["allowed"] is False and denied["status"]["code"] == 400
    message = denied["status"]["message"]
    assert "could not evaluate the GPU-sharing rules (ZeroDivisionError: a rule bug)" in message
    allowed = respond("validate-pods", review, EMPTY_CONTEXT, failure_policy="Ignore")
    assert allowed is not None and allowed["allowed"] is True
    assert "allowed (failurePolicy Ignore)" in allowed["warnings"][0]
    # pools follow their own entry's policy (Ignore), whatever the workloads' is
    gsp = {"apiVersion": "gpushare.io/v1alpha1", "kind": "GPUSharePool", "metadata": {"name": "p"},
           "spec": {"nodeSelector": {"matchLabels": {"np": "a"}}}}  # fmt: skip
    pool = admit(TARGETS_BY_ID["validate-gpusharepools"], gsp, "CREATE", lambda: EMPTY_CONTEXT)
    assert pool.allowed and "allowed (failurePolicy Ignore)" in pool.warnings[0]


def test_via_kopf_leaves_every_review_to_kopf(tmp_path: Path) -> None:
    """``--webhook-via-kopf``: the server's direct path answers nothing (Kopf's handlers do)."""
    cache = ContextCache()
    cache.pools_index, cache.nodes_index = {}, {}
    review = _pod_review({MEM: "2", CORE: "33"})
    direct = WebhookOptions(cert_dir=tmp_path)
    via_kopf = WebhookOptions(cert_dir=tmp_path, direct=False)
    served = build_server(direct, cache, CertLifecycle(direct))
    context = live_context(cache)
    assert context is not None
    assert served.respond is not None and served.respond("validate-pods", review, context) is not None
    fallback = build_server(via_kopf, cache, CertLifecycle(via_kopf))
    assert fallback.respond is not None and fallback.respond("validate-pods", review, context) is None
    assert webhook_options(_run_parser().parse_args(["--webhook-via-kopf"])).direct is False


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    return parser


def test_a_pool_update_that_keeps_its_spec_is_allowed_even_while_it_overlaps() -> None:
    """The operator adds its cleanup finalizer to a pool (an UPDATE of metadata only): the rules
    judge the spec, so that update goes through even while the pool overlaps another (GP004);
    otherwise the pool could never be cleaned up when deleted. A changed spec is judged."""
    pools = TARGETS_BY_ID["validate-gpusharepools"]

    def pool(name: str, nodepool: str, **meta: Any) -> dict[str, Any]:
        return {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name, **meta},
            "spec": {"nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": nodepool}}},
        }

    other = parse_pool(pool("a", "np-1"))
    node = node_info({"metadata": {"name": "n1", "labels": {"alibabacloud.com/nodepool-id": "np-1"}}})
    ctx = Context.build([other], [node])
    overlapping = pool("b", "np-1")
    assert not admit(pools, overlapping, "CREATE", lambda: ctx).allowed  # GP004
    finalized = pool("b", "np-1", finalizers=["gpushare.io/cleanup"])
    assert admit(pools, finalized, "UPDATE", lambda: ctx, old=overlapping) == Decision(True)
    moved = pool("b", "np-1", labels={"x": "y"})
    moved["spec"]["placement"] = "spread"
    denied = admit(pools, moved, "UPDATE", lambda: ctx, old=overlapping)
    assert not denied.allowed and "GP004-pool-overlap" in denied.message
    assert not admit(pools, finalized, "UPDATE", lambda: ctx).allowed  # no old object: judged


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_failed_evaluation_counts_as_an_error_whatever_the_policy(policy: str) -> None:
    """A review whose evaluation raised (a bug, or Kopf's fallback failing) is answered as the
    failure policy says and counted as decision="error", which GPUShareWebhookErrors watches."""
    from gpushare import metrics
    from gpushare.webhook.answer import failure_response

    labels = {"kind": "Pod", "decision": "error", "rule": "none"}
    before = metrics.REGISTRY.get_sample_value("gpushare_admission_requests_total", labels) or 0.0
    review = {"request": {"uid": "u-1"}}
    answer = failure_response("validate-pods", review, RuntimeError("boom"), policy)
    assert answer["uid"] == "u-1" and answer["allowed"] is (policy == "Ignore")
    assert metrics.REGISTRY.get_sample_value("gpushare_admission_requests_total", labels) == before + 1
