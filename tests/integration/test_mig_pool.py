"""A MIG pool on the local control plane with the operator running: the API accepts it, and until
this operator switches nodes to MIG it names the pool invalid (Ready False, InvalidSpec, the reason
naming spec.nvidia.mig) and leaves its node exactly as it was: no label, no annotation of its own."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import wait_for
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet
from support.operator_proc import OperatorProc
from support.pools import PoolApi


@pytest.fixture
async def pools(api: client.ApiClient, operator: OperatorProc) -> AsyncIterator[PoolApi]:
    helper = PoolApi(api)
    yield helper
    for name in helper.created:
        await helper.delete(name)


async def _ready(pools: PoolApi, name: str) -> dict[str, Any] | None:
    obj = await pools.get(name)
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next(
        (dict(x) for x in conditions if x.get("type") == "Ready" and x.get("status") == "False"), None
    )


async def test_a_mig_pool_is_named_invalid_and_its_node_left_as_it_was(
    api: client.ApiClient, fake_nodes: FakeNodeSet, pools: PoolApi
) -> None:
    np = f"np-mig-{secrets.token_hex(3)}"
    theirs = {c.LABEL_MIG_CONFIG: "all-disabled", c.LABEL_NVIDIA_CONFIG: "default"}
    (node,) = await fake_nodes.create(1, prefix="mig", pool_labels={POOL_LABEL: np}, extra_labels=theirs)
    core = client.CoreV1Api(api)
    before = await core.read_node(node)
    name = f"mig-{np}"
    mig = {"geometry": [{"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}]}
    await pools.create_pool(name, {POOL_LABEL: np}, nvidia={"strategy": "MIG", "mig": mig})

    async def named() -> dict[str, Any] | None:
        found = await _ready(pools, name)
        return found if found and found.get("reason") == "InvalidSpec" else None

    ready = await wait_for(named, what=f"GPUSharePool {name} Ready False (InvalidSpec)", timeout_s=60)
    assert ready["message"].startswith("spec.nvidia.mig: this gpushare accepts MIG pools but does not yet")
    after = await core.read_node(node)
    assert after.metadata.labels == before.metadata.labels
    ours = {k for k in (after.metadata.annotations or {}) if k.startswith(f"{c.GROUP}/")}
    assert ours == {k for k in (before.metadata.annotations or {}) if k.startswith(f"{c.GROUP}/")}
    assert c.ANNOTATION_OWNED not in (after.metadata.annotations or {})
