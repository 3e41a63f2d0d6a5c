"""The generated client's errors, for the development harness (``gpushare.devcluster``), which
drives a cluster through kubernetes_asyncio's typed API classes as the tests do.

Those classes raise the library's ``ApiException``; this module is where it is caught, so that
nothing outside ``gpushare.k8s`` names it. ``refused`` runs a block of such calls and ends it
quietly when the apiserver answers one of the given statuses; any other error goes on unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from kubernetes_asyncio.client.exceptions import ApiException


@dataclass
class Refusal:
    """What ended a ``refused`` block: the apiserver's status and reason (``status`` None: the
    block ran to its end)."""

    status: int | None = None
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.status is not None


@contextlib.contextmanager
def refused(*statuses: int) -> Iterator[Refusal]:
    """Run a block of the generated client's calls. An answer with one of ``statuses`` (any
    status when none is given) ends the block; the ``Refusal`` it yields then holds it. Other
    errors propagate as they were raised."""
    refusal = Refusal()
    try:
        yield refusal
    except ApiException as exc:
        if statuses and exc.status not in statuses:
            raise
        refusal.status = int(exc.status or 0)
        refusal.reason = exc.reason
