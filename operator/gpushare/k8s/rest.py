"""The one request layer: every request gpushare sends to the apiserver, as raw JSON.

``Rest`` wraps a kubernetes_asyncio ``ApiClient`` for its transport only: the Configuration (host,
TLS, credentials and their refresh, from ``gpushare.k8s.client``) and the aiohttp session. Bodies go
out and come back as dicts: no generated model is built or parsed anywhere in gpushare (parsing a
Node into a ``V1Node`` and back cost about 1 ms of CPU per write, the JSON 0.04 ms).

* ``Rest.request``: one request, its JSON answer; ``ApiError`` unless 2xx.
* ``Rest.open``: one request, the response unread (a watch stream; the caller releases it).
* ``pages``: the one pager (``limit``/``continue``), a page at a time, each fetched by the caller's
  function so that each caller keeps its own retry policy (``gpushare.k8s.retry``).

Nothing above ``gpushare.k8s`` imports kubernetes_asyncio (an import-linter contract): the layers
above see ``ApiClient`` and ``Configuration`` through this package, and its errors only as
``ApiError`` (the client library's exception class is caught here and nowhere else).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException


class ApiError(Exception):
    """gpushare's one error from the apiserver: an HTTP answer outside 2xx (``status``, ``reason``,
    ``body`` as text, ``headers``), or a request that could not be sent (``status`` 0).

    The layers above ``gpushare.k8s`` catch this class (and its kinds in ``gpushare.k8s.retry``:
    ``Conflict``, ``ApiUnavailable``), never the client library's.
    """

    def __init__(
        self,
        status: int = 0,
        reason: str | None = None,
        body: str = "",
        headers: Any = None,
        message: str | None = None,
    ) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers
        self._message = message

    @property
    def message(self) -> str:
        """The apiserver's Status message, when the body holds one (or the message given)."""
        if self._message is not None:
            return self._message
        try:
            found = json.loads(self.body or "{}").get("message")
        except (ValueError, AttributeError):
            return ""
        return str(found or "")

    def __str__(self) -> str:
        head = f"HTTP {self.status} {self.reason or ''}".rstrip() if self.status else str(self.reason or "")
        message = self.message
        return f"{head}: {message}" if message else head or "no answer from the API server"


JSON = dict[str, Any]
Query = Mapping[str, str | int | bool]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
#: Default page size of every paginated list.
PAGE = 500
#: Timeout: seconds for the whole request, or an ``aiohttp.ClientTimeout``.
Timeout = float | aiohttp.ClientTimeout | None


def path(*parts: str) -> str:
    """``"/api/v1", "nodes", name`` → ``/api/v1/nodes/<name, quoted>`` (each part after the first
    quoted whole: names cannot smuggle a ``/`` or a ``?``)."""
    head, *rest = parts
    return "/".join([head, *(quote(p, safe="") for p in rest)])


def _query(query: Query | None) -> list[tuple[str, str]]:
    out = []
    for key, value in (query or {}).items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append((key, str(value)))
    return out


def error(status: int, reason: str | None, body: str = "", headers: Any = None) -> ApiError:
    """The ``ApiError`` of an answer (the body is kept: it holds the Status message)."""
    return ApiError(status=status, reason=reason, body=body, headers=headers)


class Rest:
    """Raw JSON requests over one ``ApiClient`` (which the caller owns and closes)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    async def open(
        self,
        method: str,
        url: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: Timeout = None,
    ) -> aiohttp.ClientResponse:
        """Send one request; the response is returned unread, whatever its status (release it)."""
        try:
            resp: aiohttp.ClientResponse = await self.api.call_api(
                url,
                method,
                query_params=_query(query),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=request_timeout,
            )
        except ApiException as exc:  # the transport could not build the request (status 0)
            raise ApiError(status=exc.status or 0, reason=exc.reason) from None
        return resp

    async def request(
        self,
        method: str,
        url: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: Timeout = None,
    ) -> JSON:
        """Send one request and return its JSON body (``{}`` when empty); ``ApiError`` unless 2xx."""
        resp = await self.open(
            method, url, query=query, body=body, content_type=content_type, request_timeout=request_timeout
        )
        try:
            data = await resp.read()
            if not 200 <= resp.status <= 299:
                raise error(resp.status, resp.reason, data.decode(errors="replace"), resp.headers)
            out: JSON = json.loads(data) if data else {}
            return out
        finally:
            resp.release()

    async def get(self, url: str, *, query: Query | None = None, request_timeout: Timeout = None) -> JSON:
        return await self.request("GET", url, query=query, request_timeout=request_timeout)

    async def create(self, url: str, body: Mapping[str, Any]) -> JSON:
        return await self.request("POST", url, body=dict(body))

    async def replace(self, url: str, body: Mapping[str, Any]) -> JSON:
        return await self.request("PUT", url, body=dict(body))

    async def patch(
        self, url: str, body: Any, *, content_type: str = MERGE_PATCH, query: Query | None = None
    ) -> JSON:
        return await self.request("PATCH", url, body=body, content_type=content_type, query=query)

    async def delete(self, url: str, body: Mapping[str, Any] | None = None) -> JSON:
        return await self.request("DELETE", url, body=dict(body) if body is not None else None)


async def pages(
    fetch: Callable[[Query], Awaitable[JSON]], query: Query | None = None, *, limit: int = PAGE
) -> AsyncIterator[JSON]:
    """Each page of a paginated list, in order: ``fetch`` gets the query of one page (``limit``,
    then ``continue``) and returns its JSON; the last page is the one without a continue token.

    The generator lets go of a page before it fetches the next one (a caller that drops it too,
    as ``ListWatch`` does, holds one page at a time)."""
    token: str | None = None
    while True:
        page = await fetch({**(query or {}), "limit": limit, **({"continue": token} if token else {})})
        token = (page.get("metadata") or {}).get("continue") or None
        yield page
        del page
        if not token:
            return


def items(page: Mapping[str, Any]) -> list[JSON]:
    """The objects of one list page."""
    return list(page.get("items") or ())
