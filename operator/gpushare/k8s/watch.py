"""List-then-watch of one resource kind as raw JSON, for the operator's slim Node and Pod indexes.

Why not Kopf's ``@kopf.index``: Kopf runs every Node and Pod event through its per-object machinery
(a worker task and a memory per object, the diff-base built and compared, loggers, a patch), and
queues the whole initial listing into per-object queues before any of it is handled. At 3000
nodes with their 3000 plugin pods a backlog of events (the initial listing, a ``kubectl label``
of every node) then took the operator minutes to work through, and the raw bodies waiting in those
queues set the memory peak. Here each event is parsed once and handed to a callback (which keeps a
projection and drops the body); a list is read in pages of ``page`` objects.

The loop: list (paginated; the list's ``resourceVersion``), report the names listed, then watch
from that version with bookmarks until the server closes the watch (``server_timeout``), the
connection drops (an apiserver restart) or the version is too old (410 Gone / an ``ERROR``
event): then watch again from the last version seen, or list again after a 410. Errors are
retried after ``reconnect`` seconds; the first answer after a failure is logged ("Watch resumed",
with how long it was down). Nothing is written.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import aiohttp
import structlog

from gpushare import metrics
from gpushare.k8s.client import READ_BUFSIZE, ApiClient
from gpushare.k8s.rest import ApiError, Query, Rest, error, pages

log = structlog.get_logger("gpushare.watch")

#: (event type: "ADDED", "MODIFIED" or "DELETED"; the object as JSON)
OnEvent = Callable[[str, Mapping[str, Any]], None]
#: Called after every complete list with the keys of every listed object (to drop vanished ones).
OnListed = Callable[[set[str]], None]


#: The longest event line a watch reads: what aiohttp allowed on kubernetes_asyncio's session
#: (twice its read buffer), whatever the read buffer of the watch's own session.
MAX_EVENT_BYTES = 2 * READ_BUFSIZE


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


def object_key(obj: Mapping[str, Any]) -> str:
    """``name`` for cluster-scoped objects, ``uid`` (else ``namespace/name``) for namespaced ones."""
    meta = obj.get("metadata") or {}
    if meta.get("namespace"):
        return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    return str(meta.get("name") or "")


#: How the apiserver writes the start of a Node's MODIFIED event: the type, the kind, then the
#: metadata's name and its other plain string fields (ObjectMeta's order: generateName, namespace,
#: selfLink, uid) up to its resourceVersion. Nothing nested can be crossed on the way.
_NODE_EVENT_HEAD = re.compile(
    rb'\{"type":"MODIFIED","object":\{"kind":"Node","apiVersion":"v1","metadata":\{"name":"([^"\\]+)",'
    rb'(?:"[A-Za-z]+":"[^"\\]*",)*?"resourceVersion":"([0-9]+)"'
)
#: Bytes of a line ``peek_node_event`` looks at.
_HEAD_BYTES = 1024


def peek_node_event(line: bytes) -> tuple[str, str] | None:
    """(name, resourceVersion) of a Node's MODIFIED watch event, read from the line's first bytes
    without parsing it; None when the line does not begin as the apiserver writes one."""
    m = _NODE_EVENT_HEAD.match(line, 0, _HEAD_BYTES)
    return None if m is None else (m.group(1).decode(), m.group(2).decode())


#: ``known(name, resourceVersion)``: whether the consumer already has exactly this version of the
#: node (its own write): the event is then neither parsed nor delivered.
Known = Callable[[str, str], bool]


class ListWatch:
    """One resource kind (``"nodes"`` or ``"pods"``, all namespaces), listed then watched."""

    def __init__(
        self,
        api: ApiClient,
        resource: str,
        on_event: OnEvent,
        on_listed: OnListed,
        *,
        page: int = 500,
        server_timeout: int = 300,
        reconnect: float = 1.0,
        known: Known | None = None,
    ) -> None:
        if resource not in ("nodes", "pods"):
            raise ValueError(f"unsupported resource {resource!r}")
        if known is not None and resource != "nodes":
            raise ValueError("known is for nodes only")
        self.known = known
        #: MODIFIED events ``known`` already had (not parsed).
        self.known_events = 0
        self.resource = resource
        self.rest = Rest(api)
        self.url = f"/api/v1/{resource}"
        self.on_event = on_event
        self.on_listed = on_listed
        self.page = page
        self.server_timeout = server_timeout
        self.reconnect = reconnect
        #: Set once the first list has been delivered completely.
        self.listed = asyncio.Event()
        self.events = 0
        #: When the first of the failures since the last answer happened (None: no failure).
        self._failing_since: float | None = None

    async def _list(self) -> str:
        """Deliver every object (page by page) as ADDED; returns the list's resourceVersion.

        Each page's raw objects are freed before the next page is read."""
        keys: set[str] = set()
        rv = ""
        async for page in pages(self._page, limit=self.page):
            for obj in page.get("items") or ():
                keys.add(object_key(obj))
                self.on_event("ADDED", obj)
            rv = str((page.get("metadata") or {}).get("resourceVersion") or "")
            del page  # before the next page is read
        self.on_listed(keys)
        self.listed.set()
        return rv

    async def _page(self, query: Query) -> dict[str, Any]:
        page = await self.rest.get(self.url, query=query, request_timeout=60)
        self._answered()
        return page

    async def _watch(self, rv: str) -> str:
        """Follow the watch from ``rv`` until the server ends it; returns the last version seen."""
        resp = await self.rest.open(
            "GET",
            self.url,
            query={
                "watch": True,
                "resourceVersion": rv,
                "allowWatchBookmarks": True,
                "timeoutSeconds": self.server_timeout,
            },
            request_timeout=aiohttp.ClientTimeout(sock_connect=10, sock_read=self.server_timeout + 30),
        )
        try:
            if resp.status == 410:
                raise Gone()
            if resp.status != 200:
                raise error(resp.status, resp.reason)
            self._answered()
            while True:
                line = await resp.content.readline(max_line_length=MAX_EVENT_BYTES)
                if not line:
                    return rv
                if not line.strip():
                    continue
                known = self.known
                if known is not None and (head := peek_node_event(line)) is not None and known(*head):
                    rv = head[1]  # the echo of the consumer's own write: not parsed
                    self.known_events += 1
                    continue
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise error(obj.get("code") or 0, str(obj.get("message")))
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind == "BOOKMARK":
                    continue
                self.events += 1
                self.on_event(str(kind), obj)
        finally:
            resp.release()

    def _answered(self) -> None:
        """The apiserver answered: if it had been failing, say for how long."""
        if self._failing_since is not None:
            down = time.monotonic() - self._failing_since
            self._failing_since = None
            log.info("Watch resumed", resource=self.resource, down_seconds=round(down, 1))

    async def run(self) -> None:
        """List and watch until cancelled."""
        rv = ""
        while True:
            try:
                if not rv:
                    rv = await self._list()
                rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("Watch expired; listing again", resource=self.resource)
                rv = ""
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                code = exc.status if isinstance(exc, ApiError) else 0
                metrics.API_ERRORS.labels(verb="watch", resource=self.resource, code=str(code)).inc()
                log.warning(
                    "Watch failed; retrying", resource=self.resource, retry_in=self.reconnect, error=repr(exc)
                )
                await asyncio.sleep(self.reconnect)


async def run_all(watches: Iterable[ListWatch]) -> None:
    """Run several watches together until cancelled (one failing never stops the others)."""
    await asyncio.gather(*(w.run() for w in watches))
