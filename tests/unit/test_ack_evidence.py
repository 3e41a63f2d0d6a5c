"""The effective mode of a node from what its device plugin advertises (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpushare import constants as c
from gpushare.backends.ack.evidence import (
    EFFECTIVE_CORE_MEM,
    EFFECTIVE_DEFAULT,
    EFFECTIVE_MEMORY,
    EFFECTIVE_NONE,
    advertises,
    effective_mode,
    expected_effective_mode,
    plugin_unregistered,
    stale_message,
    unregistered_message,
)
from gpushare.policy.planner import RestartRecord
from gpushare.policy.status import plugin_mode_state


@pytest.mark.parametrize(
    ("allocatable", "effective"),
    [
        ({c.RES_GPU_MEM: "30", c.RES_GPU_COUNT: "2", c.RES_GPU_CORE: "200"}, EFFECTIVE_CORE_MEM),
        ({c.RES_GPU_MEM: "30", c.RES_GPU_COUNT: "2", c.RES_GPU_CORE: "0"}, EFFECTIVE_MEMORY),
        ({c.RES_GPU_MEM: "30"}, EFFECTIVE_MEMORY),
        ({"nvidia.com/gpu": "2", c.RES_GPU_MEM: "0", c.RES_GPU_CORE: "0"}, EFFECTIVE_DEFAULT),
        ({"aliyun.com/gpu": "1"}, EFFECTIVE_DEFAULT),
        ({"cpu": "32", c.RES_GPU_MEM: "0"}, EFFECTIVE_NONE),
        ({}, EFFECTIVE_NONE),
        ({c.RES_GPU_MEM: "junk"}, EFFECTIVE_NONE),
    ],
)
def test_effective_mode(allocatable: dict[str, str], effective: str) -> None:
    assert effective_mode(allocatable) == effective


def test_what_each_labelled_mode_must_advertise() -> None:
    mem = {c.RES_GPU_MEM: "16", c.RES_GPU_COUNT: "1"}
    core = {**mem, c.RES_GPU_CORE: "100"}
    exclusive = {"nvidia.com/gpu": "1"}
    assert expected_effective_mode("cgpu") == expected_effective_mode("share") == EFFECTIVE_MEMORY
    assert advertises("cgpu", mem) and advertises("share", mem)
    assert not advertises("core_mem", mem), "core_mem needs gpu-core.percentage > 0"
    assert advertises("core_mem", core)
    assert not advertises("cgpu", core), "gpu-core.percentage must be 0/absent outside core_mem"
    assert not advertises("cgpu", exclusive) and not advertises("cgpu", {})
    assert advertises("default", exclusive) and not advertises("default", mem)


def test_stale_message_names_both_modes() -> None:
    msg = stale_message("core_mem", {c.RES_GPU_MEM: "16", c.RES_GPU_COUNT: "1"})
    assert msg == (
        "node advertises cgpu/share resources (aliyun.com/gpu-mem, no gpu-core.percentage) "
        "after switching to core_mem; the device plugin has not picked up the labels"
    )


def test_the_operators_slim_node_projection_keeps_what_the_effective_mode_reads() -> None:
    from gpushare.policy import NodeView

    for allocatable, mode in (
        ({"nvidia.com/gpu": "2", "cpu": "8"}, "default"),
        ({"aliyun.com/gpu-mem": "30", "aliyun.com/gpu-count": "2", "memory": "1Gi"}, "cgpu"),
    ):
        view = NodeView.project({"metadata": {"name": "n"}, "status": {"allocatable": allocatable}})
        assert "cpu" not in view.allocatable and "memory" not in view.allocatable
        assert effective_mode(view.allocatable) == effective_mode(
            NodeView.from_obj({"metadata": {"name": "n"}, "status": {"allocatable": allocatable}}).allocatable
        ), mode


@pytest.mark.parametrize(
    ("capacity", "allocatable", "unregistered"),
    [
        # A real kubelet whose plugin's stream ended: capacity stays, allocatable 0.
        ({c.RES_GPU_MEM: "16", c.RES_GPU_COUNT: "1"}, {c.RES_GPU_MEM: "0", c.RES_GPU_COUNT: "1"}, True),
        # After a kubelet restart, before the plugin registers again: both 0.
        ({c.RES_GPU_MEM: "0", c.RES_GPU_CORE: "0"}, {c.RES_GPU_MEM: "0", c.RES_GPU_CORE: "0"}, True),
        # Registered: something allocatable.
        ({c.RES_GPU_MEM: "16"}, {c.RES_GPU_MEM: "16"}, False),
        ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"}, False),
        # Never registered anything (no plugin resource known to the kubelet): not this case.
        ({"cpu": "2"}, {"cpu": "2"}, False),
        ({}, {}, False),
    ],
)
def test_plugin_unregistered(
    capacity: dict[str, str], allocatable: dict[str, str], unregistered: bool
) -> None:
    assert plugin_unregistered(capacity, allocatable) is unregistered


def test_an_unregistered_plugin_is_reported_as_such_not_as_a_stale_mode() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    long_ago = RestartRecord("h", "2026-12-01T10:00:00Z", "Done", "pool", "Restarted")
    capacity = {c.RES_GPU_MEM: "16", c.RES_GPU_CORE: "0"}
    allocatable = {c.RES_GPU_MEM: "0", c.RES_GPU_CORE: "0"}
    for never in (False, True):
        state = plugin_mode_state(
            "n1", "cgpu", allocatable, long_ago, ready_timeout_s=300, restart_never=never, now=now,
            capacity=capacity,
        )  # fmt: skip
        assert state is not None
        assert (state.phase, state.reason) == ("Degraded", "PluginNotRegistered")
        assert state.message == unregistered_message(capacity)
        assert "aliyun.com/gpu-mem=16" in state.message
    # Within the window of the operator's own restart it is still the restart in progress.
    recent = RestartRecord("h", "2026-12-01T11:59:00Z", "Done", "pool", "Restarted")
    state = plugin_mode_state(
        "n1",
        "cgpu",
        allocatable,
        recent,
        ready_timeout_s=300,
        restart_never=False,
        now=now,
        capacity=capacity,
    )
    assert state is not None
    assert (state.phase, state.reason) == ("Restarting", "PluginModePending")
    # Without capacity (kwok, pluginsim): the stale-mode report as before.
    state = plugin_mode_state(
        "n1", "cgpu", allocatable, long_ago, ready_timeout_s=300, restart_never=False, now=now
    )
    assert state is not None
    assert state.reason == "PluginModeStale"
