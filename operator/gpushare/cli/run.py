"""``gpushare run``: the operator (Kopf, all namespaces, embedded so gpushare owns logging).

Reconciles every GPUSharePool to node labels, restarts device plugins, guards mode switches and
reports status (see docs/concepts/pools.md). Exit 0 on SIGINT/SIGTERM; 2 on bad options or no usable
kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpushare.cli import CLIError
from gpushare.log import LOG_FORMATS, configure_logging

if TYPE_CHECKING:
    from gpushare.admission import KindTable
    from gpushare.webhook.options import WebhookOptions

PLUGIN_NAMESPACES_ENV = "GPUSHARE_PLUGIN_NAMESPACES"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the operator: reconcile GPUSharePools to nodes (Kopf, cluster-wide)",
        description="Run the gpushare operator against the cluster of --kubeconfig (or in-cluster).",
    )
    add_process_arguments(parser, metrics_port=8080, health_port=8081)
    parser.add_argument(
        "--namespace-for-events", default="default", metavar="NS",
        help="namespace for Events about cluster-scoped objects (pools, nodes); default: default "
        "(the apiserver accepts such Events only there)",
    )  # fmt: skip
    parser.add_argument(
        "--peering", metavar="NAME",
        help="run with Kopf peering (ClusterKopfPeering NAME must exist): replicas pause behind the one "
        "with the highest priority; without it the operator runs standalone",
    )  # fmt: skip
    parser.add_argument("--priority", type=int, help="peering priority (default: random, so replicas differ)")
    parser.add_argument(
        "--plugin-namespaces", metavar="NS[,NS...]", default=os.environ.get(PLUGIN_NAMESPACES_ENV),
        help="the only namespaces where device-plugin pods are restarted (the operator's RBAC allows "
        "pod deletes there); a pool naming another is reported, not a 403. "
        f"Default: ${PLUGIN_NAMESPACES_ENV}, else any namespace (RBAC alone decides)",
    )  # fmt: skip
    from gpushare.backends.nvidia.configmap import KEEP_UNUSED  # with the webhook's defaults below

    retention = int(KEEP_UNUSED.total_seconds())
    parser.add_argument(
        "--nvidia-config-retention", metavar="SECONDS", type=_seconds, default=retention,
        help="how long a config gpushare wrote into NVIDIA's plugin ConfigMap stays once no pool wants it"
        " and no node names it, from when it was written (a pool switched back finds it ready); default"
        f" {retention}. The last pool on a ConfigMap deletes its unused configs when it is deleted",
    )  # fmt: skip
    add_webhook_arguments(parser)  # --webhook* (docs/concepts/admission.md)
    parser.set_defaults(func=run)


def _seconds(value: str) -> int:
    """A whole number of seconds, 0 or more (argparse's ``type``)."""
    try:
        seconds = int(value)
    except ValueError:
        seconds = -1
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of seconds >= 0")
    return seconds


def add_process_arguments(parser: argparse.ArgumentParser, *, metrics_port: int, health_port: int) -> None:
    """What a long-running process of ``gpushare run`` and ``gpushare webhook`` takes: the
    cluster, its /metrics and liveness endpoints, its logging."""
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument(
        "--metrics-port", type=int, default=metrics_port,
        help=f"Prometheus /metrics port (0 = off; default {metrics_port})",
    )  # fmt: skip
    parser.add_argument("--metrics-addr", default="127.0.0.1", help="address for /metrics (0.0.0.0 in a pod)")
    parser.add_argument(
        "--liveness",
        metavar="URL",
        help=f"Kopf liveness endpoint, e.g. http://0.0.0.0:{health_port}/healthz (off by default)",
    )
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="console")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--event-loop", choices=EVENT_LOOPS, default="uvloop",
        help="the event loop: uvloop (libuv; less CPU per watch event and per review, the default)"
        " or Python's asyncio",
    )  # fmt: skip


#: ``--event-loop`` choices.
EVENT_LOOPS = ("uvloop", "asyncio")


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The ``asyncio.Runner`` loop factory for ``--event-loop`` (None: asyncio's default)."""
    if name == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def add_webhook_arguments(parser: argparse.ArgumentParser, *, serve_flag: bool = True) -> None:
    """The ``--webhook*`` options of ``gpushare run`` (``serve_flag``: with ``--webhook`` itself) and
    of ``gpushare webhook``."""
    from gpushare.admission.review import MAX_REVIEW_BYTES
    from gpushare.admission.webhook_config import (
        DEFAULT_CONFIGURATION_NAME,
        DEFAULT_NAMESPACE,
        DEFAULT_PORT,
        DEFAULT_SERVICE,
        MAX_TIMEOUT_SECONDS,
    )
    from gpushare.webhook.options import DEFAULT_SECRET

    g = parser.add_argument_group("admission webhook")
    if serve_flag:
        g.add_argument(
            "--webhook", action="store_true",
            help="serve the validating admission webhook in this process too (`gpushare webhook` serves it"
            " in a process of its own, as the chart and manifests do)",
        )  # fmt: skip
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
    g.add_argument(
        "--webhook-configuration", default=DEFAULT_CONFIGURATION_NAME, metavar="NAME",
        help="the ValidatingWebhookConfiguration (gpushare run keeps its NVIDIA gate open while an NVIDIA "
        "pool exists: docs/concepts/admission.md)",
    )  # fmt: skip
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
    g.add_argument(
        "--webhook-failure-policy", choices=("Fail", "Ignore"),
        help="failurePolicy of the workload webhooks (pools always Ignore); default Fail, Ignore with "
        "--webhook-local (a development run killed without cleanup then blocks nothing)",
    )  # fmt: skip
    g.add_argument("--webhook-timeout", type=int, default=MAX_TIMEOUT_SECONDS, help="timeoutSeconds, 1..5")
    g.add_argument(
        "--webhook-max-body-bytes", type=int, default=MAX_REVIEW_BYTES, metavar="N",
        help=f"largest AdmissionReview accepted (default {MAX_REVIEW_BYTES}; docs/security.md)",
    )  # fmt: skip
    g.add_argument(
        "--webhook-via-kopf", action="store_true",
        help="answer every review through Kopf's handler machinery (slower; for comparison)",
    )  # fmt: skip
    g.add_argument(
        "--workload-kinds", type=Path, metavar="FILE",
        help="YAML list of extra workload kinds and where their pod templates are"
        " (docs/reference/workload-kinds.md)",
    )  # fmt: skip


def webhook_options(args: argparse.Namespace) -> WebhookOptions:
    """The webhook's options from ``args`` (ValueError, one line, when unusable)."""
    from gpushare.admission.webhook_config import MAX_TIMEOUT_SECONDS
    from gpushare.webhook.options import WebhookOptions
    from gpushare.webhook.server import MAX_BODY_CEILING, ServerLimits

    base_limits = ServerLimits()
    if not 1 <= args.webhook_timeout <= MAX_TIMEOUT_SECONDS:
        raise ValueError(f"--webhook-timeout {args.webhook_timeout}: must be 1..{MAX_TIMEOUT_SECONDS}")
    max_body = getattr(args, "webhook_max_body_bytes", None) or base_limits.max_body_bytes
    if not 4096 <= max_body <= MAX_BODY_CEILING:
        raise ValueError(f"--webhook-max-body-bytes {max_body}: must be 4096..{MAX_BODY_CEILING}")
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
        failure_policy=args.webhook_failure_policy or ("Ignore" if args.webhook_local else "Fail"),
        timeout_seconds=args.webhook_timeout,
        direct=not getattr(args, "webhook_via_kopf", False),
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        kinds=_kinds_from(getattr(args, "workload_kinds", None)),
        limits=dataclasses.replace(base_limits, max_body_bytes=max_body),
    )


def _kinds_from(path: Path | None) -> KindTable:
    """The table with the kinds of ``--workload-kinds FILE`` (ValueError, one line, when unusable)."""
    from gpushare.admission import DEFAULT_TABLE, load_kinds, table_with

    if path is None:
        return DEFAULT_TABLE
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--workload-kinds {path}: cannot read: {exc}") from None
    return table_with(load_kinds(text, f"--workload-kinds {path}"))


async def _namespace_exists(args: argparse.Namespace, namespace: str) -> bool:
    """False only when the apiserver answers that ``namespace`` does not exist."""
    from gpushare.k8s.client import make_api_client
    from gpushare.k8s.webhook_api import namespace_exists

    async with await make_api_client(args.kubeconfig, context=args.context) as api:
        return await namespace_exists(api, namespace)


def prepare(args: argparse.Namespace, webhook: bool) -> None:
    """What ``gpushare run`` and ``gpushare webhook`` check before starting (one line, exit 2, on a
    bad port, an unusable kubeconfig or a missing webhook namespace), then logging."""
    from gpushare.k8s.client import KubeConfigError, load_configuration

    if args.metrics_port < 0 or args.metrics_port > 65535:
        raise CLIError(f"--metrics-port {args.metrics_port}: not a port number")
    try:  # fail fast with one line instead of a retrying login loop
        asyncio.run(load_configuration(args.kubeconfig, context=args.context))
    except KubeConfigError as exc:
        raise CLIError(str(exc)) from None
    if webhook and args.webhook_local and args.webhook_cert_files is None:
        namespace = args.webhook_namespace
        if not asyncio.run(_namespace_exists(args, namespace)):
            raise CLIError(
                f"namespace {namespace} does not exist: the webhook keeps its certificate Secret "
                f"{args.webhook_secret} there; create it (kubectl create namespace {namespace}) or pass "
                "--webhook-namespace NS"
            )
    configure_logging(args.log_format, logging.DEBUG if args.verbose else logging.INFO)
    logging.getLogger("aiohttp.access").propagate = False
    if not args.verbose:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def run(args: argparse.Namespace) -> int:
    import kopf

    from gpushare.handlers.options import RunOptions
    from gpushare.handlers.state import OperatorState
    from gpushare.handlers.watch import NodeViewListener
    from gpushare.k8s.cluster import parse_plugin_namespaces

    prepare(args, args.webhook)

    import gpushare.handlers  # noqa: F401 - registers the handlers

    view_listeners: list[NodeViewListener] = []
    if args.webhook:  # the admission webhook's handlers, server and certificates (docs/concepts/admission.md)
        from gpushare.handlers.pools import POOL_INDEX
        from gpushare.webhook.registration import register as register_webhook

        try:  # the operator's Node watch feeds the webhook's context (one Node watch per process)
            webhook = register_webhook(
                kopf.get_default_registry(), webhook_options(args), watch_nodes=False, pools_index=POOL_INDEX
            )
        except ValueError as exc:
            raise CLIError(str(exc)) from None
        view_listeners.append(webhook.cache)

    from gpushare.admission.webhook_config import targets_for

    try:
        kinds = _kinds_from(args.workload_kinds)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    options = RunOptions(
        kubeconfig=args.kubeconfig,
        context=args.context,
        events_namespace=args.namespace_for_events,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        peering=args.peering,
        plugin_namespaces=parse_plugin_namespaces(args.plugin_namespaces),
        nvidia_config_retention=args.nvidia_config_retention,
        webhook_configuration=args.webhook_configuration,
        webhook_targets=targets_for(kinds),
    )
    priority = args.priority if args.priority is not None else random.randint(1, 32767)
    try:
        with asyncio.Runner(loop_factory=loop_factory(args.event_loop)) as runner:
            runner.run(
                kopf.operator(
                    clusterwide=True,
                    standalone=args.peering is None,
                    peering_name=args.peering,
                    priority=priority,
                    liveness_endpoint=args.liveness,
                    memo=OperatorState(options=options, view_listeners=view_listeners),
                )
            )
    except KeyboardInterrupt:
        return 0
    return 0
