"""Install CustomResourceDefinitions into a dev cluster and wait until they are served."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes_asyncio import client

from gpushare.devcluster.fakes import wait_for
from gpushare.k8s.generated import refused


def crd_documents(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


async def install_crd(api: client.ApiClient, body: dict[str, Any], *, timeout_s: float = 30.0) -> None:
    """Create (or replace) one CRD, then wait for its Established condition."""
    ext = client.ApiextensionsV1Api(api)
    name = body["metadata"]["name"]
    with refused(409) as exists:
        await ext.create_custom_resource_definition(cast(Any, body))
    if exists:
        current = await ext.read_custom_resource_definition(name)
        body = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        await ext.replace_custom_resource_definition(name, cast(Any, body))

    async def established() -> bool:
        crd = await ext.read_custom_resource_definition(name)
        return any(
            c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])
        ) and any(c.type == "NamesAccepted" and c.status == "True" for c in (crd.status.conditions or []))

    await wait_for(established, what=f"CRD {name} to be Established", timeout_s=timeout_s)

    # Established comes a moment before the storage serves requests (429 "storage is
    # (re)initializing"): list every served version once before returning.
    objects = client.CustomObjectsApi(api)
    group, plural = body["spec"]["group"], body["spec"]["names"]["plural"]
    for version in (v["name"] for v in body["spec"]["versions"] if v.get("served", True)):

        async def served(version: str = version) -> bool:
            if body["spec"].get("scope") == "Namespaced":
                await objects.list_namespaced_custom_object(group, version, "default", plural, limit=1)
            else:
                await objects.list_cluster_custom_object(group, version, plural, limit=1)
            return True

        await wait_for(served, what=f"{plural}.{group}/{version} to be served", timeout_s=timeout_s)


async def install_crd_files(api: client.ApiClient, paths: list[Path]) -> list[str]:
    names = []
    for path in paths:
        for doc in crd_documents(path):
            await install_crd(api, doc)
            names.append(doc["metadata"]["name"])
    return names
