"""A base for the tests' recorders of what a watch shows: every object of one collection, from a
listing on (the objects there before the recorder starts are recorded before ``async with``'s
body runs: a watch started in the background could list them only after the operator had already
changed some)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Self

import aiohttp
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

#: What a lost watch or listing raises (the apiserver restarted or went away).
LOST = (ApiException, OSError, aiohttp.ClientError, TimeoutError, ValueError)


class WatchRecorder:
    """Lists with ``list_fn(*args, **kwargs)``, gives each object to :meth:`seen`, then watches
    from the listing's version and gives each event's object to it; a watch that is lost is
    started again from a fresh listing (a version lost in between is not seen; the listing records
    the object as it is then). Subclasses record what they need in :meth:`seen`."""

    def __init__(self, list_fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> None:
        self._list_fn, self._args, self._kwargs = list_fn, args, kwargs
        self._task: asyncio.Task[None] | None = None

    def seen(self, obj: Any) -> None:
        raise NotImplementedError

    async def _list(self) -> str:
        found = await self._list_fn(*self._args, **self._kwargs)
        for obj in found.items:
            self.seen(obj)
        return str(found.metadata.resource_version)

    async def _run(self, since: str) -> None:
        while True:
            with contextlib.suppress(*LOST):
                async with watch.Watch().stream(
                    self._list_fn, *self._args, resource_version=since, **self._kwargs
                ) as stream:
                    async for event in stream:
                        self.seen(event["object"])
            await asyncio.sleep(0.5)
            with contextlib.suppress(*LOST):
                since = await self._list()

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run(await self._list()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
