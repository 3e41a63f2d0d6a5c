"""Read-only access to the live cluster for the CLI (`gpushare plan`, `gpushare check`).

Only get/list requests: GPUSharePools, Nodes and (for ``plan``) unfinished Pods bound to a node.
Every failure (no kubeconfig, unreachable or slow API server, HTTP errors such as 403) becomes a
``LiveReadError`` whose message is one line saying which source failed and why.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gpushare import constants as c
from gpushare.k8s.client import ApiClient, KubeConfigError, make_api_client
from gpushare.k8s.inspect_read import UNFINISHED, InspectReadError, read_lists

Objects = list[dict[str, Any]]
#: Unfinished pods that are bound to a node (only those can hold a mode switch or be a plugin pod).
BOUND_UNFINISHED = f"spec.nodeName!=,{UNFINISHED}"
DEFAULT_TIMEOUT_S = 30.0


class LiveReadError(Exception):
    """Reading the cluster failed; ``str()`` is one line naming the source and the reason."""


@dataclass(frozen=True)
class LiveState:
    """What the cluster holds now, as Kubernetes JSON dicts."""

    server: str
    pools: Objects = field(default_factory=list)
    nodes: Objects = field(default_factory=list)
    pods: Objects = field(default_factory=list)
    warnings: tuple[str, ...] = ()


async def _read(api: ApiClient, with_pods: bool) -> tuple[Objects, Objects, Objects, list[str]]:
    found, nodes, pods = await read_lists(api, BOUND_UNFINISHED if with_pods else None)
    warnings = []
    if found is None:
        warnings.append(f"the {c.CRD_NAME} CRD is not installed: the cluster has no pools")
    return found or [], nodes, pods, warnings


async def read_live(
    kubeconfig: str | None = None, *, with_pods: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S
) -> LiveState:
    """List pools, nodes and (``with_pods``) bound unfinished pods; raise ``LiveReadError``.

    The kubeconfig is looked up as kubectl does (``--kubeconfig``, else in-cluster, else
    ``KUBECONFIG``, else ~/.kube/config).
    """
    try:
        api = await make_api_client(kubeconfig)
    except KubeConfigError as exc:
        raise LiveReadError(str(exc)) from None
    server = str(api.configuration.host)
    async with api:
        try:
            pools, nodes, pods, warnings = await asyncio.wait_for(_read(api, with_pods), timeout_s)
        except InspectReadError as exc:
            raise LiveReadError(f"API server {server}: {exc}") from None
        except TimeoutError:
            raise LiveReadError(f"API server {server} did not answer within {timeout_s:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise LiveReadError(f"cannot reach the API server {server}: {reason}") from None
    return LiveState(server=server, pools=pools, nodes=nodes, pods=pods, warnings=tuple(warnings))


def read_live_sync(kubeconfig: str | None = None, *, with_pods: bool = True) -> LiveState:
    """``read_live`` for synchronous callers (the CLI)."""
    return asyncio.run(read_live(kubeconfig, with_pods=with_pods))
