"""A local control plane for a test module or session: started, prepared, always stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare.devcluster import ClusterInfo, DevCluster, DevClusterError


def serve(
    dev: DevCluster, prepare: Callable[[ClusterInfo], Coroutine[Any, Any, None]], what: str
) -> Iterator[ClusterInfo]:
    """``yield from`` it in a fixture: the started cluster, prepared; a failed start fails the
    test with one line (and keeps the logs); the cluster is stopped whatever happens."""
    try:
        info = dev.start()
        asyncio.run(prepare(info))
    except (DevClusterError, TimeoutError, ApiException) as exc:
        dev.stop(failed=True)
        pytest.fail(f"{what} did not start: {exc}", pytrace=False)
    try:
        yield info
    finally:
        dev.stop()
