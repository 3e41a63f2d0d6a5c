"""The NVIDIA side of the plugin simulator: what NVIDIA's plugin and config-manager make a node
advertise, decided from the node's config label and the named-config ConfigMap (pure), and the
simulator writing once per change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.api.v1alpha1 import Nvidia
from gpushare.backends.nvidia import config
from gpushare.devcluster import nvidia as real
from gpushare.devcluster.nvidiasim import (
    Started,
    advertised,
    decide,
    effective_config,
    gfd_labels,
    parse_state,
    state_annotation,
)
from gpushare.gpu.fake import FakeGPU

CONFIGS = {"default": real.time_slicing_config(1), "ts4": real.time_slicing_config(4)}


def gpus(resources: dict[str, str] | None) -> dict[str, str]:
    assert resources is not None
    return {k: v for k, v in resources.items() if v != "0"}


# -- what a config advertises -------------------------------------------------------------------


def test_the_default_config_advertises_each_gpu_once() -> None:
    assert gpus(advertised(real.time_slicing_config(1), 2)) == {c.RES_NVIDIA_GPU: "2"}


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        # replicas x GPUs of nvidia.com/gpu; renameByDefault: of nvidia.com/gpu.shared instead
        # (NVIDIA's README, "Shared Access to GPUs"; the operator's own documents).
        (Nvidia(strategy="TimeSlicing", replicas=4), {c.RES_NVIDIA_GPU: "8"}),
        (Nvidia(strategy="TimeSlicing", replicas=3, rename_by_default=True), {c.RES_NVIDIA_GPU_SHARED: "6"}),
        (Nvidia(strategy="MPS", replicas=2), {c.RES_NVIDIA_GPU: "4"}),
        (Nvidia(strategy="MPS", replicas=5, rename_by_default=True), {c.RES_NVIDIA_GPU_SHARED: "10"}),
        (Nvidia(strategy="None"), {c.RES_NVIDIA_GPU: "2"}),
    ],
)
def test_the_operators_configs_advertise_replicas_times_gpus(spec: Nvidia, want: dict[str, str]) -> None:
    res = advertised(config.document(spec), 2)
    assert gpus(res) == want
    assert res is not None and set(res) == {c.RES_NVIDIA_GPU, c.RES_NVIDIA_GPU_SHARED}, "the other one: 0"


def test_a_resources_own_rename_wins_and_other_resources_are_ignored() -> None:
    doc = (
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 2\n      rename: nvidia.com/gpu.ts\n"
        "    - name: nvidia.com/mig-1g.5gb\n      replicas: 7\n"
    )
    assert gpus(advertised(doc, 3)) == {"nvidia.com/gpu.ts": "6"}


@pytest.mark.parametrize(
    "doc",
    [
        "version: v1\nsharing: [",
        "- a list",
        "sharing: 3",
        "sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n",
    ],
)
def test_a_config_the_plugin_cannot_read_registers_nothing(doc: str) -> None:
    assert advertised(doc, 2) is None


# -- which config is in effect ------------------------------------------------------------------


def test_the_labels_config_when_the_configmap_holds_it() -> None:
    assert effective_config("ts4", CONFIGS) == "ts4"


def test_no_label_is_the_default() -> None:
    assert effective_config("", CONFIGS) == "default"


def test_an_unknown_key_falls_back_to_the_default() -> None:
    # gpushare.devcluster.nvidia, seen on the real node: the sidecar exits on an unknown name, and
    # each restart applies DEFAULT_CONFIG first: the node falls back to the default count.
    assert effective_config("gpushare-ts4-00000000", CONFIGS) == "default"


def test_without_a_default_the_single_config_then_none() -> None:
    # FALLBACK_STRATEGIES=named,single (the DaemonSet's, NVIDIA's chart's).
    assert effective_config("nope", {"ts4": "x"}) == "ts4"
    assert effective_config("nope", {"ts4": "x", "ts2": "y"}) is None
    assert effective_config("", {}) is None


# -- when config-manager acts -------------------------------------------------------------------


def test_a_new_plugin_pod_applies_the_labels_config() -> None:
    assert decide("pod-1", "ts4", CONFIGS, None) == Started("pod-1", "ts4", "ts4")
    seen = Started("pod-0", "ts4", "ts4")
    assert decide("pod-1", "ts4", CONFIGS, seen) == Started("pod-1", "ts4", "ts4")


def test_a_label_change_switches_and_nothing_else_does() -> None:
    seen = Started("pod-1", "", "default")
    assert decide("pod-1", "", CONFIGS, seen) is None
    assert decide("pod-1", "ts4", CONFIGS, seen) == Started("pod-1", "ts4", "ts4")
    steady = Started("pod-1", "ts4", "ts4")
    # config-manager acts on a change of the label's value only: a key gone from the ConfigMap
    # (or edited) changes nothing while the plugin runs.
    assert decide("pod-1", "ts4", {"default": CONFIGS["default"]}, steady) is None


def test_an_unknown_key_falls_back_then_applies_once_the_key_appears() -> None:
    seen = Started("pod-1", "", "default")
    fell_back = decide("pod-1", "ts9", CONFIGS, seen)
    assert fell_back == Started("pod-1", "ts9", "default")
    assert decide("pod-1", "ts9", CONFIGS, fell_back) is None, "still crash-looping: nothing new"
    # the crash-looping sidecar's next restart finds the key
    assert decide("pod-1", "ts9", {**CONFIGS, "ts9": "x"}, fell_back) == Started("pod-1", "ts9", "ts9")


def test_state_annotation_round_trip() -> None:
    started = Started("uid-1", "ts9", "default")
    raw = state_annotation(started, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert parse_state(raw) == started
    assert parse_state(state_annotation(Started("u", "", None), datetime.now(UTC))) == Started("u", "", None)
    # ACK's annotation (no label), garbage, none: not NVIDIA's
    assert parse_state('{"pod":"u","mode":"cgpu"}') is None
    assert parse_state("not json") is None
    assert parse_state(None) is None


def test_gfd_labels_of_an_a100_node() -> None:
    labels = gfd_labels([FakeGPU(name="NVIDIA A100-SXM4-40GB", memory_mib=40960, mig=False)] * 2)
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels[c.LABEL_NVIDIA_GPU_COUNT] == "2"
    assert labels["nvidia.com/gpu.family"] == "ampere"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert gfd_labels([]) == {}


# -- the simulator writes once per change, only for what it plays ------------------------------


class _Core:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def patch_node_status(self, name: str, body: Any) -> None:
        self.calls.append(("status", name, body["status"]["allocatable"]))

    async def patch_node(self, name: str, body: Any) -> None:
        self.calls.append(("annotation", name, body))


def _node(name: str, label: str = "", plays: str = "nvidia", inventory: bool = True) -> dict[str, Any]:
    from gpushare.gpu.fake import FakeNVML
    from gpushare.gpu.inventory import collect_inventory

    inv = collect_inventory(FakeNVML(gpus=[FakeGPU(name="NVIDIA A100-SXM4-40GB", memory_mib=40960)] * 2))
    labels = {"gpushare.io/fake-plugin": plays, **({c.LABEL_NVIDIA_CONFIG: label} if label else {})}
    annotations = {c.ANNOTATION_INVENTORY: inv.to_json()} if inventory else {}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def _pod(node: str, uid: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"uid": uid}, "spec": {"nodeName": node}, "status": {"phase": phase}}


async def test_the_simulator_plays_nvidia_nodes_once_per_change() -> None:
    from kubernetes_asyncio import client

    from gpushare.devcluster.pluginsim import PluginSimulator

    async with client.ApiClient() as api:  # never called: the core API is replaced
        sim = PluginSimulator(api)
        core = _Core()
        sim.core = core  # type: ignore[assignment]
        await sim._node("ADDED", _node("nv", "ts4"))
        await sim._nvidia_pod("ADDED", _pod("nv", "u1", phase="Pending"))
        await sim._node("ADDED", _node("ack-node", plays="ack"))
        await sim._nvidia_pod("ADDED", _pod("nv", "u1"))
        assert core.calls == [], "no ConfigMap listed yet"
        await sim._nvidia_configmap("ADDED", {"data": CONFIGS})
        assert [(k, n, a) for k, n, a in core.calls if k == "status"] == [
            ("status", "nv", {c.RES_NVIDIA_GPU: "8", c.RES_NVIDIA_GPU_SHARED: "0"})
        ]
        core.calls.clear()
        # the same node again (a heartbeat, the annotation of a write not yet seen): nothing
        await sim._node("MODIFIED", _node("nv", "ts4"))
        await sim._nvidia_configmap("MODIFIED", {"data": {**CONFIGS, "other": "x"}})
        assert core.calls == []
        # relabelled to an unknown key: the default's count
        await sim._node("MODIFIED", _node("nv", "gone"))
        assert core.calls[0] == ("status", "nv", {c.RES_NVIDIA_GPU: "2", c.RES_NVIDIA_GPU_SHARED: "0"})
        # a node without inventory waits; a node that is not NVIDIA's is never written by this side
        core.calls.clear()
        await sim._node("ADDED", _node("nv2", "ts4", inventory=False))
        await sim._nvidia_pod("ADDED", _pod("nv2", "u2"))
        await sim._nvidia_pod("ADDED", _pod("ack-node", "u3"))
        assert core.calls == []
        await sim._node("MODIFIED", _node("nv2", "ts4"))
        assert [n for k, n, _ in core.calls if k == "status"] == ["nv2"]
