"""The simulated MIG manager (``gpushare.devcluster.migsim``): NVIDIA's label and state contract,
what a simulated GPU can hold, and what the device plugin then advertises under each MIG strategy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from gpushare import constants as c
from gpushare.api.v1alpha1 import parse_pool
from gpushare.backends.nvidia import config, migconfig
from gpushare.devcluster import migsim
from gpushare.devcluster.migsim import FAILED, PAUSED, PENDING, SUCCESS, MigState, decide
from gpushare.devcluster.nvidiasim import advertised

A100 = "NVIDIA A100-SXM4-40GB"
TWO = ((A100, True), (A100, True))
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SECOND = timedelta(seconds=1)
OURS = {
    "version": "v1",
    "mig-configs": {
        **yaml.safe_load(migsim.CHART_DOCUMENT)["mig-configs"],
        "mixed": [
            {
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2},
            }
        ],
        "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2, "1g.5gb": 1}}],
        "h100-only": [
            {
                "devices": "all",
                "device-filter": ["0x233010DE"],
                "mig-enabled": True,
                "mig-devices": {"1g.10gb": 7},
            }
        ],
    },
}
#: The manager reads config.yaml only: a config under another key is not there.
CONFIGS = migsim.configs_in(
    {
        migsim.CHART_KEY: yaml.safe_dump(OURS),
        "gpushare-mig-0000aaaa": yaml.safe_dump({"version": "v1", "mig-configs": {"elsewhere": []}}),
        "not-mig-parted": "just: text",
    }
)


def test_the_manager_reads_only_config_yaml() -> None:
    assert "elsewhere" not in CONFIGS and {"all-disabled", "mixed", "too-big"} <= set(CONFIGS)
    assert migsim.configs_in({"other.yaml": migsim.CHART_DOCUMENT}) == {}
    assert migsim.configs_in({migsim.CHART_KEY: "version: ["}) == {}


OPERANDS = {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.dcgm": "true"}


def labelled(value: str, **more: str) -> dict[str, str]:
    return {c.LABEL_MIG_CONFIG: value, **OPERANDS, **more}


def run(value: str, seen: MigState | None = None, **kw: Any) -> tuple[migsim.Step, migsim.Step | None]:
    """The manager's pending step, then its step one delay later."""
    first = decide(labelled(value), seen, CONFIGS, TWO, T0, **kw)
    assert first is not None
    after = {**labelled(value), **first.labels}
    return first, decide(after, first.state, CONFIGS, TWO, T0 + SECOND, **kw)


def test_a_new_label_goes_pending_pauses_the_operands_then_succeeds_with_the_devices() -> None:
    pending, done = run("mixed")
    assert pending.state.state == PENDING and pending.again == SECOND
    assert pending.labels == {
        c.LABEL_MIG_CONFIG_STATE: PENDING,
        "nvidia.com/gpu.deploy.device-plugin": PAUSED,
        "nvidia.com/gpu.deploy.dcgm": PAUSED,
    }
    assert done is not None and done.state.state == SUCCESS and done.again is None
    assert done.labels == {c.LABEL_MIG_CONFIG_STATE: SUCCESS, **OPERANDS}
    devices = (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1))
    assert done.state.devices == (devices, devices)


def test_before_its_delay_it_waits_and_says_when_to_look_again() -> None:
    pending = decide(labelled("mixed"), None, CONFIGS, TWO, T0)
    assert pending is not None
    waiting = decide(labelled("mixed"), pending.state, CONFIGS, TWO, T0 + SECOND / 4)
    assert waiting is not None and waiting.state == pending.state and waiting.labels == {}
    assert waiting.again == SECOND * 3 / 4


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param(
            "too-big",
            "GPU 0: NVIDIA A100-SXM4-40GB has 7 compute and 8 memory slices; "
            "1 x 1g.5gb, 2 x 3g.20gb take 7 and 9",
            id="more-memory-slices-than-the-gpu",
        ),
        pytest.param("nowhere", "config nowhere is not in the MIG manager's ConfigMap", id="unknown-config"),
    ],
)
def test_a_geometry_the_gpu_cannot_hold_fails_and_leaves_the_devices(value: str, reason: str) -> None:
    before = MigState("all-disabled", SUCCESS, T0 - SECOND, ((), ()))
    _, done = run(value, before)
    assert done is not None and (done.state.state, done.state.reason) == (FAILED, reason)
    assert done.state.devices == ((), ())
    assert done.labels == {c.LABEL_MIG_CONFIG_STATE: FAILED, **OPERANDS}


def test_a_failure_leaves_nvsm_paused_as_nvidias_script_does() -> None:
    """reconfigure-mig.sh v0.10.0 pauses nvsm with the others; on failure it sets back only the
    other four, on success all five."""
    nvsm = {"nvidia.com/gpu.deploy.nvsm": "true"}

    def two_steps(value: str) -> migsim.Step:
        pending = decide(labelled(value, **nvsm), None, CONFIGS, TWO, T0)
        assert pending is not None and pending.labels["nvidia.com/gpu.deploy.nvsm"] == PAUSED
        after = {**labelled(value, **nvsm), **pending.labels}
        done = decide(after, pending.state, CONFIGS, TWO, T0 + SECOND)
        assert done is not None
        return done

    failed = two_steps("too-big")
    assert failed.state.state == FAILED
    assert failed.labels == {c.LABEL_MIG_CONFIG_STATE: FAILED, **OPERANDS}, "nvsm is not set back"
    applied = two_steps("mixed")
    assert applied.state.state == SUCCESS
    assert applied.labels == {c.LABEL_MIG_CONFIG_STATE: SUCCESS, **OPERANDS, **nvsm}


def test_the_same_value_again_does_nothing_and_no_label_nothing_at_all() -> None:
    _, done = run("mixed")
    assert done is not None
    assert decide(labelled("mixed"), done.state, CONFIGS, TWO, T0 + 10 * SECOND) is None
    assert decide(dict(OPERANDS), None, CONFIGS, TWO, T0) is None


def test_a_wedged_manager_stays_pending_with_the_operands_paused() -> None:
    pending, stuck = run("mixed", hang=True)
    assert stuck is None
    assert pending.labels["nvidia.com/gpu.deploy.device-plugin"] == PAUSED


def test_a_new_value_while_pending_starts_again() -> None:
    pending = decide(labelled("mixed"), None, CONFIGS, TWO, T0)
    assert pending is not None
    again = decide(labelled("all-1g.5gb"), pending.state, CONFIGS, TWO, T0 + SECOND / 2)
    assert again is not None and (again.state.label, again.state.state) == ("all-1g.5gb", PENDING)


def test_an_entry_applies_only_to_the_gpus_its_filter_names() -> None:
    _, done = run("h100-only")
    assert done is not None and done.state.state == SUCCESS and done.state.devices == ((), ())
    _, seven = run("all-1g.5gb")
    assert seven is not None and seven.state.devices == ((("1g.5gb", 7),),) * 2


@pytest.mark.parametrize(
    ("model", "devices", "why"),
    [
        pytest.param(A100, {"7g.40gb": 1}, None, id="whole"),
        pytest.param(A100, {"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}, None, id="four-two-one"),
        pytest.param(A100, {"1g.5gb": 8}, "holds at most 7 x 1g.5gb", id="eight-small"),
        pytest.param(A100, {"1g.10gb": 7}, "holds at most 4 x 1g.10gb", id="too-many-of-a-profile"),
        pytest.param(A100, {"1g.10gb": 1}, None, id="one-double-memory"),
        pytest.param(A100, {"3g.40gb": 1}, "has no MIG profile 3g.40gb", id="an-80gb-profile"),
        pytest.param("NVIDIA A10", {"1g.5gb": 1}, "NVIDIA A10 is not MIG-capable", id="no-mig"),
    ],
)
def test_what_a_gpu_can_hold(model: str, devices: dict[str, int], why: str | None) -> None:
    found = migsim.hold_problem(model, devices)
    assert (found is None) if why is None else (found is not None and why in found)


def test_its_record_round_trips() -> None:
    _, done = run("mixed")
    assert done is not None
    assert MigState.parse(done.state.to_json()) == done.state
    assert MigState.parse("{}") is None and MigState.parse(None) is None


SEVEN = (("1g.5gb", 7),)


@pytest.mark.parametrize(
    ("strategy", "devices", "replicas", "want"),
    [
        pytest.param(
            "mixed", [SEVEN, SEVEN], {}, {c.RES_NVIDIA_GPU: 0, "nvidia.com/mig-1g.5gb": 14}, id="mixed"
        ),
        pytest.param(
            "mixed",
            [SEVEN, ()],
            {"nvidia.com/mig-1g.5gb": 2},
            {c.RES_NVIDIA_GPU: 1, "nvidia.com/mig-1g.5gb": 14},
            id="mixed-time-sliced-one-whole-gpu",
        ),
        pytest.param(
            "single", [SEVEN, SEVEN], {c.RES_NVIDIA_GPU: 3}, {c.RES_NVIDIA_GPU: 42}, id="single-time-sliced"
        ),
        pytest.param("single", [SEVEN, (("7g.40gb", 1),)], {}, None, id="single-two-profiles-does-not-start"),
        pytest.param("none", [SEVEN, SEVEN], {}, {c.RES_NVIDIA_GPU: 2}, id="none-sees-whole-gpus"),
    ],
)
def test_what_the_plugin_advertises_of_mig_devices(
    strategy: str, devices: list[migsim.Devices], replicas: dict[str, int], want: dict[str, int] | None
) -> None:
    assert migsim.advertised(strategy, devices, replicas) == want


def test_the_plugin_config_gpushare_writes_for_a_mig_pool_advertises_its_slices() -> None:
    pool = parse_pool(
        {
            "metadata": {"name": "mig"},
            "spec": {
                "nodeSelector": {"matchLabels": {"np": "mig"}},
                "nvidia": {
                    "strategy": "MIG",
                    "mig": {
                        "geometry": [{"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}],
                        "timeSlicing": [{"profile": "1g.5gb", "replicas": 2}],
                    },
                },
            },
        }
    )
    nv = pool.spec.nvidia
    assert nv is not None and nv.mig is not None
    name = migconfig.name_of(nv.mig)
    configs = migsim.configs_in({migsim.CHART_KEY: migconfig.document(nv.mig)})
    first = decide(labelled(name), None, configs, TWO, T0)
    assert first is not None
    done = decide({**labelled(name), **first.labels}, first.state, configs, TWO, T0 + SECOND)
    assert done is not None and done.state.state == SUCCESS
    assert advertised(config.document(nv), 2, done.state.devices) == {
        c.RES_NVIDIA_GPU: "0",
        c.RES_NVIDIA_GPU_SHARED: "0",
        "nvidia.com/mig-1g.5gb": "8",
        "nvidia.com/mig-2g.10gb": "2",
        "nvidia.com/mig-3g.20gb": "2",
    }
