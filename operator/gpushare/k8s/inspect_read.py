"""Read-only API calls of ``gpushare inspect``: Nodes, unfinished Pods and GPUSharePools as JSON dicts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.k8s.retry import call_or_absent

PAGE = 500
#: A command line answers quickly: a transient failure is tried again only twice.
CLI_ATTEMPTS = 3
#: Finished pods hold no GPU and wait for nothing.
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


class InspectReadError(Exception):
    """Listing failed; the message names what and why."""


async def pages_or_absent(what: str, fn: Callable[..., Awaitable[Any]], **kwargs: Any) -> list[Any] | None:
    """Every item of a paginated list (through the retry policy); None when the resource does not
    exist (404: a CRD that is not installed). HTTP errors become ``InspectReadError``; connection
    errors and timeouts are raised as they are."""
    items: list[Any] = []
    token: str | None = None
    while True:
        args = {"limit": PAGE, **kwargs, **({"_continue": token} if token else {})}
        try:
            page = await call_or_absent(
                lambda a=args: fn(**a),  # type: ignore[misc]
                verb="list",
                resource=what,
                attempts=CLI_ATTEMPTS,
                give_up=False,
            )
        except ApiException as exc:
            raise InspectReadError(f"list {what}: HTTP {exc.status} {exc.reason}") from None
        if page is None:
            return None
        if isinstance(page, dict):
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
        else:
            items.extend(page.items or [])
            token = page.metadata._continue if page.metadata else None
        if not token:
            return items


async def _pages(what: str, fn: Callable[..., Awaitable[Any]], **kwargs: Any) -> list[Any]:
    """``pages_or_absent`` for resources that always exist."""
    items = await pages_or_absent(what, fn, **kwargs)
    if items is None:
        raise InspectReadError(f"list {what}: HTTP 404 Not Found")
    return items


async def read_cluster(
    api: k8s_client.ApiClient,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """``(nodes, pods, pools, warnings)``. A missing CRD is a warning, not an error."""
    core = k8s_client.CoreV1Api(api)
    warnings: list[str] = []
    nodes = [api.sanitize_for_serialization(n) for n in await _pages("nodes", core.list_node)]
    pods = [
        api.sanitize_for_serialization(p)
        for p in await _pages("pods", core.list_pod_for_all_namespaces, field_selector=UNFINISHED)
    ]
    custom = k8s_client.CustomObjectsApi(api)
    pools = await pages_or_absent(
        c.PLURAL,
        lambda **kw: custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, **kw),
    )
    if pools is None:
        pools = []
        warnings.append(f"the {c.CRD_NAME} CRD is not installed: no pools to show")
    return nodes, pods, [dict(p) for p in pools], warnings
