"""``gpushare webhook``: the validating admission webhook in a process of its own.

The chart and the manifests run it as the ``webhook`` container of each operator pod, beside the
``operator`` container (``gpushare run``): its own process, so its own event loop (uvloop unless
``--event-loop asyncio``: a tenth less CPU per review, docs/benchmarks.md), its own GIL and
its own CPU time. Admission latency then does not wait behind the reconciler's passes, the demand
loop or the operator's pod and node watches (issue 40; docs/concepts/admission.md). It keeps one
model of what the rules need: the webhook's context (``gpushare.webhook.context.ContextCache``),
fed by its own paged Node list-watch and a Kopf index of the GPUSharePools; it reconciles
nothing and writes nothing but its certificate Secret and the configuration's caBundle.

``gpushare run --webhook`` still serves both in one process (development, ``make demo``).
Exit 0 on SIGINT/SIGTERM; 2 on bad options or no usable kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from gpushare.cli import CLIError
from gpushare.cli.run import (
    add_process_arguments,
    add_webhook_arguments,
    loop_factory,
    prepare,
    webhook_options,
)

#: The webhook process's /metrics and liveness ports by default (the operator's are 8080 and 8081).
DEFAULT_METRICS_PORT = 8082
DEFAULT_HEALTH_PORT = 8083


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "webhook",
        help="serve the validating admission webhook in a process of its own (no reconciling)",
        description="Serve the gpushare admission webhook (and only it) against the cluster of"
        " --kubeconfig (or in-cluster): its own Node watch and GPUSharePool index, its own event loop.",
    )
    add_process_arguments(parser, metrics_port=DEFAULT_METRICS_PORT, health_port=DEFAULT_HEALTH_PORT)
    add_webhook_arguments(parser, serve_flag=False)
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    import kopf

    from gpushare import metrics
    from gpushare.k8s.client import kopf_connection
    from gpushare.webhook.registration import register as register_webhook

    prepare(args, webhook=True)
    registry = kopf.OperatorRegistry()
    try:  # its own Node list-watch feeds its context (``watch_nodes``)
        register_webhook(registry, webhook_options(args), watch_nodes=True)
    except ValueError as exc:
        raise CLIError(str(exc)) from None

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await kopf_connection(args.kubeconfig, args.context)

    @kopf.on.startup(id="gpushare-webhook-process", registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # it posts no Events: decisions are in its log and metrics
        settings.watching.server_timeout = 300
        metrics.serve(args.metrics_port, args.metrics_addr)

    try:
        with asyncio.Runner(loop_factory=loop_factory(args.event_loop)) as runner:
            runner.run(
                kopf.operator(
                    registry=registry, clusterwide=True, standalone=True, liveness_endpoint=args.liveness
                )
            )
    except KeyboardInterrupt:
        return 0
    return 0
