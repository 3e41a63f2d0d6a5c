"""Read-only lists of the CLI (``gpushare inspect``, ``plan``, ``check``): Nodes, unfinished Pods and
GPUSharePools as JSON dicts, every page (``gpushare.k8s.rest.pages``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gpushare import constants as c
from gpushare.k8s.client import ApiClient
from gpushare.k8s.cluster import POOLS, UNFINISHED
from gpushare.k8s.rest import ApiError, Query, Rest, items, pages
from gpushare.k8s.retry import call

#: A command line answers quickly: a transient failure is tried again only twice.
CLI_ATTEMPTS = 3
Objects = list[dict[str, Any]]
__all__ = [
    "CLI_ATTEMPTS",
    "UNFINISHED",
    "InspectReadError",
    "list_objects",
    "pages_or_absent",
    "read_cluster",
    "read_lists",
]


class InspectReadError(Exception):
    """Listing failed; the message names what and why."""


async def pages_or_absent(
    what: str, get: Callable[[Query], Awaitable[dict[str, Any]]], query: Query | None = None
) -> Objects | None:
    """Every item of a paginated list, each page fetched by ``get`` (its query) through the retry
    policy; None when the resource does not exist (404: a CRD that is not installed). HTTP errors
    become ``InspectReadError``; connection errors and timeouts are raised as they are."""

    async def fetch(q: Query) -> dict[str, Any]:
        return await call(lambda: get(q), verb="list", resource=what, attempts=CLI_ATTEMPTS, give_up=False)

    try:
        return [obj async for page in pages(fetch, query) for obj in items(page)]
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise InspectReadError(f"list {what}: HTTP {exc.status} {exc.reason}") from None


async def list_objects(api: ApiClient, what: str, url: str, query: Query | None = None) -> Objects | None:
    """``pages_or_absent`` of the list at ``url``."""
    rest = Rest(api)
    return await pages_or_absent(what, lambda q: rest.get(url, query=q), query)


async def read_lists(api: ApiClient, pods: str | None) -> tuple[Objects | None, Objects, Objects]:
    """``(pools or None when the CRD is not installed, nodes, pods)``; pods only with a field
    selector (``pods``), none when it is None."""
    pools = await list_objects(api, c.PLURAL, POOLS)
    nodes = await list_objects(api, "nodes", "/api/v1/nodes")
    if nodes is None:
        raise InspectReadError("list nodes: HTTP 404 Not Found")
    found: Objects = []
    if pods is not None:
        listed = await list_objects(api, "pods", "/api/v1/pods", {"fieldSelector": pods})
        if listed is None:
            raise InspectReadError("list pods: HTTP 404 Not Found")
        found = listed
    return pools, nodes, found


async def read_cluster(api: ApiClient) -> tuple[Objects, Objects, Objects, list[str]]:
    """``(nodes, pods, pools, warnings)``. A missing CRD is a warning, not an error."""
    pools, nodes, pods = await read_lists(api, UNFINISHED)
    warnings = []
    if pools is None:
        warnings.append(f"the {c.CRD_NAME} CRD is not installed: no pools to show")
    return nodes, pods, pools or [], warnings
