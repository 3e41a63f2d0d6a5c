"""Waiting for the APIs a Kopf process serves to be in the apiserver's discovery.

Kopf resolves the resources of its handlers and indexes once, when it starts (``/apis``), and
looks again only when a CRD changes. A process that starts while the kube-apiserver is starting
(a restart, an upgrade) can find the CRD's group not installed yet: it then serves GPUSharePools
never, for the rest of its life, saying only "Unresolved resources cannot be served" (the soak
found a replica so, seed 7). ``wait_served`` holds the process's startup until discovery lists
each resource it needs, so that Kopf's one scan finds them. An apiserver that does not answer
at all (killed, restarting: connection refused, reset or timed out) is waited for the same way: a
startup that raised instead would be tried again by Kopf only a minute later, and the webhook would
serve nothing, the operator reconcile nothing, until then (the soak found the webhook so).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import aiohttp

from gpushare.k8s.client import ApiClient
from gpushare.k8s.rest import ApiError, Rest

#: (group/version, plural): what a process needs served
Served = tuple[str, str]
#: how often discovery is asked again, and how often the wait says so
POLL_S = 1.0
SAY_EVERY_S = 15.0
#: what an apiserver that does not answer raises (asked again later, as a 404 is)
UNANSWERED = (ApiError, aiohttp.ClientError, OSError, asyncio.TimeoutError)
#: what a wait's log line says to do (both processes')
WHY_AND_FIX = (
    "a CRD not installed, or an API server still starting: kubectl apply -f crds/ if it is not installed"
)


def missing(discovered: dict[str, list[str]], wanted: Sequence[Served]) -> list[Served]:
    """The wanted resources discovery does not list (pure): ``discovered`` maps each group/version
    asked to the plurals it listed ([] where it answered 404 or not at all)."""
    return [(gv, plural) for gv, plural in wanted if plural not in discovered.get(gv, [])]


async def discover(rest: Rest, group_versions: Sequence[str]) -> dict[str, list[str]]:
    """Each group/version's resource names as discovery lists them now; [] where it does not answer
    (404: not installed yet; any other error, or no answer at all: asked again later)."""
    out: dict[str, list[str]] = {}
    for gv in group_versions:
        try:
            doc = await rest.get(f"/apis/{gv}", request_timeout=10)
        except UNANSWERED:
            out[gv] = []
            continue
        out[gv] = [str(r.get("name")) for r in doc.get("resources") or []]
    return out


async def wait_served(
    api: ApiClient, wanted: Sequence[Served], *, say: Callable[[list[Served], float], None]
) -> float:
    """Return once discovery lists every wanted resource; ``say(still missing, seconds waited)``
    on the first miss and every SAY_EVERY_S after. Returns the seconds waited."""
    rest = Rest(api)
    started = last_said = time.monotonic()
    first = True
    group_versions = sorted({gv for gv, _ in wanted})
    while True:
        left = missing(await discover(rest, group_versions), wanted)
        if not left:
            return time.monotonic() - started
        now = time.monotonic()
        if first or now - last_said >= SAY_EVERY_S:
            say(left, now - started)
            first, last_said = False, now
        await asyncio.sleep(POLL_S)
