"""Kopf wiring of the validating admission webhook (thin: decisions come from gpushare.admission).

``register(registry, options)`` adds, to a Kopf registry:

* two indexes, ``gpushare_admission_pools`` (valid GPUSharePools) and ``gpushare_admission_nodes``
  (``NodeInfo`` of every node), the live context of the rules;
* one validating handler per resource kind, with explicit ids that are also the URL paths
  (``validate-pods``, ``validate-deployments``, ... ``validate-gpusharepools``; see
  ``gpushare.admission.webhook_config.TARGETS``). Objects without any ``aliyun.com/gpu*``
  request are allowed at once, without touching the indexes. Denials are ``kopf.AdmissionError``
  with code 422 (invalid value) or 403 (policy); warnings go to the ``warnings`` list, which
  ``kubectl`` prints;
* a startup handler that serves HTTPS (``GPUShareWebhookServer``) with a certificate from the
  operator's Secret (or mounted files, e.g. from cert-manager) and keeps the shipped
  ValidatingWebhookConfiguration's caBundle current; a cleanup handler.

Kopf does not check ``operations`` at runtime (they only feed the webhook configuration), so each
handler checks the operation itself. Indexes may be empty during the first seconds after start:
the rules then resolve pools from the ACK labels alone (kopf-notes.md §1.6).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import logging
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import kopf
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare import metrics
from gpushare.admission import (
    DEFAULT_TABLE,
    EMPTY_CONTEXT,
    Context,
    KindTable,
    NodeInfo,
    evaluate,
    load_kinds,
    node_info,
    object_name,
    requests_gpu_sharing,
    table_with,
)
from gpushare.admission.review import CODE_BAD_REQUEST, Decision, decide
from gpushare.admission.webhook_config import (
    DEFAULT_CONFIGURATION_NAME,
    DEFAULT_NAMESPACE,
    DEFAULT_PORT,
    DEFAULT_SERVICE,
    MAX_TIMEOUT_SECONDS,
    TARGETS_BY_ID,
    FailurePolicy,
    WebhookSettings,
    WebhookTarget,
    targets_for,
)
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.handlers.webhook_server import GPUShareWebhookServer
from gpushare.k8s import webhook_certs as certs
from gpushare.k8s.client import load_configuration

logger = logging.getLogger("gpushare.webhook")
T = TypeVar("T")

POOLS_INDEX = "gpushare_admission_pools"
NODES_INDEX = "gpushare_admission_nodes"
DEFAULT_SECRET = "gpushare-webhook-tls"


@dataclass(frozen=True)
class WebhookOptions:
    """How the webhook is served and registered (``gpushare run --webhook ...``)."""

    #: Listen address; in a pod pass 0.0.0.0 (the apiserver connects through the Service).
    addr: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    #: Local/dev mode: the configuration uses ``https://<host>:<port>/<handler-id>``.
    local: bool = False
    host: str = "127.0.0.1"
    namespace: str = DEFAULT_NAMESPACE
    service: str = DEFAULT_SERVICE
    service_port: int = 443
    configuration: str = DEFAULT_CONFIGURATION_NAME
    #: Create/patch the ValidatingWebhookConfiguration (off: cert-manager's cainjector owns caBundle).
    manage_configuration: bool = True
    secret: str = DEFAULT_SECRET
    #: Where certificates from the Secret are written for the server.
    cert_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "gpushare-webhook")
    #: Mounted ``tls.crt``/``tls.key``/``ca.crt`` (cert-manager); no Secret is read or written.
    cert_files_dir: Path | None = None
    failure_policy: FailurePolicy = "Fail"
    timeout_seconds: int = MAX_TIMEOUT_SECONDS
    renew_before: dt.timedelta = certs.RENEW_BEFORE
    renew_check_seconds: float = 3600.0
    file_check_interval: float = 60.0
    kubeconfig: str | None = None
    context: str | None = None
    #: Answer reviews without Kopf's per-request machinery (same rules, same indexes).
    direct: bool = True
    #: Workload kinds whose pod templates are checked (built-ins plus ``--workload-kinds FILE``).
    kinds: KindTable = DEFAULT_TABLE

    @property
    def targets(self) -> tuple[WebhookTarget, ...]:
        return targets_for(self.kinds)

    def webhook_settings(self, ca_bundle: str | None) -> WebhookSettings:
        return WebhookSettings(
            name=self.configuration,
            namespace=self.namespace,
            service=self.service,
            service_port=self.service_port,
            url_base=f"https://{self.host}:{self.port}" if self.local else None,
            ca_bundle=ca_bundle,
            failure_policy=self.failure_policy,
            timeout_seconds=self.timeout_seconds,
            targets=None if self.kinds is DEFAULT_TABLE else self.targets,
        )


class AdmissionState:
    """The live context, rebuilt only when an indexed pool or node changes in a way that matters."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._pools: dict[str, GPUSharePool] = {}
        self._key: tuple[int, ...] | None = None
        self._context: Context = EMPTY_CONTEXT
        self.api: client.ApiClient | None = None
        self.ca_bundle: str | None = None
        #: Kopf's live index objects (handed over by the startup handler) for ``respond``.
        self.pools_index: Any = None
        self.nodes_index: Any = None

    def node(self, info: NodeInfo) -> NodeInfo:
        """The stored NodeInfo when equal (so heartbeats do not invalidate the context)."""
        old = self._nodes.get(info.name)
        if old == info and old is not None:
            return old
        self._nodes[info.name] = info
        return info

    def pool(self, pool: GPUSharePool) -> GPUSharePool:
        old = self._pools.get(pool.name)
        if old == pool and old is not None:
            return old
        self._pools[pool.name] = pool
        return pool

    def context(self, pools_index: Any, nodes_index: Any) -> Context:
        pools = _values(pools_index, GPUSharePool)
        nodes = _values(nodes_index, NodeInfo)
        key = (len(pools), *map(id, pools), *map(id, nodes))
        if key != self._key:
            self._context = Context.build(sorted(pools, key=lambda p: p.name), nodes)
            self._key = key
            if len(self._nodes) > len(nodes):  # forget deleted nodes
                alive = {n.name for n in nodes}
                self._nodes = {k: v for k, v in self._nodes.items() if k in alive}
        return self._context


def _values(index: Any, kind: type[T]) -> list[T]:
    if not isinstance(index, Mapping):
        return []
    out: list[T] = []
    for store in index.values():
        out.extend(v for v in store if isinstance(v, kind))
    return out


# --- the decision, shared by every handler ---------------------------------------------------------


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
    resource = request.get("resource") or {}
    if (resource.get("group"), resource.get("resource")) != (target.group, target.plural):
        return False  # a configuration routing something else here: let Kopf decide
    obj = request.get("object")
    if request.get("operation") in target.operations and (
        not isinstance(obj, Mapping) or requests_gpu_sharing(obj, table)
    ):
        return False
    _record(target.kind, Decision(True), time.perf_counter() - started)
    return True


def respond(
    handler_id: str,
    review: Mapping[str, Any],
    state: AdmissionState,
    targets: Mapping[str, WebhookTarget] = TARGETS_BY_ID,
    table: KindTable = DEFAULT_TABLE,
) -> dict[str, Any] | None:
    """The whole answer without Kopf's per-request machinery (memos, diffs, causes, handler
    bookkeeping: most of a request's CPU), from the same ``admit`` and the same index snapshot the
    Kopf handler would use. None (let Kopf answer) until the startup handler has handed over the
    indexes, or for a review routed to an unexpected resource."""
    if state.pools_index is None or state.nodes_index is None:
        return None
    target = targets.get(handler_id)
    if target is None:
        return None
    request = review.get("request") or {}
    resource = request.get("resource") or {}
    if (resource.get("group"), resource.get("resource")) != (target.group, target.plural):
        return None
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return None
    started = time.perf_counter()
    decision = admit(
        target,
        obj,
        request.get("operation"),
        lambda: state.context(state.pools_index, state.nodes_index),
        table,
    )
    _record(target.kind, decision, time.perf_counter() - started)
    _log(obj, decision, table)
    answer: dict[str, Any] = {"uid": request["uid"], "allowed": decision.allowed}
    if decision.warnings:
        answer["warnings"] = list(decision.warnings)
    if not decision.allowed:
        answer["status"] = {"code": decision.code, "message": decision.message}
    return answer


def _log(body: Mapping[str, Any], decision: Decision, table: KindTable = DEFAULT_TABLE) -> None:
    if decision.findings:
        logger.info(
            "%s %s: %s",
            "Admitted" if decision.allowed else "Denied",
            object_name(dict(body), table),
            ", ".join(sorted(set(decision.rules))),
        )


def _record(kind: str, decision: Decision, elapsed: float) -> None:
    label = "denied" if not decision.allowed else ("warned" if decision.warnings else "allowed")
    if decision.code == CODE_BAD_REQUEST and not decision.allowed and not decision.findings:
        label = "error"
    rules = sorted(set(decision.rules)) or ["none"]
    for rule in rules:
        metrics.ADMISSION_REQUESTS.labels(kind=kind, decision=label, rule=rule).inc()
    metrics.ADMISSION_SECONDS.labels(kind=kind, decision=label).observe(elapsed)


def _make_handler(
    target: WebhookTarget, state: AdmissionState, table: KindTable = DEFAULT_TABLE
) -> Callable[..., Coroutine[Any, Any, None]]:
    async def validate(body: kopf.Body, operation: str | None, warnings: list[str], **kwargs: Any) -> None:
        started = time.perf_counter()
        decision = admit(
            target,
            body,
            operation,
            lambda: state.context(kwargs.get(POOLS_INDEX), kwargs.get(NODES_INDEX)),
            table,
        )
        warnings.extend(decision.warnings)
        _record(target.kind, decision, time.perf_counter() - started)
        _log(body, decision, table)
        if not decision.allowed:
            raise kopf.AdmissionError(decision.message, code=decision.code)

    validate.__name__ = validate.__qualname__ = target.handler_id.replace("-", "_")
    return validate


# --- registration ----------------------------------------------------------------------------------


class _QuietDenials(logging.Filter):
    """Kopf logs every denial as an ERROR ("Webhook 'validate-pods' failed permanently: ...");
    a denial is the webhook working, and the handler already logged it at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Webhook 'validate-") and "failed permanently" in message)


_QUIET = _QuietDenials()


def register(registry: kopf.OperatorRegistry, options: WebhookOptions) -> AdmissionState:
    """Add the webhook's indexes, handlers, startup and cleanup to ``registry``."""
    state = AdmissionState()
    logging.getLogger("kopf.objects").addFilter(_QUIET)  # idempotent: the same filter object

    @kopf.index(c.GROUP, c.VERSION, c.PLURAL, id=POOLS_INDEX, registry=registry)
    def gpushare_admission_pools(body: kopf.Body, **_: Any) -> GPUSharePool | None:
        try:
            return state.pool(parse_pool(dict(body)))
        except PoolValidationError:
            return None

    @kopf.index("v1", "nodes", id=NODES_INDEX, registry=registry)
    def gpushare_admission_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeInfo]:
        return {name: state.node(node_info(dict(body)))}

    for target in options.targets:  # one handler per kind of the workload-kinds table, plus pools
        kopf.on.validate(
            group=target.group, plural=target.plural, id=target.handler_id,
            version=target.version if len(target.versions) <= 1 else None,  # None: every version
            operations=cast(tuple[Literal["CREATE", "UPDATE"], ...], target.operations),
            registry=registry,
        )(_make_handler(target, state, options.kinds))  # fmt: skip

    @kopf.on.startup(id="gpushare-webhook", registry=registry)
    async def webhook_startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        state.pools_index = kwargs.get(POOLS_INDEX)  # live views, updated in place by Kopf
        state.nodes_index = kwargs.get(NODES_INDEX)
        cfg = await load_configuration(options.kubeconfig, context=options.context)
        state.api = client.ApiClient(configuration=cfg)
        settings.admission.managed = None  # the project ships the configuration (kopf-notes §1.9)
        settings.admission.server = build_server(options, state)

    @kopf.on.cleanup(id="gpushare-webhook-cleanup", registry=registry)
    async def webhook_cleanup(**_: Any) -> None:
        if state.api is not None:
            await state.api.close()
            state.api = None

    return state


def build_server(options: WebhookOptions, state: AdmissionState) -> GPUShareWebhookServer:
    if options.cert_files_dir is not None:
        files = certs.CertFiles(
            options.cert_files_dir / certs.KEY_CERT,
            options.cert_files_dir / certs.KEY_KEY,
            options.cert_files_dir / certs.KEY_CA,
        )
    else:
        files = certs.CertFiles(
            options.cert_dir / certs.KEY_CERT,
            options.cert_dir / certs.KEY_KEY,
            options.cert_dir / certs.KEY_CA,
        )
    sans = certs.serving_sans(options.webhook_settings(None), [options.host] if options.local else [])

    async def refresh_certificates() -> None:
        if options.cert_files_dir is not None:
            state.ca_bundle = base64.b64encode(files.cafile.read_bytes()).decode("ascii")
            return
        assert state.api is not None
        bundle, why = await certs.ensure_certificates(
            state.api, options.namespace, options.secret, sans, renew_before=options.renew_before
        )
        if why:
            logger.info("Wrote webhook certificate Secret %s/%s: %s", options.namespace, options.secret, why)
        _, changed = certs.write_files(bundle, options.cert_dir)
        if changed:
            logger.info("Wrote webhook certificate files to %s", options.cert_dir)
        state.ca_bundle = bundle.ca_bundle_b64

    async def refresh_configuration() -> None:
        if not options.manage_configuration or state.api is None:
            return
        result = await certs.ensure_configuration(state.api, options.webhook_settings(state.ca_bundle))
        if result != "unchanged":
            logger.info("ValidatingWebhookConfiguration %s %s", options.configuration, result)

    async def prepare() -> None:
        await _retry("prepare the webhook certificate", refresh_certificates)

    async def on_listening(_: kopf.WebhookClientConfig) -> None:
        try:  # not fatal: the server keeps answering and the hourly check tries again
            await _retry("register the webhook configuration", refresh_configuration, attempts=5)
        except (certs.WebhookCertError, OSError, client.ApiException) as exc:
            logger.error("Could not update ValidatingWebhookConfiguration %s: %s", options.configuration, exc)

    async def background() -> None:
        while True:
            await asyncio.sleep(options.renew_check_seconds)
            try:
                await refresh_certificates()
                await refresh_configuration()
            except (certs.WebhookCertError, OSError, client.ApiException) as exc:
                logger.warning("Webhook certificate check failed (will retry): %s", exc)

    targets = {t.handler_id: t for t in options.targets}
    return GPUShareWebhookServer(
        fast_allow=lambda handler_id, review: fast_allow(handler_id, review, targets, options.kinds),
        respond=lambda handler_id, review: (
            respond(handler_id, review, state, targets, options.kinds) if options.direct else None
        ),
        addr=options.addr,
        port=options.port,
        host=options.host if options.local else None,
        certfile=str(files.certfile),
        pkeyfile=str(files.keyfile),
        cafile=str(files.cafile),
        file_check_interval=options.file_check_interval,
        prepare=prepare,
        on_listening=on_listening,
        background=background,
    )


async def _retry(what: str, fn: Callable[[], Coroutine[Any, Any, None]], attempts: int = 30) -> None:
    delay = 0.5
    for attempt in range(1, attempts + 1):
        try:
            await fn()
        except (certs.WebhookCertError, OSError, client.ApiException) as exc:
            if attempt == attempts:
                raise
            logger.warning("Could not %s (attempt %d, retrying): %s", what, attempt, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        else:
            return


# --- command line ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--webhook*`` options of ``gpushare run``."""
    g = parser.add_argument_group("admission webhook")
    g.add_argument("--webhook", action="store_true", help="serve the validating admission webhook")
    g.add_argument("--webhook-port", type=int, default=DEFAULT_PORT, help="HTTPS port (default 9443)")
    g.add_argument("--webhook-addr", default="127.0.0.1", help="listen address (0.0.0.0 in a pod)")
    g.add_argument(
        "--webhook-local", action="store_true",
        help="local/dev mode: register https://127.0.0.1:PORT/<handler-id> instead of the Service",
    )  # fmt: skip
    g.add_argument(
        "--webhook-namespace", default=DEFAULT_NAMESPACE, help="operator namespace (Secret, Service)"
    )
    g.add_argument("--webhook-service", default=DEFAULT_SERVICE, help="Service in front of the webhook")
    g.add_argument("--webhook-configuration", default=DEFAULT_CONFIGURATION_NAME, metavar="NAME")
    g.add_argument(
        "--webhook-secret", default=DEFAULT_SECRET, help="Secret holding the CA and serving certificate"
    )
    g.add_argument("--webhook-cert-dir", type=Path, help="where the serving certificate files are written")
    g.add_argument(
        "--webhook-cert-files", type=Path, metavar="DIR",
        help="use mounted tls.crt/tls.key/ca.crt (cert-manager) instead of the Secret",
    )  # fmt: skip
    g.add_argument(
        "--webhook-no-configuration", action="store_true",
        help="leave the ValidatingWebhookConfiguration alone (cert-manager's cainjector sets caBundle)",
    )  # fmt: skip
    g.add_argument("--webhook-failure-policy", choices=("Fail", "Ignore"), default="Fail")
    g.add_argument("--webhook-timeout", type=int, default=MAX_TIMEOUT_SECONDS, help="timeoutSeconds, 1..5")
    g.add_argument(
        "--webhook-via-kopf", action="store_true",
        help="answer every review through Kopf's handler machinery (slower; for comparison)",
    )  # fmt: skip
    g.add_argument(
        "--workload-kinds", type=Path, metavar="FILE",
        help="YAML list of extra workload kinds and where their pod templates are (README: workload kinds)",
    )  # fmt: skip


def options_from_args(args: argparse.Namespace) -> WebhookOptions:
    if not 1 <= args.webhook_timeout <= MAX_TIMEOUT_SECONDS:
        raise ValueError(f"--webhook-timeout {args.webhook_timeout}: must be 1..{MAX_TIMEOUT_SECONDS}")
    base = WebhookOptions()
    return WebhookOptions(
        addr=args.webhook_addr,
        port=args.webhook_port,
        local=args.webhook_local,
        namespace=args.webhook_namespace,
        service=args.webhook_service,
        configuration=args.webhook_configuration,
        manage_configuration=not args.webhook_no_configuration,
        secret=args.webhook_secret,
        cert_dir=args.webhook_cert_dir or base.cert_dir,
        cert_files_dir=args.webhook_cert_files,
        failure_policy=args.webhook_failure_policy,
        timeout_seconds=args.webhook_timeout,
        direct=not getattr(args, "webhook_via_kopf", False),
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        kinds=_kinds_from(getattr(args, "workload_kinds", None)),
    )


def _kinds_from(path: Path | None) -> KindTable:
    """The table with the kinds of ``--workload-kinds FILE`` (ValueError, one line, when unusable)."""
    if path is None:
        return DEFAULT_TABLE
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--workload-kinds {path}: cannot read: {exc}") from None
    return table_with(load_kinds(text, f"--workload-kinds {path}"))


__all__ = [
    "NODES_INDEX",
    "POOLS_INDEX",
    "AdmissionState",
    "WebhookOptions",
    "add_arguments",
    "admit",
    "build_server",
    "options_from_args",
    "register",
]
