"""The NVIDIA plugin's named-config ConfigMap on the real apiserver: the keys the operator wrote
go once no node names them and no pool wants them (after ``--nvidia-config-retention``, shortened
here), also when the last pool on the ConfigMap is deleted; a key it did not write is untouched.

The operator (a real subprocess) drives an NVIDIA TimeSlicing pool over one kwok node, with a
ConfigMap and a Running plugin pod of the test's own; the test plays NVIDIA's plugin by setting
the node's allocatable ``nvidia.com/gpu``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import wait_for
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet
from support.operator_proc import OperatorProc
from support.pools import PoolApi

#: What the plugin's chart keeps in the ConfigMap: the operator must never change it.
FOREIGN = {"default": "version: v1\nflags:\n  migStrategy: none\n", "theirs": "kept as written"}
#: The retention the operator runs with here (default one hour).
RETENTION_S = 5
#: The bound stated in gpushare.backends.nvidia.configmap: within seconds of the later of the
#: retention and the last node naming the key (the pass looks again then), with room for a
#: loaded machine; a minute at most (a pool's resync) should a wake-up be missed.
BOUND_S = RETENTION_S + 20
WORST_S = RETENTION_S + 60 + 30


@pytest.fixture
async def pools(api: client.ApiClient) -> AsyncIterator[PoolApi]:
    helper = PoolApi(api)
    yield helper
    for name in helper.created:
        await helper.delete(name)


async def _configmap(api: client.ApiClient, namespace: str, name: str) -> tuple[dict[str, str], set[str]]:
    """The ConfigMap's data, and the keys its annotation says the operator wrote."""
    obj = await client.CoreV1Api(api).read_namespaced_config_map(name, namespace)
    ours = json.loads((obj.metadata.annotations or {}).get(c.ANNOTATION_CONFIGS) or "{}")
    return dict(obj.data or {}), set(ours)


async def _config_label(api: client.ApiClient, node: str) -> str | None:
    obj = await client.CoreV1Api(api).read_node(node)
    return cast(dict[str, str], obj.metadata.labels or {}).get(c.LABEL_NVIDIA_CONFIG)


async def _advertise(api: client.ApiClient, node: str, gpus: int) -> None:
    """What NVIDIA's plugin does once config-manager switched it: the node advertises the count."""
    body = {
        "status": {"capacity": {c.RES_NVIDIA_GPU: str(gpus)}, "allocatable": {c.RES_NVIDIA_GPU: str(gpus)}}
    }
    await client.CoreV1Api(api).patch_node_status(node, body)


async def test_the_operators_config_keys_go_once_no_node_names_them_and_foreign_keys_stay(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    start_operator: Callable[..., OperatorProc],
    pools: PoolApi,
    namespace: str,
) -> None:
    start_operator("--nvidia-config-retention", str(RETENTION_S))
    tag = secrets.token_hex(3)
    np, cm = f"np-nv-{tag}", f"nv-configs-{tag}"
    (node,) = await fake_nodes.create(1, prefix=f"nv{tag}", pool_labels={POOL_LABEL: np})
    core = client.CoreV1Api(api)
    await core.create_namespaced_config_map(namespace, cast(Any, {"metadata": {"name": cm}, "data": FOREIGN}))
    plugin = {
        "metadata": {"name": f"nvdp-{tag}", "labels": dict(c.NVIDIA_PLUGIN_LABELS)},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "nvidia-device-plugin", "image": "nvidia-device-plugin"}],
        },
    }
    await core.create_namespaced_pod(namespace, cast(Any, plugin))
    name = f"ts-{tag}"

    async def labelled(previous: str | None = None) -> str:
        async def check() -> str | None:
            value = await _config_label(api, node)
            return value if value is not None and value != previous else None

        found: str = await wait_for(check, what=f"{node} labelled with a new config", timeout_s=60)
        return found

    def nvidia(replicas: int) -> dict[str, Any]:
        return {
            "strategy": "TimeSlicing",
            "replicas": replicas,
            "configMap": {"namespace": namespace, "name": cm},
            "configPropagationSeconds": 1,
        }

    await pools.create_pool(name, {POOL_LABEL: np}, nvidia=nvidia(4), devicePlugin={"namespace": namespace})
    ts4 = await labelled()
    data, ours = await _configmap(api, namespace, cm)
    assert ours == {ts4} and data == {**FOREIGN, ts4: data[ts4]}
    await _advertise(api, node, 4)

    # Replicas 4 -> 2: the node is switched to the new config; the old one, named by no node any
    # more, goes within the bound.
    await pools.patch_spec(name, {"nvidia": nvidia(2)})
    ts2 = await labelled(ts4)
    unnamed = time.monotonic()
    await _advertise(api, node, 2)

    async def only_named() -> tuple[dict[str, str], set[str]] | None:
        data, ours = await _configmap(api, namespace, cm)
        return (data, ours) if ours == {ts2} else None

    data, ours = await wait_for(only_named, what=f"{ts4} gone from ConfigMap {cm}", timeout_s=WORST_S)
    took = time.monotonic() - unnamed
    assert took <= BOUND_S, f"{ts4} went {took:.0f}s after no node named it (bound {BOUND_S}s)"
    assert await _config_label(api, node) == ts2
    assert data == {**FOREIGN, ts2: data[ts2]}, (
        "no key of the operator's that no node names; foreign keys as written"
    )

    # The last pool on the ConfigMap deleted: once its finalizer is gone, nothing of the operator's
    # is left there (the node was restored first), and the foreign keys are as written.
    await pools.delete(name)
    assert await _config_label(api, node) is None
    data, ours = await _configmap(api, namespace, cm)
    assert (data, ours) == (FOREIGN, set())
