"""The MIG backend (``gpushare.backends.nvidia.mig``): a pool's geometry is a node's mode, any
change of it a guarded mode switch; a node is confirmed only on the MIG manager's ``success`` for
its config with the geometry's devices advertised (never on a state from before the switch); a node
leaving is given back its MIG config, or ``all-disabled``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.api.v1alpha1 import parse_pool
from gpushare.backends import backend_for
from gpushare.backends.nvidia import MIG, NVIDIA, migconfig
from gpushare.policy.planner import Action, Ownership, changed_by, plan
from gpushare.policy.views import NodeView, PodView

NP = "np"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
MIXED = {"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}
G7 = {"profiles": {"1g.5gb": 7}}


def pool(name: str = "mig", mode_switch: str = "Wait", **mig: Any) -> Any:
    spec = {
        "nodeSelector": {"matchLabels": {NP: "m"}},
        "nvidia": {"strategy": "MIG", "mig": mig},
        "rollout": {"modeSwitch": mode_switch},
    }
    return parse_pool({"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": name}, "spec": spec})


def mig_name(p: Any) -> str:
    return MIG.pool_mode(p.spec)


def test_a_mig_pool_is_the_mig_backends_and_owns_both_labels() -> None:
    p = pool(geometry=[MIXED])
    assert backend_for(p.spec) is MIG
    assert set(MIG.labels_for(p.spec)) == {c.LABEL_NVIDIA_CONFIG, c.LABEL_MIG_CONFIG}
    assert MIG.labels_for(p.spec)[c.LABEL_MIG_CONFIG] == migconfig.name_of(p.spec.nvidia.mig)


@pytest.mark.parametrize(
    ("state", "alloc", "confirmed"),
    [
        pytest.param(
            "success",
            {"nvidia.com/mig-3g.20gb": "2", "nvidia.com/mig-2g.10gb": "2", "nvidia.com/mig-1g.5gb": "4"},
            True,
            id="success-with-devices",
        ),
        pytest.param(
            "pending",
            {"nvidia.com/mig-3g.20gb": "2", "nvidia.com/mig-2g.10gb": "2", "nvidia.com/mig-1g.5gb": "4"},
            False,
            id="pending",
        ),
        pytest.param(
            "failed",
            {"nvidia.com/mig-3g.20gb": "2", "nvidia.com/mig-2g.10gb": "2", "nvidia.com/mig-1g.5gb": "4"},
            False,
            id="failed",
        ),
        # The previous config's success, its whole GPUs still advertised: stale, not taken.
        pytest.param("success", {c.RES_NVIDIA_GPU: "2"}, False, id="stale-success-old-devices"),
        pytest.param(
            "success",
            {"nvidia.com/mig-3g.20gb": "2", "nvidia.com/mig-2g.10gb": "2", "nvidia.com/mig-1g.5gb": "2"},
            False,
            id="success-too-few",
        ),
    ],
)
def test_a_node_is_confirmed_only_on_success_with_the_geometrys_devices(
    state: str, alloc: dict[str, str], confirmed: bool
) -> None:
    p = pool(geometry=[MIXED])
    mode = mig_name(p)
    labels = {**MIG.labels_for(p.spec), c.LABEL_MIG_CONFIG_STATE: state, c.LABEL_NVIDIA_GPU_COUNT: "2"}
    assert MIG.advertises(mode, alloc, labels) is confirmed


def test_success_for_another_config_is_not_this_ones() -> None:
    p = pool(geometry=[MIXED])
    mode = mig_name(p)
    alloc = {"nvidia.com/mig-3g.20gb": "1", "nvidia.com/mig-2g.10gb": "1", "nvidia.com/mig-1g.5gb": "2"}
    labels = {
        **MIG.labels_for(p.spec),
        c.LABEL_MIG_CONFIG: "all-balanced",
        c.LABEL_MIG_CONFIG_STATE: "success",
    }
    assert not MIG.advertises(mode, alloc, labels)
    assert MIG.advertises(mode, alloc, {**labels, c.LABEL_MIG_CONFIG: mode})  # GPUs unknown: a multiple


def base_of() -> dict[str, str]:
    return {"nvidia.com/mig-3g.20gb": "1", "nvidia.com/mig-2g.10gb": "1"}


def test_a_time_sliced_profile_counts_its_replicas() -> None:
    p = pool(geometry=[MIXED], timeSlicing=[{"profile": "1g.5gb", "replicas": 2}])
    mode = mig_name(p)
    labels = {**MIG.labels_for(p.spec), c.LABEL_MIG_CONFIG_STATE: "success", c.LABEL_NVIDIA_GPU_COUNT: "1"}
    # The same geometry without time-slicing is another plugin config: its 1g.5gb counts once.
    plain = pool(geometry=[MIXED])
    other = {**labels, **MIG.labels_for(plain.spec)}
    assert other[c.LABEL_MIG_CONFIG] == mode
    assert MIG.advertises(mode, {**base_of(), "nvidia.com/mig-1g.5gb": "2"}, other)
    base = base_of()
    assert MIG.advertises(mode, {**base, "nvidia.com/mig-1g.5gb": "4"}, labels)
    assert not MIG.advertises(mode, {**base, "nvidia.com/mig-1g.5gb": "2"}, labels)


def test_a_geometry_change_under_a_running_mig_pod_is_held_with_wait() -> None:
    old, new = pool(geometry=[MIXED]), pool(geometry=[G7])
    labels = {NP: "m", **MIG.labels_for(old.spec), c.LABEL_POOL: "mig"}
    owned = Ownership("mig", dict.fromkeys(c.MANAGED_LABELS)).dump()
    node = NodeView("n1", labels, annotations={c.ANNOTATION_OWNED: owned})
    running = PodView(
        "default", "job", node_name="n1", phase="Running", requests={"nvidia.com/mig-1g.5gb": 1}
    )
    p = plan([new], [node], [running], now=NOW).by_node()["n1"]
    assert p.action is Action.HOLD
    assert p.mode_switch == (mig_name(old), mig_name(new))
    assert [x.ref for x in p.blocking_pods] == ["default/job"]
    assert c.LABEL_MIG_CONFIG not in p.label_patch
    done = PodView("default", "job", node_name="n1", phase="Succeeded", requests={"nvidia.com/mig-1g.5gb": 1})
    p = plan([new], [node], [done], now=NOW).by_node()["n1"]
    assert p.action is Action.APPLY and p.label_patch[c.LABEL_MIG_CONFIG] == mig_name(new)


@pytest.mark.parametrize(("prior", "back"), [(None, "all-disabled"), ("all-balanced", "all-balanced")])
def test_a_node_leaving_gets_its_mig_config_back_or_all_disabled(prior: str | None, back: str) -> None:
    p = pool(geometry=[MIXED])
    before = {c.LABEL_MIG_CONFIG: prior, c.LABEL_NVIDIA_CONFIG: None}
    labels = {NP: "m", **MIG.labels_for(p.spec), c.LABEL_POOL: "mig"}
    owned = Ownership("mig", {**dict.fromkeys(c.MANAGED_LABELS), **before}).dump()
    node = NodeView("n1", labels, annotations={c.ANNOTATION_OWNED: owned})
    got = plan([p], [node], now=NOW, deleting={"mig"}).by_node()["n1"]
    assert got.action is Action.RESTORE
    assert got.label_patch[c.LABEL_MIG_CONFIG] == back
    assert got.label_patch[c.LABEL_NVIDIA_CONFIG] is None


def test_a_node_whose_pool_is_gone_is_restored_by_the_backend_that_labelled_it() -> None:
    p = pool(geometry=[MIXED])
    prior = dict.fromkeys(c.MANAGED_LABELS)
    mig_node = {**MIG.labels_for(p.spec), c.LABEL_POOL: "gone"}
    assert changed_by(mig_node, prior)[0] is MIG
    ts_node = {c.LABEL_NVIDIA_CONFIG: "gpushare-ts4-0123abcd", c.LABEL_POOL: "gone"}
    assert changed_by(ts_node, prior)[0] is NVIDIA
    assert MIG not in changed_by({c.LABEL_POOL: "gone"}, prior)


def test_a_config_gpushare_did_not_write_needs_success_for_it_and_some_gpu_device() -> None:
    labels = {c.LABEL_MIG_CONFIG: "all-1g.5gb", c.LABEL_MIG_CONFIG_STATE: "success"}
    assert MIG.advertises("all-1g.5gb", {c.RES_NVIDIA_GPU: "2"}, labels)
    assert MIG.advertises("all-1g.5gb", {"nvidia.com/mig-1g.5gb": "14"}, labels)
    assert not MIG.advertises("all-1g.5gb", {c.RES_NVIDIA_GPU: "0"}, labels)
    assert not MIG.advertises(
        "all-1g.5gb", {c.RES_NVIDIA_GPU: "2"}, {**labels, c.LABEL_MIG_CONFIG_STATE: "pending"}
    )
    assert not MIG.advertises("all-disabled", {c.RES_NVIDIA_GPU: "2"}, labels)
