"""GPUSharePool reads and writes shared by the integration tests (one home, not a copy per file)."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c

MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


class PoolApi:
    """Get and patch GPUSharePools; ``created`` lists the names a test made (for its cleanup)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.created: list[str] = []

    async def create_pool(self, name: str, selector: dict[str, str], **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": selector}, **spec},
        }
        obj: dict[str, Any] = await self.custom.create_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, body
        )
        self.created.append(name)
        return obj

    async def get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await self.custom.get_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    async def patch_spec(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Merge ``spec`` into pool ``name``'s spec; the pool as patched (its new generation)."""
        obj: dict[str, Any] = await self.custom.patch_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, name, {"spec": spec}, **MERGE
        )
        return obj

    async def delete(self, name: str, *, timeout_s: float = 180.0) -> None:
        """Delete pool ``name`` and wait until it is gone (its cleanup done by the operator)."""
        try:
            await self.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        deadline = asyncio.get_running_loop().time() + timeout_s
        while await self.get(name) is not None:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"GPUSharePool/{name} still exists {timeout_s:g}s after its deletion")
            await asyncio.sleep(0.5)
