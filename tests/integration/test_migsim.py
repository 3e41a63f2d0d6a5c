"""The simulated MIG manager on a kwok node of the local control plane: ``pluginsim`` follows the
node's ``nvidia.com/mig.config`` as NVIDIA's manager does (``pending`` with the operands paused,
then ``success`` or ``failed``), and NVIDIA's simulated plugin then advertises the slices under the
MIG strategy of the node's plugin config, time-sliced as that config says.

The test writes what the operator will write for a MIG pool: the pool's mig-parted config into its
own key of the MIG manager's ConfigMap, the pool's plugin config into the plugin's, and the labels.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

import pytest
from kubernetes_asyncio import client, watch

from gpushare import constants as c
from gpushare.api.v1alpha1 import Nvidia, parse_pool
from gpushare.backends.nvidia import config, migconfig, migfile
from gpushare.devcluster import migsim, wait_for
from gpushare.devcluster.demo import NVIDIA_CONFIGS
from gpushare.devcluster.fakes import FakeNodeSet, ensure_nvidia_plugin
from gpushare.devcluster.pluginsim import ANNOTATION_MIG
from gpushare.gpu.fake import FakeGPU
from gpushare.k8s.generated import refused

A100 = FakeGPU(name="NVIDIA A100-SXM4-40GB", memory_mib=40960, mig=False)
#: The operands NVIDIA's GPU Operator deploys on a GPU node (their DaemonSets select ``=true``).
OPERANDS = {
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
}


def mig_spec(**mig: Any) -> Nvidia:
    pool = parse_pool(
        {
            "metadata": {"name": "m"},
            "spec": {"nodeSelector": {"matchLabels": {"np": "m"}}, "nvidia": {"strategy": "MIG", "mig": mig}},
        }
    )
    assert pool.spec.nvidia is not None
    return pool.spec.nvidia


MIXED = mig_spec(
    geometry=[{"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}],
    timeSlicing=[{"profile": "1g.5gb", "replicas": 2}],
)
#: Two 3g.20gb and a 1g.5gb take 9 of an A100-40GB's 8 memory slices.
TOO_BIG = mig_spec(geometry=[{"profiles": {"3g.20gb": 2, "1g.5gb": 1}}])


@pytest.fixture
async def configs(api: client.ApiClient) -> AsyncIterator[None]:
    """The plugin's and the MIG manager's ConfigMaps (created when absent), holding the two
    pools' configs (the plugin's under their own keys, the MIG manager's as entries of its
    config.yaml); they go afterwards."""
    core = client.CoreV1Api(api)
    await ensure_nvidia_plugin(api, NVIDIA_CONFIGS)
    with refused(409):
        await core.create_namespace(cast(Any, {"metadata": {"name": c.MIG_CONFIGS_NAMESPACE}}))
    with refused(409):
        body = {
            "metadata": {"name": c.MIG_CONFIGS_CONFIGMAP},
            "data": {migsim.CHART_KEY: migsim.CHART_DOCUMENT},
        }
        await core.create_namespaced_config_map(c.MIG_CONFIGS_NAMESPACE, cast(Any, body))
    plugin = {config.name_of(nv): config.document(nv) for nv in (MIXED, TOO_BIG)}
    mig = {migconfig.name_of(nv.mig): migconfig.document(nv.mig) for nv in (MIXED, TOO_BIG) if nv.mig}
    await core.patch_namespaced_config_map(
        c.NVIDIA_CONFIGS_CONFIGMAP, c.NVIDIA_PLUGIN_NAMESPACE, {"data": plugin}
    )
    await _mig_entries(api, mig)
    yield
    gone = {"data": dict.fromkeys(plugin)}
    await core.patch_namespaced_config_map(c.NVIDIA_CONFIGS_CONFIGMAP, c.NVIDIA_PLUGIN_NAMESPACE, gone)
    await _mig_entries(api, dict.fromkeys(mig))


async def _mig_entries(api: client.ApiClient, entries: Mapping[str, str | None]) -> None:
    """Add (a document) or delete (None) entries of the MIG manager's config.yaml, the one file it
    reads."""
    core = client.CoreV1Api(api)
    cm = await core.read_namespaced_config_map(c.MIG_CONFIGS_CONFIGMAP, c.MIG_CONFIGS_NAMESPACE)
    patch = migfile.unview(api.sanitize_for_serialization(cm), {"data": entries})
    if patch is not None and "data" in patch:
        await core.patch_namespaced_config_map(
            c.MIG_CONFIGS_CONFIGMAP, c.MIG_CONFIGS_NAMESPACE, {"data": patch["data"]}
        )


async def _node(api: client.ApiClient, name: str) -> dict[str, Any]:
    node = await client.CoreV1Api(api).read_node(name)
    return cast(dict[str, Any], api.sanitize_for_serialization(node))


async def _relabel_and_follow(
    api: client.ApiClient, name: str, value: str
) -> tuple[list[tuple[str, dict[str, str]]], dict[str, Any]]:
    """Set the node's ``nvidia.com/mig.config``, then follow the node by a watch from that write
    until the manager has finished: each state label value it moved to, with the operand labels
    then, and the node at the end. The state the node had at the write is not a move: any other
    write to the node (kwok's status, pluginsim's records) shows it again before the manager acts."""
    core = client.CoreV1Api(api)
    patched = await core.patch_node(name, {"metadata": {"labels": {c.LABEL_MIG_CONFIG: value}}})
    at_write = (patched.metadata.labels or {}).get(c.LABEL_MIG_CONFIG_STATE)
    seen: list[tuple[str, dict[str, str]]] = []
    w = watch.Watch()
    async with w.stream(
        core.list_node,
        field_selector=f"metadata.name={name}",
        resource_version=patched.metadata.resource_version,
        timeout_seconds=60,
    ) as stream:
        async for event in stream:
            labels = event["object"].metadata.labels or {}
            state = labels.get(c.LABEL_MIG_CONFIG_STATE)
            if state and state != (seen[-1][0] if seen else at_write):
                seen.append((state, {k: labels.get(k, "") for k in OPERANDS}))
            if seen and seen[-1][0] in (migsim.SUCCESS, migsim.FAILED):
                break
    return seen, await _node(api, name)


async def test_the_manager_walks_pending_to_success_and_the_plugin_advertises_the_slices(
    api: client.ApiClient, fake_nodes: FakeNodeSet, configs: None
) -> None:
    tag = secrets.token_hex(3)
    (name,) = await fake_nodes.create(
        1,
        prefix=f"mig{tag}",
        gpus_per_node=2,
        simulate_plugin=True,
        plugin="nvidia",
        gpus=[A100, A100],
        extra_labels={**OPERANDS, c.LABEL_NVIDIA_CONFIG: config.name_of(MIXED)},
    )
    assert MIXED.mig is not None and TOO_BIG.mig is not None
    before = (await _node(api, name))["metadata"]["labels"]
    assert c.LABEL_MIG_CONFIG_STATE not in before  # no label, nothing done

    seen, _ = await _relabel_and_follow(api, name, migconfig.name_of(MIXED.mig))
    assert seen == [
        (migsim.PENDING, dict.fromkeys(OPERANDS, migsim.PAUSED)),
        (migsim.SUCCESS, OPERANDS),
    ]

    async def done() -> dict[str, Any] | None:
        node = await _node(api, name)
        alloc = node["status"].get("allocatable", {})
        return node if alloc.get("nvidia.com/mig-3g.20gb") == "2" else None

    node = await wait_for(done, what="the slices advertised", timeout_s=30)
    alloc = node["status"]["allocatable"]
    # two GPUs, each 3g.20gb + 2g.10gb + 2 x 1g.5gb; the 1g.5gb time-sliced 2 ways
    assert {k: v for k, v in alloc.items() if k.startswith("nvidia.com/")} == {
        c.RES_NVIDIA_GPU: "0",
        c.RES_NVIDIA_GPU_SHARED: "0",
        "nvidia.com/mig-1g.5gb": "8",
        "nvidia.com/mig-2g.10gb": "2",
        "nvidia.com/mig-3g.20gb": "2",
    }

    # A geometry the GPU cannot hold: pending, then failed; the slices stay as they were, and the
    # manager's record says why.
    seen, after = await _relabel_and_follow(api, name, migconfig.name_of(TOO_BIG.mig))
    assert [state for state, _ in seen] == [migsim.PENDING, migsim.FAILED]
    record = migsim.MigState.parse(after["metadata"]["annotations"][ANNOTATION_MIG])
    assert record is not None and record.reason.startswith("GPU 0: NVIDIA A100-SXM4-40GB has 7 compute")
    assert after["status"]["allocatable"]["nvidia.com/mig-3g.20gb"] == "2"

    # Back to NVIDIA's all-disabled: whole GPUs again, and no MIG device left advertised.
    seen, after = await _relabel_and_follow(api, name, "all-disabled")
    assert [state for state, _ in seen] == [migsim.PENDING, migsim.SUCCESS]

    async def whole() -> dict[str, str] | None:
        alloc = (await _node(api, name))["status"]["allocatable"]
        return alloc if alloc.get(c.RES_NVIDIA_GPU) == "2" else None

    alloc = await wait_for(whole, what="whole GPUs advertised again", timeout_s=30)
    assert [v for k, v in alloc.items() if k.startswith(c.RES_NVIDIA_MIG_PREFIX)] == ["0", "0", "0"]
