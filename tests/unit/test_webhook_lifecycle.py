"""The webhook certificate's lifecycle against an in-memory API (conflicts injected), the API layer's
mapping of statuses, and the Kopf log filter on Kopf's real admission path."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import references
from kopf._core.engines import indexing
from kopf._core.engines.admission import serve_admission_request
from kopf._core.reactor import inventory

from gpushare import metrics
from gpushare.admission.gate import (
    GatePatch,
    check_due,
    condition,
    gate_of,
    gate_patch,
    gate_wanted,
    is_nvidia_pool,
)
from gpushare.admission.webhook_config import TARGETS, WebhookSettings, build_configuration
from gpushare.k8s import ApiError, webhook_api
from gpushare.k8s.retry import Backoff, Conflict
from gpushare.k8s.webhook_api import StoredSecret, WebhookCertError
from gpushare.webhook import gate as gate_module
from gpushare.webhook import lifecycle, tls
from gpushare.webhook.gate import GateOutcome, NvidiaGate
from gpushare.webhook.lifecycle import CertLifecycle, configuration_patch
from gpushare.webhook.options import WebhookOptions
from gpushare.webhook.registration import Denied, QuietDenials, register

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
SANS = ["127.0.0.1", "localhost"]
FAST = Backoff(attempts=5, base_delay=0.001)


class FakeApi:
    """The functions of ``gpushare.k8s.webhook_api`` over dicts; ``conflicts`` writes lose a race
    (another replica's write lands first, as ``rival`` says)."""

    def __init__(self) -> None:
        self.secrets: dict[str, StoredSecret] = {}
        self.configurations: dict[str, dict[str, Any]] = {}
        self.conflicts = 0
        self.rival: dict[str, str] | None = None
        self.writes: list[str] = []
        self.version = 0

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    async def read_secret(self, api: Any, namespace: str, name: str) -> StoredSecret | None:
        return self.secrets.get(f"{namespace}/{name}")

    async def write_secret(
        self,
        api: Any,
        namespace: str,
        name: str,
        data: Mapping[str, str],
        resource_version: str | None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        key = f"{namespace}/{name}"
        if self.conflicts:
            self.conflicts -= 1
            if self.rival is not None:
                self.secrets[key] = StoredSecret(dict(self.rival), self._next())
            raise Conflict(f"cannot write Secret {key}: 409 Conflict")
        current = self.secrets.get(key)
        assert (current.resource_version if current else None) == resource_version
        self.secrets[key] = StoredSecret(dict(data), self._next(), dict(labels or {}))
        self.writes.append(key)

    async def delete_secret(self, api: Any, namespace: str, name: str) -> None:
        self.secrets.pop(f"{namespace}/{name}", None)
        self.writes.append(f"delete {namespace}/{name}")

    async def delete_configuration(self, api: Any, name: str) -> None:
        self.configurations.pop(name, None)
        self.writes.append(f"delete {name}")

    async def read_configuration(self, api: Any, name: str) -> dict[str, Any] | None:
        found = self.configurations.get(name)
        return copy.deepcopy(found) if found is not None else None

    async def create_configuration(self, api: Any, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        if self.conflicts:
            self.conflicts -= 1
            self.configurations[name] = _stored(body, self._next())
            raise Conflict(f"cannot create ValidatingWebhookConfiguration {name}: 409 Conflict")
        assert name not in self.configurations
        self.configurations[name] = _stored(body, self._next())
        self.writes.append(f"create {name}")

    async def patch_configuration(self, api: Any, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
        current = self.configurations[name]
        if self.conflicts:
            self.conflicts -= 1
            current["metadata"]["resourceVersion"] = self._next()
            raise Conflict(f"cannot patch ValidatingWebhookConfiguration {name}: 422 Unprocessable Entity")
        test, *rest = ops
        assert test == {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": current["metadata"]["resourceVersion"],
        }
        for op in rest:
            _apply(current, op)
        current["metadata"]["resourceVersion"] = self._next()
        self.writes.append(f"patch {name}")


def _stored(body: Mapping[str, Any], version: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(body))
    out["metadata"]["resourceVersion"] = version
    return out


def _apply(doc: dict[str, Any], op: Mapping[str, Any]) -> None:
    """The JSON-patch ops ``configuration_patch`` writes: add/replace under /webhooks."""
    parts = op["path"].strip("/").split("/")
    target: Any = doc
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last = parts[-1]
    if isinstance(target, list):
        if last == "-":
            target.append(op["value"])
        else:
            target[int(last)] = op["value"]
    else:
        target[last] = op["value"]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = FakeApi()
    monkeypatch.setattr(lifecycle, "webhook_api", api)
    return api


# --- the Secret: create, keep, renew, lose a race -------------------------------------------------


async def test_certificates_are_created_once_then_kept(fake: FakeApi) -> None:
    bundle, why = await lifecycle.ensure_certificates(None, "ops", "tls", SANS, now=NOW)  # type: ignore[arg-type]
    assert why == "no certificate yet" and fake.writes == ["ops/tls"]
    again, why2 = await lifecycle.ensure_certificates(None, "ops", "tls", SANS, now=NOW)  # type: ignore[arg-type]
    assert (again, why2) == (bundle, None) and fake.writes == ["ops/tls"]
    later = NOW + dt.timedelta(days=340)  # inside RENEW_BEFORE of the serving certificate's expiry
    renewed, why3 = await lifecycle.ensure_certificates(None, "ops", "tls", SANS, now=later)  # type: ignore[arg-type]
    assert why3 is not None and "serving certificate expires" in why3
    assert renewed.ca_cert == bundle.ca_cert and renewed.cert != bundle.cert
    assert fake.writes == ["ops/tls", "ops/tls"]


async def test_a_replica_that_loses_the_race_serves_the_winners_certificate(fake: FakeApi) -> None:
    winner = tls.renew(None, SANS, NOW)
    fake.conflicts, fake.rival = 1, tls.secret_data(winner)
    bundle, why = await lifecycle.ensure_certificates(None, "ops", "tls", SANS, now=NOW, backoff=FAST)  # type: ignore[arg-type]
    assert (bundle, why) == (winner, None)  # read again after the 409: nothing left to write
    assert fake.writes == []


async def test_a_secret_that_keeps_changing_is_an_error_naming_it(fake: FakeApi) -> None:
    fake.conflicts = 99
    with pytest.raises(WebhookCertError, match=r"Secret ops/tls: kept changing under us \(5 attempts\)"):
        await lifecycle.ensure_certificates(None, "ops", "tls", SANS, now=NOW, backoff=FAST)  # type: ignore[arg-type]
    assert fake.conflicts == 94


# --- the configuration: create, patch only what differs, replan ----------------------------------


def test_configuration_patch_service_mode_touches_only_the_ca_bundle() -> None:
    shipped = _stored(build_configuration(WebhookSettings(name="wh")), "7")
    for hook in shipped["webhooks"]:
        hook["timeoutSeconds"] = 2  # the administrator's edit
    ops = configuration_patch(shipped, WebhookSettings(name="wh", ca_bundle="Q0E="))
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert {op["path"] for op in ops[1:]} == {
        f"/webhooks/{i}/clientConfig/caBundle" for i in range(len(shipped["webhooks"]))
    }
    for op in ops[1:]:
        _apply(shipped, op)
    assert configuration_patch(shipped, WebhookSettings(name="wh", ca_bundle="Q0E=")) == []
    assert all(h["timeoutSeconds"] == 2 for h in shipped["webhooks"])


def test_configuration_patch_local_mode_restores_and_adds_entries() -> None:
    settings = WebhookSettings(name="wh", url_base="https://127.0.0.1:9443")
    stored = _stored(build_configuration(settings), "3")
    assert configuration_patch(stored, settings) == []
    del stored["webhooks"][1]["matchConditions"]
    removed = stored["webhooks"].pop()
    ops = configuration_patch(stored, settings)
    assert [op["op"] for op in ops] == ["test", "replace", "add"]
    assert ops[1]["path"] == "/webhooks/1" and ops[2] == {
        "op": "add",
        "path": "/webhooks/-",
        "value": removed,
    }


async def test_configuration_is_created_patched_and_left_alone(fake: FakeApi) -> None:
    settings = WebhookSettings(name="wh", ca_bundle="Q0E=")
    assert await lifecycle.ensure_configuration(None, settings) == "created"  # type: ignore[arg-type]
    assert await lifecycle.ensure_configuration(None, settings) == "unchanged"  # type: ignore[arg-type]
    rotated = WebhookSettings(name="wh", ca_bundle="TkVX")
    assert await lifecycle.ensure_configuration(None, rotated) == "patched"  # type: ignore[arg-type]
    assert {h["clientConfig"]["caBundle"] for h in fake.configurations["wh"]["webhooks"]} == {"TkVX"}
    assert fake.writes == ["create wh", "patch wh"]


async def test_configuration_conflicts_replan_without_recursion(fake: FakeApi) -> None:
    settings = WebhookSettings(name="wh", ca_bundle="Q0E=")
    fake.conflicts = 1  # another replica creates it first: read it, it is already right
    assert await lifecycle.ensure_configuration(None, settings, backoff=FAST) == "unchanged"  # type: ignore[arg-type]
    fake.conflicts = 2  # the resourceVersion moves twice under the patch
    rotated = WebhookSettings(name="wh", ca_bundle="TkVX")
    assert await lifecycle.ensure_configuration(None, rotated, backoff=FAST) == "patched"  # type: ignore[arg-type]
    fake.conflicts = 99
    with pytest.raises(WebhookCertError, match="ValidatingWebhookConfiguration wh: kept changing under us"):
        await lifecycle.ensure_configuration(None, settings, backoff=FAST)  # type: ignore[arg-type]


# --- CertLifecycle over the server's hooks ---------------------------------------------------------


async def test_lifecycle_prepares_files_and_registers_the_ca_bundle(fake: FakeApi, tmp_path: Path) -> None:
    options = WebhookOptions(local=True, cert_dir=tmp_path, namespace="ops", configuration="wh")
    certs = CertLifecycle(options)
    assert certs.files == tls.CertFiles.under(tmp_path)
    assert certs.sans == ["127.0.0.1", "localhost"]
    certs.api = object()  # type: ignore[assignment]
    await certs.prepare()
    stored = tls.bundle_from_secret_data(fake.secrets[f"ops/{options.secret}"].data)
    assert stored is not None and certs.files.certfile.read_bytes() == stored.cert
    assert certs.ca_bundle == stored.ca_bundle_b64
    await certs.on_listening({"url": "https://127.0.0.1:9443"})
    hooks = fake.configurations["wh"]["webhooks"]
    assert {h["clientConfig"]["url"].rsplit("/", 1)[0] for h in hooks} == {
        f"https://127.0.0.1:{options.port}"
    }


async def test_a_stopped_local_run_deletes_what_it_created(fake: FakeApi, tmp_path: Path) -> None:
    """`gpushare run --webhook --webhook-local` on exit: no configuration left pointing at its closed
    port (it would refuse GPU jobs), no Secret left without Helm's ownership metadata (it would fail
    a later `helm install`)."""
    options = WebhookOptions(local=True, cert_dir=tmp_path, namespace="ops", configuration="wh")
    certs = CertLifecycle(options)
    certs.api = object()  # type: ignore[assignment]
    await certs.prepare()
    await certs.on_listening({})
    assert fake.configurations["wh"]["metadata"]["labels"][lifecycle.LOCAL_LABEL] == "true"
    assert fake.secrets[f"ops/{options.secret}"].labels[lifecycle.LOCAL_LABEL] == "true"
    removed = await certs.remove_local()
    assert removed == ["ValidatingWebhookConfiguration wh", f"Secret ops/{options.secret}"]
    assert fake.configurations == {} and fake.secrets == {}


async def test_a_local_run_never_deletes_objects_it_did_not_create(fake: FakeApi, tmp_path: Path) -> None:
    # The chart's Secret and configuration (a local run against a Helm release) stay; so does
    # everything in Service mode.
    helm = {"app.kubernetes.io/managed-by": "Helm"}
    fake.secrets["ops/gpushare-webhook-tls"] = StoredSecret({}, "1", dict(helm))
    chart = build_configuration(WebhookSettings(name="wh"))
    chart["metadata"]["labels"].update(helm)
    fake.configurations["wh"] = _stored(chart, "2")
    local = CertLifecycle(WebhookOptions(local=True, cert_dir=tmp_path, namespace="ops", configuration="wh"))
    local.api = object()  # type: ignore[assignment]
    await local.prepare()  # renews the placeholder, keeping the chart's labels
    assert fake.secrets["ops/gpushare-webhook-tls"].labels["app.kubernetes.io/managed-by"] == "Helm"
    assert lifecycle.LOCAL_LABEL not in fake.secrets["ops/gpushare-webhook-tls"].labels
    assert await local.remove_local() == []
    service = CertLifecycle(WebhookOptions(cert_dir=tmp_path, namespace="ops", configuration="wh"))
    service.api = object()  # type: ignore[assignment]
    assert await service.remove_local() == []
    assert set(fake.configurations) == {"wh"} and set(fake.secrets) == {"ops/gpushare-webhook-tls"}


async def test_prepare_persists_until_the_api_answers(
    fake: FakeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    certs = CertLifecycle(WebhookOptions(cert_dir=tmp_path), prepare_backoff=FAST)
    certs.api = object()  # type: ignore[assignment]
    real = fake.read_secret
    failures = [WebhookCertError("cannot read Secret x: 503 Service Unavailable")] * 2

    async def flaky(*args: Any) -> StoredSecret | None:
        if failures:
            raise failures.pop()
        return await real(*args)

    fake.read_secret = flaky  # type: ignore[method-assign, assignment]
    await certs.prepare()
    assert certs.ca_bundle is not None and certs.files.keyfile.exists()
    assert caplog.text.count("Could not prepare the webhook certificate (attempt") == 2


async def test_background_check_survives_failures(fake: FakeApi, tmp_path: Path) -> None:
    certs = CertLifecycle(WebhookOptions(cert_dir=tmp_path, renew_check_seconds=0.001))
    certs.api = object()  # type: ignore[assignment]
    checked = asyncio.Event()
    calls = 0

    async def failing(*_: Any) -> None:
        nonlocal calls
        calls += 1
        if calls >= 3:
            checked.set()
        raise WebhookCertError("cannot read Secret: 403 Forbidden")

    fake.read_secret = failing  # type: ignore[assignment,method-assign]
    task = asyncio.create_task(certs.background())
    await asyncio.wait_for(checked.wait(), 10)
    assert not task.done()  # a failed check is logged; the loop goes on
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- the API layer: statuses become Conflict or WebhookCertError, each request is counted ----------


class _Rest:
    """The raw request layer's two calls used here: a Secret create and read."""

    def __init__(self, _: Any, failures: list[ApiError]) -> None:
        self.failures = failures

    async def create(self, url: str, body: Any) -> dict[str, Any]:
        assert url == "/api/v1/namespaces/ops/secrets"
        if self.failures:
            raise self.failures.pop(0)
        return {}

    async def get(self, url: str) -> dict[str, Any]:
        assert url == "/api/v1/namespaces/ops/secrets/tls"
        raise self.failures.pop(0)


async def test_api_layer_maps_statuses(monkeypatch: pytest.MonkeyPatch) -> None:
    failures: list[ApiError] = []
    monkeypatch.setattr("gpushare.k8s.webhook_api.Rest", lambda api: _Rest(api, failures))
    errors = metrics.API_ERRORS.labels(verb="create", resource="secrets", code="409")
    writes = metrics.API_WRITES.labels(verb="create", resource="secrets")
    e0, w0 = errors._value.get(), writes._value.get()
    failures[:] = [ApiError(status=409, reason="Conflict")]
    with pytest.raises(Conflict, match="cannot write Secret ops/tls: 409 Conflict"):
        await webhook_api.write_secret(None, "ops", "tls", {}, None)  # type: ignore[arg-type]
    failures[:] = [ApiError(status=403, reason="Forbidden")]
    with pytest.raises(WebhookCertError, match="cannot write Secret ops/tls: 403 Forbidden"):
        await webhook_api.write_secret(None, "ops", "tls", {}, None)  # type: ignore[arg-type]
    await webhook_api.write_secret(None, "ops", "tls", {}, None)  # type: ignore[arg-type]
    assert (errors._value.get() - e0, writes._value.get() - w0) == (1, 1)
    failures[:] = [ApiError(status=404, reason="Not Found")]
    assert await webhook_api.read_secret(None, "ops", "tls") is None  # type: ignore[arg-type]
    failures[:] = [ApiError(status=404, reason="Not Found")]  # a create in a missing namespace
    with pytest.raises(
        WebhookCertError,
        match=r"^cannot write Secret ops/tls: namespace ops does not exist \(kubectl create namespace ops\)$",
    ):
        await webhook_api.write_secret(None, "ops", "tls", {}, None)  # type: ignore[arg-type]


# --- Kopf's ERROR line for a denial, filtered by the exception, not by its wording ----------------

_BAD_POD = {
    "kind": "Pod",
    "apiVersion": "v1",
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {
        "nodeSelector": {"ack.node.gpu.schedule": "core_mem"},
        "containers": [
            {
                "name": "c",
                "resources": {"limits": {"aliyun.com/gpu-mem": "2", "aliyun.com/gpu-core.percentage": "33"}},
            }
        ],
    },
}


async def _through_kopf(registry: kopf.OperatorRegistry) -> dict[str, Any]:
    """One review through Kopf's own admission engine (as its webhook server calls it)."""
    insights = references.Insights()
    insights.webhook_resources.add(
        references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
    )
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "userInfo": {},
            "object": _BAD_POD,
        },
    }
    response = await serve_admission_request(
        review,  # type: ignore[arg-type]
        webhook="validate-pods",  # type: ignore[arg-type]
        settings=kopf.OperatorSettings(),
        registry=registry,
        insights=insights,
        memories=inventory.ResourceMemories(),
        memobase=kopf.Memo(),  # type: ignore[arg-type]
        indices=indexing.OperatorIndexers().indices,
    )
    return dict(response["response"])


def _kopf_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kopf.objects" and r.levelno >= logging.ERROR]


async def test_kopf_logs_no_error_for_a_denial(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    registry = kopf.OperatorRegistry()
    register(registry, WebhookOptions())
    answer = await _through_kopf(registry)
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert "GS001-core-percentage-step" in answer["status"]["message"]
    assert _kopf_errors(caplog) == []
    assert "Denied Pod/ns/p: GS001-core-percentage-step" in caplog.text  # our own INFO line


async def test_other_handler_failures_still_log_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    registry = kopf.OperatorRegistry()
    register(kopf.OperatorRegistry(), WebhookOptions())  # the filter is installed

    @kopf.on.validate("", "v1", "pods", id="validate-pods", registry=registry)
    def broken(**_: Any) -> None:
        raise kopf.AdmissionError("not a denial of ours", code=400)

    answer = await _through_kopf(registry)
    assert answer["allowed"] is False
    assert len(_kopf_errors(caplog)) == 1 and "not a denial of ours" in _kopf_errors(caplog)[0]


def test_filter_reads_the_exception_not_the_message() -> None:
    quiet = QuietDenials()

    def record(level: int, exc: BaseException | None) -> logging.LogRecord:
        info = (type(exc), exc, None) if exc is not None else None
        return logging.LogRecord("kopf.objects", level, __file__, 1, "reworded: %s", ("x",), info)

    assert quiet.filter(record(logging.ERROR, Denied("m", code=422))) is False
    assert quiet.filter(record(logging.ERROR, kopf.AdmissionError("m", code=422))) is True
    assert quiet.filter(record(logging.ERROR, None)) is True
    assert quiet.filter(record(logging.INFO, Denied("m", code=422))) is True
    try:
        raise Denied("m", code=422)
    except Denied:  # how Kopf logs it: inside its except clause, without exc_info
        assert quiet.filter(record(logging.ERROR, None)) is False


async def test_namespace_exists_is_false_only_on_404(monkeypatch: pytest.MonkeyPatch) -> None:
    """`gpushare run --webhook-local` stops with one line only when the namespace is surely missing."""
    answers: list[ApiError | None] = []

    class _Namespaces:
        def __init__(self, api: Any) -> None:
            pass

        async def get(self, url: str) -> dict[str, Any]:
            assert url == "/api/v1/namespaces/ops"
            answer = answers.pop(0)
            if answer is not None:
                raise answer
            return {"metadata": {"name": "ops"}}

    monkeypatch.setattr("gpushare.k8s.webhook_api.Rest", _Namespaces)
    answers[:] = [ApiError(status=404, reason="Not Found")]
    assert await webhook_api.namespace_exists(None, "ops") is False  # type: ignore[arg-type]
    answers[:] = [ApiError(status=403, reason="Forbidden")]  # in a pod: no namespace access
    assert await webhook_api.namespace_exists(None, "ops") is True  # type: ignore[arg-type]
    answers[:] = [None]
    assert await webhook_api.namespace_exists(None, "ops") is True  # type: ignore[arg-type]


# --- the NVIDIA gate: open while an NVIDIA pool exists, closed otherwise ---------------------------

ACK_POOL = {"metadata": {"name": "cgpu"}, "spec": {"nodeSelector": {"matchLabels": {"a": "b"}}}}
NVIDIA_POOL = {"metadata": {"name": "ts"}, "spec": {"nvidia": {"strategy": "TimeSlicing", "replicas": 4}}}


def _conditions(doc: Mapping[str, Any]) -> dict[str, str]:
    return {
        h["name"]: h["matchConditions"][0]["expression"] for h in doc["webhooks"] if "matchConditions" in h
    }


def test_the_shipped_configuration_sends_shared_gpus_but_not_whole_ones() -> None:
    shipped = _conditions(build_configuration(WebhookSettings()))
    pods = shipped["validate-pods.gpushare.io"]
    assert "'nvidia.com/gpu.shared' in" in pods and "'nvidia.com/gpu' in" not in pods
    for target in TARGETS:
        name = f"{target.handler_id}.gpushare.io"
        if name in shipped:
            assert (
                gate_of(build_configuration(WebhookSettings())["webhooks"][TARGETS.index(target)], target)
                is False
            )
            opened = condition(target, True)
            assert opened is not None and "'nvidia.com/gpu' in" in opened
            assert opened.startswith(shipped[name].removesuffix(")"))  # the closed condition, and more


def test_the_gate_is_wanted_while_an_nvidia_pool_exists() -> None:
    assert not gate_wanted([])
    assert not gate_wanted([ACK_POOL])
    assert gate_wanted([ACK_POOL, NVIDIA_POOL])
    deleting = {**NVIDIA_POOL, "metadata": {"name": "ts", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert gate_wanted([deleting])  # its nodes are NVIDIA-shared until its cleanup is done
    assert not is_nvidia_pool({"spec": {"nvidia": None}}) and not is_nvidia_pool({"spec": "junk"})


def test_gate_patch_opens_and_closes_only_our_conditions() -> None:
    stored = _stored(build_configuration(WebhookSettings(name="wh", ca_bundle="Q0E=")), "5")
    assert gate_patch(stored, False, TARGETS) == GatePatch()  # shipped closed: nothing to do
    opened = gate_patch(stored, True, TARGETS)
    assert opened.ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "5"}
    assert {op["op"] for op in opened.ops[1:]} == {"replace"}
    assert all(op["path"].endswith("/matchConditions/0/expression") for op in opened.ops[1:])
    assert len(opened.ops) - 1 == len([t for t in TARGETS if condition(t, True) is not None])
    before = copy.deepcopy(stored)
    for op in opened.ops[1:]:
        _apply(stored, op)
    assert _conditions(stored) == _conditions(build_configuration(WebhookSettings(), nvidia_gate=True))
    # only the expressions changed: caBundle, rules, selectors and the pools' entry are as they were
    for was, now in zip(before["webhooks"], stored["webhooks"], strict=True):
        assert {k: v for k, v in was.items() if k != "matchConditions"} == {
            k: v for k, v in now.items() if k != "matchConditions"
        }
    assert gate_patch(stored, True, TARGETS).ops == ()
    closed = gate_patch(stored, False, TARGETS)
    for op in closed.ops[1:]:
        _apply(stored, op)
    assert _conditions(stored) == _conditions(before)


def test_gate_patch_leaves_a_condition_it_did_not_write_and_says_so() -> None:
    stored = _stored(build_configuration(WebhookSettings(name="wh")), "5")
    jobs = next(h for h in stored["webhooks"] if h["name"] == "validate-jobs.gpushare.io")
    jobs["matchConditions"][0]["expression"] = "object != null"  # the administrator's
    del stored["webhooks"][0]["matchConditions"]  # pods: sent whole, nothing to gate
    patch = gate_patch(stored, True, TARGETS)
    assert patch.foreign == ("validate-jobs.gpushare.io",)
    paths = {op["path"] for op in patch.ops[1:]}
    assert "/webhooks/0/matchConditions/0/expression" not in paths
    index = stored["webhooks"].index(jobs)
    assert f"/webhooks/{index}/matchConditions/0/expression" not in paths and paths
    # entries that are not gpushare's (another tool's, same configuration) are never looked at
    stored["webhooks"].append({"name": "other.example.com", "matchConditions": [jobs["matchConditions"][0]]})
    assert gate_patch(stored, True, TARGETS).foreign == ("validate-jobs.gpushare.io",)


def test_local_mode_keeps_the_gate_the_operator_opened() -> None:
    settings = WebhookSettings(name="wh", url_base="https://127.0.0.1:9443")
    stored = _stored(build_configuration(settings), "3")
    for op in gate_patch(stored, True, TARGETS).ops[1:]:
        _apply(stored, op)
    assert configuration_patch(stored, settings) == []  # open stays open
    del stored["webhooks"][1]["matchConditions"]  # an entry to restore: restored closed
    ops = configuration_patch(stored, settings)
    assert [op["path"] for op in ops[1:]] == ["/webhooks/1"]
    assert gate_of(ops[1]["value"], TARGETS[1]) is False


def test_check_due_reads_on_a_change_or_after_the_resync() -> None:
    assert check_due(True, None, None, 0.0, 60.0)
    assert not check_due(True, True, 10.0, 30.0, 60.0)
    assert check_due(False, True, 10.0, 30.0, 60.0)
    assert check_due(True, True, 10.0, 70.0, 60.0)


@pytest.fixture
def gate_api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = FakeApi()
    monkeypatch.setattr(gate_module, "webhook_api", api)
    return api


async def test_the_operator_opens_and_closes_the_gate_once_per_change(
    gate_api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    keeper = NvidiaGate(None, "wh", TARGETS, resync=60.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert await keeper.sync([NVIDIA_POOL]) == GateOutcome("absent")  # no webhook installed
    gate_api.configurations["wh"] = _stored(build_configuration(WebhookSettings(name="wh")), "1")
    assert await keeper.sync([NVIDIA_POOL]) is None  # decided a moment ago: not due
    now[0] = 61.0
    with caplog.at_level(logging.INFO, logger="gpushare.webhook.gate"):
        assert await keeper.sync([ACK_POOL, NVIDIA_POOL]) == GateOutcome("opened")
    assert "NVIDIA gate opened on ValidatingWebhookConfiguration wh" in caplog.text
    assert await keeper.sync([ACK_POOL, NVIDIA_POOL]) is None  # every pool event: no read
    assert gate_api.writes == ["patch wh"]
    assert await keeper.sync([ACK_POOL]) == GateOutcome("closed")  # the last NVIDIA pool is gone
    hooks = gate_api.configurations["wh"]["webhooks"]
    assert all(gate_of(h, t) is not True for h, t in zip(hooks, TARGETS, strict=True))
    # a helm upgrade re-renders the closed condition while a pool exists: open again on the resync
    assert await keeper.sync([NVIDIA_POOL]) == GateOutcome("opened")
    stored = gate_api.configurations["wh"]
    gate_api.configurations["wh"] = _stored(build_configuration(WebhookSettings(name="wh")), "40")
    assert await keeper.sync([NVIDIA_POOL]) is None
    now[0] = 200.0
    assert await keeper.sync([NVIDIA_POOL]) == GateOutcome("opened")
    assert _conditions(gate_api.configurations["wh"]) == _conditions(stored)


async def test_a_gate_write_that_keeps_losing_is_logged_once_and_retried_later(
    gate_api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    keeper = NvidiaGate(None, "wh", TARGETS, resync=60.0, clock=lambda: now[0])  # type: ignore[arg-type]
    gate_api.configurations["wh"] = _stored(build_configuration(WebhookSettings(name="wh")), "1")
    gate_api.conflicts = 99
    with caplog.at_level(logging.WARNING, logger="gpushare.webhook.gate"):
        assert await keeper.sync([NVIDIA_POOL]) is None
        now[0] = 61.0
        assert await keeper.sync([NVIDIA_POOL]) is None
    assert caplog.text.count("Could not open the NVIDIA gate of ValidatingWebhookConfiguration wh") == 1
    gate_api.conflicts = 0
    assert await keeper.sync([NVIDIA_POOL]) is None  # not due yet
    now[0] = 130.0
    assert await keeper.sync([NVIDIA_POOL]) == GateOutcome("opened")
