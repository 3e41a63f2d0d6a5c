"""A MIG pool's spec (``spec.nvidia.mig``): what the API accepts and refuses, in words naming the
field and the value; the mig-parted config and the plugin config gpushare renders from it; and
what the rest of the operator makes of such a pool until nodes are switched to MIG."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from gpushare import constants as c
from gpushare.admission import Context, evaluate, node_info
from gpushare.api.v1alpha1 import PoolValidationError, parse_pool
from gpushare.backends.nvidia import config, migconfig
from gpushare.policy.planner import Action, plan
from gpushare.policy.views import NodeView

NP = "alibabacloud.com/nodepool-id"
G7 = {"profiles": {"1g.5gb": 7}}
MIXED = {"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}}


def mig_pool(name: str = "mig", np: str = "np-mig", **mig: Any) -> Any:
    return parse_pool(
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": {NP: np}}, "nvidia": {"strategy": "MIG", "mig": mig}},
        }
    )


def problems(nvidia: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(PoolValidationError) as info:
        parse_pool(
            {
                "metadata": {"name": "bad"},
                "spec": {"nodeSelector": {"matchLabels": {NP: "x"}}, "nvidia": nvidia},
            }
        )
    assert str(info.value).startswith("GPUSharePool/bad: ")
    return [(p.field, p.message) for p in info.value.errors]


def test_a_geometry_per_gpu_model_with_time_sliced_slices_is_accepted() -> None:
    h100 = {"deviceFilter": ["0x233010DE"], "profiles": {"1g.10gb": 7}}
    a100 = {"deviceFilter": ["0x20B010DE", "0x20B210DE"], **MIXED}
    pool = mig_pool(geometry=[a100, h100], timeSlicing=[{"profile": "1g.5gb", "replicas": 4}])
    mig = pool.spec.nvidia.mig
    assert (mig.strategy, mig.config_map.namespace, mig.config_map.name) == (
        "mixed",
        "gpu-operator",
        "default-mig-parted-config",
    )
    assert mig.profiles() == ("1g.10gb", "1g.5gb", "2g.10gb", "3g.20gb")
    assert (mig.replicas_of("1g.5gb"), mig.replicas_of("1g.10gb")) == (4, 1)
    assert pool.spec.backend == "nvidia" and pool.spec.nvidia.replicas == 1


def test_a_named_config_of_the_mig_managers_configmap_is_accepted() -> None:
    mig = mig_pool(config="all-1g.5gb", strategy="single").spec.nvidia.mig
    assert (mig.config, mig.geometry, mig.profiles()) == ("all-1g.5gb", None, ())
    assert migconfig.name_of(mig) == "all-1g.5gb"


@pytest.mark.parametrize(
    ("nvidia", "field", "says"),
    [
        pytest.param(
            {"strategy": "MIG"},
            "spec.nvidia",
            "nvidia.mig is for strategy MIG only (strategy MIG without nvidia.mig)",
            id="mig-without-geometry",
        ),
        pytest.param(
            {"strategy": "TimeSlicing", "replicas": 4, "mig": {"config": "c"}},
            "spec.nvidia",
            "(nvidia.mig is set with strategy TimeSlicing)",
            id="two-sharings",
        ),
        pytest.param(
            {"strategy": "MIG", "renameByDefault": True, "mig": {"config": "c"}},
            "spec.nvidia",
            "(strategy MIG with renameByDefault: true)",
            id="renamed-slices",
        ),
        pytest.param(
            {"strategy": "MIG", "replicas": 4, "mig": {"config": "c"}},
            "spec.nvidia",
            "strategies None and MIG take replicas 1 (MIG time-slices its slices by mig.timeSlicing) "
            "(strategy MIG with replicas 4)",
            id="replicas-on-mig",
        ),
        pytest.param(
            {"strategy": "MIG", "mig": {"config": "c", "geometry": [G7]}},
            "spec.nvidia.mig",
            "exactly one of geometry",
            id="geometry-and-config",
        ),
        pytest.param({"strategy": "MIG", "mig": {}}, "spec.nvidia.mig", "(neither is set)", id="neither"),
        pytest.param(
            {"strategy": "MIG", "mig": {"geometry": [G7, {"deviceFilter": ["0x20B010DE"], **G7}]}},
            "spec.nvidia.mig",
            "without deviceFilter is for every GPU and stands alone; with several entries each names the GPU "
            "models it is for (an entry without deviceFilter among 2)",
            id="unfiltered-entry-beside-another",
        ),
        pytest.param(
            {"strategy": "MIG", "mig": {"strategy": "single", "geometry": [MIXED]}},
            "spec.nvidia.mig",
            "advertises every slice as nvidia.com/gpu, so every GPU takes one and the same profile "
            "(profiles 1g.5gb, 2g.10gb, 3g.20gb in 1 entry)",
            id="single-with-three-profiles",
        ),
        pytest.param(
            {
                "strategy": "MIG",
                "mig": {
                    "strategy": "single",
                    "geometry": [
                        {"deviceFilter": ["0x20B010DE"], **G7},
                        {"deviceFilter": ["0x233010DE"], "profiles": {"1g.10gb": 7}},
                    ],
                },
            },
            "spec.nvidia.mig",
            "(profiles 1g.10gb, 1g.5gb in 2 entries)",
            id="single-with-a-profile-per-model",
        ),
        pytest.param(
            {
                "strategy": "MIG",
                "mig": {"geometry": [G7], "timeSlicing": [{"profile": "2g.10gb", "replicas": 2}]},
            },
            "spec.nvidia.mig",
            "mig.timeSlicing shares only profiles the geometry declares (2g.10gb not in 1g.5gb)",
            id="slicing-an-undeclared-profile",
        ),
        pytest.param(
            {"strategy": "MIG", "mig": {"geometry": [{"profiles": {"1g.5GB": 7, "8g.80gb": 1}}]}},
            "spec.nvidia.mig.geometry[0].profiles",
            "a MIG profile reads <compute slices 1-7>g.<memory>gb, optionally +me, as NVIDIA names it "
            "(1g.5gb, 3g.40gb, 1g.10gb+me) ('1g.5GB', '8g.80gb')",
            id="misspelt-profiles",
        ),
        pytest.param(
            {"strategy": "MIG", "mig": {"geometry": [{"profiles": {"1g.5gb": 8}}]}},
            "spec.nvidia.mig.geometry[0].profiles.1g.5gb",
            "Input should be less than or equal to 7 (got 8)",
            id="eight-of-a-profile",
        ),
        pytest.param(
            {"strategy": "MIG", "mig": {"geometry": [{"deviceFilter": ["20B0"], **G7}]}},
            "spec.nvidia.mig.geometry[0].deviceFilter",
            "'20B0' is not a PCI device id such as 0x20B010DE (device, then vendor)",
            id="filter-not-a-pci-id",
        ),
        pytest.param(
            {
                "strategy": "MIG",
                "mig": {"geometry": [G7], "timeSlicing": [{"profile": "1g.5gb", "replicas": 1}]},
            },
            "spec.nvidia.mig.timeSlicing[0].replicas",
            "Input should be greater than or equal to 2 (got 1)",
            id="one-replica-is-no-slicing",
        ),
    ],
)
def test_a_bad_mig_spec_is_refused_naming_field_value_and_rule(
    nvidia: dict[str, Any], field: str, says: str
) -> None:
    ((where, message),) = problems(nvidia)
    assert where == field
    assert says in message, message


def test_problems_of_several_fields_are_reported_together() -> None:
    found = problems(
        {"strategy": "MIG", "mig": {"geometry": [{"deviceFilter": ["x"], "profiles": {"9g.1gb": 1}}]}}
    )
    assert [f for f, _ in found] == [
        "spec.nvidia.mig.geometry[0].deviceFilter",
        "spec.nvidia.mig.geometry[0].profiles",
    ]


def test_equal_geometries_hash_alike_and_any_edit_renames_the_config() -> None:
    one, again = mig_pool(geometry=[MIXED]).spec.nvidia, mig_pool(geometry=[MIXED]).spec.nvidia
    assert one == again and hash(one) == hash(again)
    name = migconfig.name_of(one.mig)
    assert migconfig.owned(name) and name.startswith("gpushare-mig-")
    assert migconfig.name_of(again.mig) == name
    assert migconfig.name_of(mig_pool(geometry=[G7]).spec.nvidia.mig) != name
    filtered = mig_pool(geometry=[{"deviceFilter": ["0x20B010DE"], **MIXED}]).spec.nvidia.mig
    assert migconfig.name_of(filtered) != name
    # Time-slicing is the plugin's: the slices, and their config, stay the same.
    sliced = mig_pool(geometry=[MIXED], timeSlicing=[{"profile": "1g.5gb", "replicas": 2}]).spec.nvidia
    assert migconfig.name_of(sliced.mig) == name
    assert config.name_of(sliced) != config.name_of(one)
    assert not migconfig.owned("all-1g.5gb")


def test_the_mig_parted_document_holds_the_geometry_under_its_name() -> None:
    a100 = {"deviceFilter": ["0x20B010DE"], **MIXED}
    h100 = {"deviceFilter": ["0x233010DE"], "profiles": {"1g.10gb": 7}}
    mig = mig_pool(geometry=[a100, h100]).spec.nvidia.mig
    name = migconfig.name_of(mig)
    assert yaml.safe_load(migconfig.document(mig)) == {
        "version": "v1",
        "mig-configs": {
            name: [
                {
                    "devices": "all",
                    "device-filter": ["0x20B010DE"],
                    "mig-enabled": True,
                    "mig-devices": {"1g.5gb": 1, "2g.10gb": 1, "3g.20gb": 1},
                },
                {
                    "devices": "all",
                    "device-filter": ["0x233010DE"],
                    "mig-enabled": True,
                    "mig-devices": {"1g.10gb": 7},
                },
            ]
        },
    }
    assert migconfig.profiles_in(migconfig.document(mig), name) == {
        "1g.5gb": 1,
        "2g.10gb": 1,
        "3g.20gb": 1,
        "1g.10gb": 7,
    }
    assert migconfig.profiles_in(migconfig.document(mig), "all-disabled") is None
    assert migconfig.profiles_in("version: [", name) is None


@pytest.mark.parametrize(
    ("strategy", "resource"),
    [
        pytest.param("mixed", "nvidia.com/mig-1g.5gb", id="mixed"),
        pytest.param("single", c.RES_NVIDIA_GPU, id="single"),
    ],
)
def test_the_plugin_config_sets_the_mig_strategy_and_slices_the_time_sliced_profile(
    strategy: str, resource: str
) -> None:
    nv = mig_pool(
        strategy=strategy, geometry=[G7], timeSlicing=[{"profile": "1g.5gb", "replicas": 3}]
    ).spec.nvidia
    assert yaml.safe_load(config.document(nv)) == {
        "version": "v1",
        "flags": {"migStrategy": strategy},
        "sharing": {
            "timeSlicing": {
                "failRequestsGreaterThanOne": False,
                "resources": [{"name": resource, "replicas": 3}],
            }
        },
    }
    name = config.ConfigName.parse(config.name_of(nv))
    assert name is not None and (name.strategy, name.replicas, name.renamed) == ("MIG", 1, False)
    plain = mig_pool(strategy=strategy, geometry=[G7]).spec.nvidia
    assert yaml.safe_load(config.document(plain)) == {"version": "v1", "flags": {"migStrategy": strategy}}


def test_the_planner_labels_a_mig_pools_nodes_with_the_geometry_and_the_plugin_config() -> None:
    pool = mig_pool(geometry=[G7])
    labels = {NP: "np-mig", c.LABEL_NVIDIA_CONFIG: "theirs"}
    cp = plan([pool], [NodeView("n1", labels)], now=datetime(2026, 1, 1, tzinfo=UTC))
    p = cp.by_node()["n1"]
    assert cp.invalid_pools == {}
    assert p.action is Action.APPLY
    assert pool.spec.nvidia is not None and pool.spec.nvidia.mig is not None
    assert p.label_patch == {
        c.LABEL_NVIDIA_CONFIG: config.name_of(pool.spec.nvidia),
        c.LABEL_MIG_CONFIG: migconfig.name_of(pool.spec.nvidia.mig),
        c.LABEL_POOL: "mig",
    }


def _ctx(pool: Any) -> Context:
    node = node_info(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "m1", "labels": {NP: "np-mig"}},
            "status": {"allocatable": {}},
        }
    )
    return Context.build((pool,), (node,))


PROFILE = "GS022-nvidia-mig-profile-not-offered"
WHOLE = "GS023-nvidia-whole-gpu-on-mig"


def _pod(resource: str) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"limits": {resource: 1}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [container], "nodeSelector": {NP: "np-mig"}},
    }


@pytest.mark.parametrize(
    ("mig", "resource", "rule"),
    [
        pytest.param({"geometry": [MIXED]}, "nvidia.com/mig-2g.10gb", None, id="mixed-declared-profile"),
        pytest.param({"geometry": [MIXED]}, "nvidia.com/mig-7g.40gb", PROFILE, id="mixed-undeclared-profile"),
        pytest.param({"geometry": [MIXED]}, c.RES_NVIDIA_GPU, WHOLE, id="mixed-whole-gpu"),
        pytest.param(
            {"config": "all-balanced"}, "nvidia.com/mig-7g.40gb", None, id="named-config-any-profile"
        ),
        pytest.param({"strategy": "single", "geometry": [G7]}, c.RES_NVIDIA_GPU, None, id="single-as-gpu"),
        pytest.param(
            {"strategy": "single", "geometry": [G7]},
            "nvidia.com/mig-1g.5gb",
            PROFILE,
            id="single-no-mig-name",
        ),
    ],
)
def test_a_mig_pool_offers_the_resources_its_strategy_advertises(
    mig: dict[str, Any], resource: str, rule: str | None
) -> None:
    """A MIG pool's own rules (GS022, GS023; more in test_admission_nvidia.py)."""
    findings = evaluate(_pod(resource), _ctx(mig_pool(**mig)))
    assert [f.rule_id for f in findings] == ([] if rule is None else [rule]), findings
