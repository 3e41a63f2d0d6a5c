"""``gpushare run``: the operator (Kopf, all namespaces, embedded so gpushare owns logging).

Reconciles every GPUSharePool to node labels, restarts device plugins, guards mode switches and
reports status (see docs/operator.md). Exit 0 on SIGINT/SIGTERM; 2 on bad options or no usable
kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
from typing import Any

from gpushare.cli import CLIError
from gpushare.log import LOG_FORMATS, configure_logging

PLUGIN_NAMESPACES_ENV = "GPUSHARE_PLUGIN_NAMESPACES"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the operator: reconcile GPUSharePools to nodes (Kopf, cluster-wide)",
        description="Run the gpushare operator against the cluster of --kubeconfig (or in-cluster).",
    )
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument(
        "--namespace-for-events", default="default", metavar="NS",
        help="namespace for Events about cluster-scoped objects (pools, nodes); default: default "
        "(the apiserver accepts such Events only there)",
    )  # fmt: skip
    parser.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port (0 = off)")
    parser.add_argument("--metrics-addr", default="127.0.0.1", help="address for /metrics (0.0.0.0 in a pod)")
    parser.add_argument(
        "--liveness",
        metavar="URL",
        help="Kopf liveness endpoint, e.g. http://0.0.0.0:8081/healthz (off by default)",
    )
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="console")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
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
    from gpushare.handlers.admission import add_arguments as add_webhook_arguments

    add_webhook_arguments(parser)  # --webhook* (docs/webhook.md)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import kopf

    from gpushare.handlers.options import RunOptions
    from gpushare.k8s.client import KubeConfigError, load_configuration
    from gpushare.k8s.cluster import parse_plugin_namespaces

    if args.metrics_port < 0 or args.metrics_port > 65535:
        raise CLIError(f"--metrics-port {args.metrics_port}: not a port number")
    try:  # fail fast with one line instead of a retrying login loop
        asyncio.run(load_configuration(args.kubeconfig, context=args.context))
    except KubeConfigError as exc:
        raise CLIError(str(exc)) from None
    configure_logging(args.log_format, logging.DEBUG if args.verbose else logging.INFO)
    logging.getLogger("aiohttp.access").propagate = False
    if not args.verbose:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)

    import gpushare.handlers  # noqa: F401 - registers the handlers

    if args.webhook:  # the admission webhook's handlers, server and certificates (docs/webhook.md)
        from gpushare.handlers import admission

        try:
            admission.register(kopf.get_default_registry(), admission.options_from_args(args))
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
    )
    priority = args.priority if args.priority is not None else random.randint(1, 32767)
    try:
        asyncio.run(
            kopf.operator(
                clusterwide=True,
                standalone=args.peering is None,
                peering_name=args.peering,
                priority=priority,
                liveness_endpoint=args.liveness,
                memo=kopf.Memo(options=options),
            )
        )
    except KeyboardInterrupt:
        return 0
    return 0
