"""Kopf wiring of the validating admission webhook (thin: decisions come from ``gpushare.admission``).

``register(registry, options)`` adds, to a Kopf registry:

* a Kopf index ``gpushare_admission_pools`` (valid GPUSharePools) and the webhook's own paged Node
  list-watch (``gpushare.k8s.watch.ListWatch``: ``NodeInfo`` of every node; not a Kopf index, which
  at thousands of nodes took minutes to list and held the operator's handlers until it had), the
  live context of the rules (``ContextCache``);
* one validating handler per resource kind, with explicit ids that are also the URL paths
  (``validate-pods``, ``validate-deployments``, ... ``validate-gpusharepools``; see
  ``gpushare.admission.webhook_config.TARGETS``). Objects that ask for no GPU sharing
  (``gpushare.admission.requests_gpu_sharing``) are allowed at once, without touching the
  indexes. Denials are ``Denied`` (a ``kopf.AdmissionError``) with code 422 (invalid value) or
  403 (policy); warnings go to the ``warnings`` list, which ``kubectl`` prints;
* a startup handler that serves HTTPS (``GPUShareWebhookServer``) with the certificate of
  ``CertLifecycle`` (the operator's Secret, or mounted files, e.g. from cert-manager), which also
  keeps the shipped ValidatingWebhookConfiguration's caBundle current; a cleanup handler (in
  local mode it deletes the configuration and Secret the run created, ``CertLifecycle.remove_local``).

Kopf does not check ``operations`` at runtime (they only feed the webhook configuration), so each
handler checks the operation itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, cast

import kopf

from gpushare import constants as c
from gpushare.admission import DEFAULT_TABLE, KindTable
from gpushare.admission.webhook_config import WebhookTarget
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.k8s.client import WATCH_READ_BUFSIZE, ApiClient, load_configuration, new_api_client
from gpushare.k8s.discovery import WHY_AND_FIX, Served, wait_served
from gpushare.k8s.watch import ListWatch
from gpushare.webhook.answer import CleanAllows, admit, live_context, log_decision, record, respond
from gpushare.webhook.context import ContextCache
from gpushare.webhook.lifecycle import CertLifecycle
from gpushare.webhook.options import WebhookOptions
from gpushare.webhook.server import GPUShareWebhookServer

POOLS_INDEX = "gpushare_admission_pools"
#: Nodes per page of the webhook's Node list (the list's memory peak is about one page).
NODE_PAGE = 100


class Denied(kopf.AdmissionError):
    """The rules denied the object: the webhook working, not failing."""


class QuietDenials(logging.Filter):
    """Drop the ERROR Kopf logs for every handler that raised a permanent error, when the error is
    our ``Denied`` (the handler already logged the denial at INFO).

    Kopf logs that line inside its ``except`` clause, so the exception being handled identifies it
    (``sys.exc_info()``, or the record's ``exc_info`` should Kopf ever attach it) whatever its
    wording. Every other ERROR passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        exc = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        return not isinstance(exc, Denied)


QUIET_DENIALS = QuietDenials()


@dataclass(frozen=True)
class Registered:
    """What ``register`` set up: the rules' context cache and the certificate lifecycle."""

    cache: ContextCache
    lifecycle: CertLifecycle


def make_handler(
    target: WebhookTarget,
    cache: ContextCache,
    table: KindTable = DEFAULT_TABLE,
    failure_policy: str = "Fail",
    pools_index: str = POOLS_INDEX,
) -> Callable[..., Coroutine[Any, Any, None]]:
    async def validate(body: kopf.Body, operation: str | None, warnings: list[str], **kwargs: Any) -> None:
        started = time.perf_counter()
        decision = admit(
            target,
            body,
            operation,
            lambda: cache.context(kwargs.get(pools_index), cache.fed),
            table,
            failure_policy,
            kwargs.get("old"),
        )
        warnings.extend(decision.warnings)
        record(target.kind, decision, time.perf_counter() - started)
        log_decision(body, decision, table)
        if not decision.allowed:
            raise Denied(decision.message, code=decision.code)

    validate.__name__ = validate.__qualname__ = target.handler_id.replace("-", "_")
    return validate


def _say_waiting(left: list[Served], seconds: float) -> None:
    logging.getLogger("gpushare.webhook").warning(
        "waiting %.0fs for the API server to serve %s (%s)",
        seconds,
        ", ".join(f"{plural}.{gv}" for gv, plural in left),
        WHY_AND_FIX,
    )


def register(
    registry: kopf.OperatorRegistry,
    options: WebhookOptions,
    *,
    watch_nodes: bool = True,
    pools_index: str | None = None,
) -> Registered:
    """Add the webhook's indexes, handlers, startup and cleanup to ``registry``. ``watch_nodes``:
    run its own Node list-watch; False when the caller feeds ``Registered.cache`` from a Node watch
    of its own (``gpushare run``: the operator's). ``pools_index``: the id of a Kopf index of the
    pools' bodies the process already keeps (``gpushare run``: the operator's), read instead of an
    index of the webhook's own (one index of the CRD per process)."""
    index_id = pools_index or POOLS_INDEX
    cache = ContextCache()
    lifecycle = CertLifecycle(options)
    logging.getLogger("kopf.objects").addFilter(QUIET_DENIALS)  # idempotent: the same filter object

    if pools_index is None:

        @kopf.index(c.GROUP, c.VERSION, c.PLURAL, id=POOLS_INDEX, registry=registry)
        def gpushare_admission_pools(body: kopf.Body, **_: Any) -> GPUSharePool | None:
            try:
                return cache.pool(parse_pool(dict(body)))
            except PoolValidationError:
                return None

    for target in options.targets:  # one handler per kind of the workload-kinds table, plus pools
        kopf.on.validate(
            group=target.group, plural=target.plural, id=target.handler_id,
            version=target.version if len(target.versions) <= 1 else None,  # None: every version
            operations=cast(tuple[Literal["CREATE", "UPDATE"], ...], target.operations),
            registry=registry,
        )(make_handler(target, cache, options.kinds, options.failure_policy, index_id))  # fmt: skip

    nodes: list[tuple[ApiClient, asyncio.Task[None]]] = []

    @kopf.on.startup(id="gpushare-webhook", registry=registry)
    async def webhook_startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        cache.pools_index = kwargs.get(index_id)  # a live view, updated in place by Kopf
        cache.nodes_index = cache.fed  # updated in place by the Node watch
        cfg = await load_configuration(options.kubeconfig, context=options.context)
        lifecycle.api = new_api_client(cfg)
        if pools_index is None:  # its own index of the pools: Kopf resolves them once, after this
            await wait_served(lifecycle.api, [(f"{c.GROUP}/{c.VERSION}", c.PLURAL)], say=_say_waiting)
        if watch_nodes:
            watch_api = new_api_client(cfg, read_bufsize=WATCH_READ_BUFSIZE)
            node_watch = ListWatch(watch_api, "nodes", cache.node_event, cache.nodes_listed, page=NODE_PAGE)
            task = asyncio.create_task(node_watch.run(), name="gpushare webhook node watch")
            nodes.append((watch_api, task))
        settings.admission.managed = None  # the project ships the configuration (kopf-notes §1.9)
        settings.admission.server = build_server(options, cache, lifecycle)

    @kopf.on.cleanup(id="gpushare-webhook-cleanup", registry=registry)
    async def webhook_cleanup(**_: Any) -> None:
        for api, task in nodes:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await api.close()
        await lifecycle.remove_local()  # local mode: nothing left to block the cluster after exit
        await lifecycle.close()

    return Registered(cache, lifecycle)


def build_server(
    options: WebhookOptions, cache: ContextCache, lifecycle: CertLifecycle
) -> GPUShareWebhookServer:
    """The HTTPS server: every review through ``respond`` (routing, the fast path, and the rules
    unless ``--webhook-via-kopf``), Kopf's handlers as the fallback, and the certificate
    lifecycle's hooks."""
    targets = {t.handler_id: t for t in options.targets}
    allows = CleanAllows()
    return GPUShareWebhookServer(
        routes={i: (t.group, t.plural) for i, t in targets.items()},
        live_context=lambda: live_context(cache) if options.direct else None,
        respond=lambda handler_id, review, context: respond(
            handler_id,
            review,
            context if options.direct else None,
            targets,
            options.kinds,
            options.failure_policy,
            allows,
        ),
        failure_policy=options.failure_policy,
        limits=options.limits,
        addr=options.addr,
        port=options.port,
        host=options.host if options.local else None,
        certfile=str(lifecycle.files.certfile),
        pkeyfile=str(lifecycle.files.keyfile),
        cafile=str(lifecycle.files.cafile),
        file_check_interval=options.file_check_interval,
        prepare=lifecycle.prepare,
        on_listening=lifecycle.on_listening,
        background=lifecycle.background,
    )
