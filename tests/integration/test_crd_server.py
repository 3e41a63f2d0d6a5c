"""The generated GPUSharePool CRD on a real kube-apiserver: schema, CEL, defaults, status."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.api import parse_pool
from gpushare.api.v1alpha1 import GPUSharePoolSpec, LabelSelector


def pool(spec: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name or f"p-{secrets.token_hex(4)}"},
        "spec": spec,
    }


SEL = {"matchLabels": {"alibabacloud.com/nodepool-id": "np-a"}}
#: A MIG geometry entry: seven 1g.5gb slices on every GPU.
G7 = {"profiles": {"1g.5gb": 7}}
REPO = Path(__file__).resolve().parents[2]


async def create(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = await client.CustomObjectsApi(api).create_cluster_custom_object(
        c.GROUP, c.VERSION, c.PLURAL, body
    )
    return obj


@pytest.fixture
async def pools(api: client.ApiClient) -> Any:
    created: list[str] = []

    async def make(body: dict[str, Any]) -> dict[str, Any]:
        obj = await create(api, body)
        created.append(obj["metadata"]["name"])
        return obj

    yield make
    co = client.CustomObjectsApi(api)
    for name in created:
        try:
            await co.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


async def test_crd_is_established_and_served(api: client.ApiClient) -> None:
    crd = await client.ApiextensionsV1Api(api).read_custom_resource_definition(c.CRD_NAME)
    conds = {cond.type: cond.status for cond in crd.status.conditions}
    assert conds["Established"] == "True"
    assert crd.spec.names.short_names == [c.SHORT_NAME]
    res = await client.CustomObjectsApi(api).list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL)
    assert res["kind"] == "GPUSharePoolList"


INVALID = [
    pytest.param({"nodeSelector": {}}, "nodeSelector must not be empty", id="empty-nodeSelector"),
    pytest.param(
        {"nodeSelector": {"matchLabels": {}, "matchExpressions": []}},
        "nodeSelector must not be empty",
        id="empty-nodeSelector-lists",
    ),
    pytest.param(
        {"nodeSelector": SEL, "computeAllocation": True, "memoryIsolation": False},
        "computeAllocation: true requires memoryIsolation: true",
        id="compute-without-isolation",
    ),
    pytest.param(
        {"nodeSelector": SEL, "placement": "random"},
        'spec.placement: Unsupported value: "random"',
        id="bad-placement",
    ),
    pytest.param(
        {"nodeSelector": SEL, "rollout": {"maxUnavailable": "150%"}},
        "maxUnavailable must be an integer >= 1 or a percentage from 1% to 100%",
        id="maxUnavailable-150pct",
    ),
    pytest.param(
        {"nodeSelector": SEL, "rollout": {"maxUnavailable": 0}},
        "maxUnavailable must be an integer >= 1 or a percentage from 1% to 100%",
        id="maxUnavailable-0",
    ),
    pytest.param(
        {"nodeSelector": SEL, "rollout": {"maxUnavailable": "0%"}},
        "maxUnavailable must be an integer >= 1 or a percentage from 1% to 100%",
        id="maxUnavailable-0pct",
    ),
    pytest.param(
        {"nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "In"}]}},
        "In and NotIn need at least one value",
        id="In-without-values",
    ),
    pytest.param(
        {"nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": ["x"]}]}},
        "Exists and DoesNotExist take none",
        id="Exists-with-values",
    ),
    pytest.param(
        {"nodeSelector": SEL, "devicePlugin": {"readyTimeoutSeconds": 5}},
        "spec.devicePlugin.readyTimeoutSeconds: Invalid value: 5",
        id="readyTimeout-below-min",
    ),
    pytest.param({}, "spec.nodeSelector: Required value", id="missing-nodeSelector"),
    pytest.param(
        {"nodeSelector": {"matchLabels": {"cgpu": "true"}}},
        "nodeSelector must not use labels gpushare writes itself",
        id="selector-on-managed-label",
    ),
    pytest.param(
        {"nodeSelector": {"matchExpressions": [{"key": "gpushare.io/pool", "operator": "Exists"}]}},
        "nodeSelector must not use labels gpushare writes itself",
        id="selector-expression-on-managed-label",
    ),
    pytest.param(
        {
            "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}},
            "nvidia": {"strategy": "TimeSlicing", "replicas": 4},
        },
        "NVIDIA's GPU Feature Discovery rewrites when a node's GPUs are shared (nvidia.com/gpu.product): "
        "sharing appends -SHARED",
        id="nvidia-selector-on-gpu-product",
    ),
    pytest.param(
        {
            "nodeSelector": {
                "matchLabels": SEL["matchLabels"],
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.sharing-strategy", "operator": "In", "values": ["none"]},
                    {"key": "nvidia.com/mps.capable", "operator": "DoesNotExist"},
                ],
            },
        },
        "are shared (nvidia.com/mps.capable): sharing appends -SHARED",
        id="ack-selector-expressions-on-sharing-labels",
    ),
    pytest.param(
        {
            "nodeSelector": {
                "matchLabels": {"nvidia.com/gpu.replicas": "1", "nvidia.com/mig.strategy": "single"}
            }
        },
        "are shared (nvidia.com/mig.strategy): sharing appends -SHARED to "
        "nvidia.com/gpu.product and changes the replicas, strategy and MPS labels, so the pool would stop "
        "selecting the nodes it shares; select nodes by a label of your own, the node pool's (such as "
        "alibabacloud.com/nodepool-id), or gpushare.io/gpu.product",
        id="selector-on-replicas-and-mig-strategy",
    ),
    pytest.param(
        {"nodeSelector": {"matchLabels": {f"k{i}": "v" for i in range(33)}}},
        "spec.nodeSelector.matchLabels: Too many: 33: must have at most 32 items",
        id="selector-too-many-terms",
    ),
    pytest.param(
        {"nodeSelector": SEL, "placement": "spread", "nvidia": {"strategy": "TimeSlicing", "replicas": 4}},
        "a pool has exactly one backend",
        id="nvidia-with-an-ack-field",
    ),
    pytest.param(
        {"nodeSelector": SEL, "nvidia": {"strategy": "MPS"}},
        "TimeSlicing and MPS share each GPU between replicas >= 2",
        id="nvidia-sharing-without-replicas",
    ),
    pytest.param(
        {"nodeSelector": SEL, "nvidia": {"strategy": "MIG"}},
        'spec.nvidia: Invalid value: "object": a pool has one sharing: strategy MIG shares each GPU by '
        "the slices of nvidia.mig",
        id="mig-strategy-without-geometry",
    ),
    pytest.param(
        {"nodeSelector": SEL, "nvidia": {"strategy": "TimeSlicing", "replicas": 4, "mig": {"config": "c"}}},
        "nvidia.mig is for strategy MIG only",
        id="mig-beside-time-slicing",
    ),
    pytest.param(
        {
            "nodeSelector": SEL,
            "nvidia": {"strategy": "MIG", "mig": {"config": "all-1g.5gb", "geometry": [G7]}},
        },
        'spec.nvidia.mig: Invalid value: "object": nvidia.mig takes exactly one of geometry',
        id="mig-geometry-and-config",
    ),
    pytest.param(
        {"nodeSelector": SEL, "nvidia": {"strategy": "MIG", "mig": {"geometry": [G7, G7]}}},
        "an entry of mig.geometry without deviceFilter is for every GPU and stands alone",
        id="mig-two-entries-for-every-gpu",
    ),
    pytest.param(
        {
            "nodeSelector": SEL,
            "nvidia": {
                "strategy": "MIG",
                "mig": {"strategy": "single", "geometry": [{"profiles": {"1g.5gb": 3, "2g.10gb": 2}}]},
            },
        },
        "MIG strategy single advertises every slice as nvidia.com/gpu",
        id="mig-single-with-two-profiles",
    ),
    pytest.param(
        {
            "nodeSelector": SEL,
            "nvidia": {
                "strategy": "MIG",
                "mig": {"geometry": [G7], "timeSlicing": [{"profile": "2g.10gb", "replicas": 2}]},
            },
        },
        "mig.timeSlicing shares only profiles the geometry declares",
        id="mig-time-slicing-an-undeclared-profile",
    ),
    pytest.param(
        {
            "nodeSelector": SEL,
            "nvidia": {"strategy": "MIG", "mig": {"geometry": [{"profiles": {"1g.5GB": 7}}]}},
        },
        'spec.nvidia.mig.geometry[0]: Invalid value: "object": a MIG profile reads <compute slices 1-7>g.',
        id="mig-profile-misspelt",
    ),
    pytest.param(
        {
            "nodeSelector": SEL,
            "nvidia": {"strategy": "MIG", "mig": {"geometry": [{"profiles": {"1g.5gb": 8}}]}},
        },
        "spec.nvidia.mig.geometry[0].profiles.1g.5gb: Invalid value: 8: "
        "spec.nvidia.mig.geometry[0].profiles.1g.5gb in body should be less than or equal to 7",
        id="mig-eight-of-a-profile",
    ),
    pytest.param(
        {
            "nodeSelector": SEL,
            "nvidia": {"strategy": "MIG", "mig": {"geometry": [{**G7, "deviceFilter": ["20B0"]}]}},
        },
        'spec.nvidia.mig.geometry[0].deviceFilter[0]: Invalid value: "20B0": '
        "spec.nvidia.mig.geometry[0].deviceFilter[0] in body should match '^0x[0-9A-Fa-f]{8}$'",
        id="mig-device-filter-not-a-pci-id",
    ),
]


@pytest.mark.parametrize(("spec", "message"), INVALID)
async def test_invalid_pools_are_rejected_with_clear_messages(
    api: client.ApiClient, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as err:
        await create(api, pool(spec))
    assert err.value.status == 422, err.value.body
    status = json.loads(cast(bytes, err.value.body))
    assert message in status["message"], status["message"]
    assert status["message"].startswith(f'GPUSharePool.gpushare.io "{status["details"]["name"]}" is invalid')


async def test_a_selector_on_several_labels_sharing_rewrites_is_refused_naming_each(
    api: client.ApiClient,
) -> None:
    used = ("nvidia.com/gpu.product", "nvidia.com/gpu.replicas", "nvidia.com/mig.strategy")
    selector = {
        "matchLabels": dict.fromkeys(used[:2], "x"),
        "matchExpressions": [{"key": used[2], "operator": "Exists"}],
    }
    with pytest.raises(ApiException) as err:
        await create(api, pool({"nodeSelector": selector}))
    message = json.loads(cast(bytes, err.value.body))["message"]
    named = [key for key in c.NVIDIA_SHARING_LABELS if f"GPUs are shared ({key}):" in message]
    assert named == list(used), message


async def test_round_trip_applies_the_same_defaults_as_the_models(api: client.ApiClient, pools: Any) -> None:
    obj = await pools(pool({"nodeSelector": SEL}))
    spec = obj["spec"]
    # ACK's fields and the plugin's location have no server default (they depend on the pool's
    # backend, and an NVIDIA pool must be able to leave ACK's out): the models default them.
    for absent in ("memoryIsolation", "computeAllocation", "placement"):
        assert absent not in spec, spec
    assert spec["cleanup"] == "Restore"
    assert spec["devicePlugin"] == {"restart": "Rolling", "readyTimeoutSeconds": 300}
    assert spec["rollout"] == {"maxUnavailable": 1, "modeSwitch": "Wait"}
    assert spec["admission"] == {"mode": "Enforce"}
    # The server's defaults and the models' give the same pool, field for field.
    parsed = parse_pool(obj)
    expected = GPUSharePoolSpec(node_selector=LabelSelector(match_labels=SEL["matchLabels"]))
    assert parsed.spec == expected
    assert parsed.spec.mode == "cgpu"
    assert parsed.spec.device_plugin.namespace == "kube-system"
    assert parsed.spec.device_plugin.pod_selector.match_labels == {"name": "gpushare-device-plugin-ds"}
    # What the models dump (every field explicit) is accepted and reads back the same.
    again = await pools(pool(expected.dump()))
    assert parse_pool(again).spec == expected


async def test_an_nvidia_pool_gets_nvidias_defaults(api: client.ApiClient, pools: Any) -> None:
    obj = await pools(pool({"nodeSelector": SEL, "nvidia": {"strategy": "TimeSlicing", "replicas": 4}}))
    assert obj["spec"]["nvidia"] == {
        "strategy": "TimeSlicing",
        "replicas": 4,
        "renameByDefault": False,
        "failRequestsGreaterThanOne": False,
        "configMap": {"namespace": "nvidia-device-plugin", "name": "nvidia-device-plugin-configs"},
        "configPropagationSeconds": 90,
    }
    parsed = parse_pool(obj)
    assert parsed.spec.backend == "nvidia"
    assert parsed.spec.device_plugin.namespace == "nvidia-device-plugin"
    assert parsed.spec.device_plugin.pod_selector.match_labels == {
        "app.kubernetes.io/name": "nvidia-device-plugin"
    }


async def test_a_mig_pool_gets_its_defaults_and_parses_to_the_same_spec(
    api: client.ApiClient, pools: Any
) -> None:
    geometry = [{"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}, "deviceFilter": ["0x20B010DE"]}]
    obj = await pools(
        pool(
            {
                "nodeSelector": SEL,
                "nvidia": {
                    "strategy": "MIG",
                    "mig": {"geometry": geometry, "timeSlicing": [{"profile": "1g.5gb", "replicas": 2}]},
                },
            }
        )
    )
    mig = obj["spec"]["nvidia"]["mig"]
    assert mig["strategy"] == "mixed"
    assert mig["configMap"] == {"namespace": "gpu-operator", "name": "default-mig-parted-config"}
    assert obj["spec"]["nvidia"]["replicas"] == 1
    parsed = parse_pool(obj).spec.nvidia
    assert parsed is not None and parsed.mig is not None
    assert parsed.mig.profiles() == ("1g.5gb", "2g.10gb", "3g.20gb")
    assert parsed.mig.replicas_of("1g.5gb") == 2


async def test_the_nvidia_example_selects_by_a_label_sharing_never_changes(
    api: client.ApiClient, pools: Any
) -> None:
    example = yaml.safe_load((REPO / "examples" / "pool-nvidia-time-slicing.yaml").read_text())
    obj = await pools(pool(example["spec"]))
    assert obj["spec"]["nodeSelector"]["matchLabels"] == {c.LABEL_GPU_PRODUCT: "NVIDIA-A100-SXM4-40GB"}


async def test_partial_sub_objects_get_their_remaining_defaults(api: client.ApiClient, pools: Any) -> None:
    obj = await pools(
        pool(
            {
                "nodeSelector": SEL,
                "devicePlugin": {"namespace": "gpu-system"},
                "rollout": {"maxUnavailable": "25%"},
                "computeAllocation": True,
            }
        )
    )
    spec = obj["spec"]
    assert "podSelector" not in spec["devicePlugin"]  # the model's default, per backend
    assert parse_pool(obj).spec.device_plugin.pod_selector.match_labels == {
        "name": "gpushare-device-plugin-ds"
    }
    assert spec["devicePlugin"]["namespace"] == "gpu-system"
    assert spec["rollout"] == {"maxUnavailable": "25%", "modeSwitch": "Wait"}
    parsed = parse_pool(obj)
    assert parsed.spec.mode == "core_mem"
    assert parsed.spec.rollout.max_unavailable_for(8) == 2


async def test_explicit_pod_selector_replaces_the_default(api: client.ApiClient, pools: Any) -> None:
    sel = {"matchLabels": {"app": "my-plugin"}}
    obj = await pools(pool({"nodeSelector": SEL, "devicePlugin": {"podSelector": sel}}))
    assert obj["spec"]["devicePlugin"]["podSelector"] == sel


async def test_status_subresource_is_separate_from_spec(api: client.ApiClient, pools: Any) -> None:
    co = client.CustomObjectsApi(api)
    obj = await pools(pool({"nodeSelector": SEL}))
    name = obj["metadata"]["name"]
    assert obj["metadata"]["generation"] == 1
    # A status sent with create is dropped.
    assert "status" not in obj or not obj["status"].get("schedule")

    status = {
        "observedGeneration": 1,
        "schedule": "cgpu",
        "nodes": {"matched": 3, "ready": 2},
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "RollingOut",
                "message": "2/3 nodes ready",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    body = {**obj, "status": status}
    written = await co.replace_cluster_custom_object_status(c.GROUP, c.VERSION, c.PLURAL, name, body)
    assert written["status"]["nodes"]["ready"] == 2
    assert written["metadata"]["generation"] == 1  # status writes do not bump generation

    # A write to the main resource cannot change status, and bumps generation on a spec change.
    main = {**written, "spec": {**written["spec"], "placement": "spread"}, "status": {"schedule": "share"}}
    after = await co.replace_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name, main)
    assert after["spec"]["placement"] == "spread"
    assert after["metadata"]["generation"] == 2
    assert after["status"]["schedule"] == "cgpu"
    fresh = await co.get_cluster_custom_object_status(c.GROUP, c.VERSION, c.PLURAL, name)
    assert (fresh["status"]["nodes"]["matched"], fresh["status"]["nodes"]["ready"]) == (3, 2)
    assert parse_pool(fresh).status.conditions[0].reason == "RollingOut"


async def test_status_is_validated_too(api: client.ApiClient, pools: Any) -> None:
    co = client.CustomObjectsApi(api)
    obj = await pools(pool({"nodeSelector": SEL}))
    bad = {**obj, "status": {"conditions": [{"type": "Ready", "status": "Maybe"}]}}
    with pytest.raises(ApiException) as err:
        await co.replace_cluster_custom_object_status(
            c.GROUP, c.VERSION, c.PLURAL, obj["metadata"]["name"], bad
        )
    assert err.value.status == 422
    message = json.loads(cast(bytes, err.value.body))["message"]
    assert 'status.conditions[0].status: Unsupported value: "Maybe"' in message, message
