"""A fresh namespace for a real-node test, ready for pods (its default ServiceAccount exists)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any, cast

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare.devcluster.fakes import wait_for


@contextlib.asynccontextmanager
async def fresh_namespace(api: client.ApiClient, prefix: str) -> AsyncIterator[str]:
    """A namespace ``<prefix>-<random>`` with its default ServiceAccount (ServiceAccount admission
    is on here), deleted afterwards."""
    core = client.CoreV1Api(api)
    name = f"{prefix}-{secrets.token_hex(3)}"
    await core.create_namespace(cast(Any, {"metadata": {"name": name}}))

    async def has_sa() -> bool:
        try:
            await core.read_namespaced_service_account("default", name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    await wait_for(has_sa, what=f"ServiceAccount {name}/default", timeout_s=60)
    yield name
    await core.delete_namespace(name)
