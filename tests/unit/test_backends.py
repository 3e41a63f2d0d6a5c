"""The sharing-backend seam: what the planner and the status read through it is ACK's, unchanged."""

from __future__ import annotations

from gpushare import constants as c
from gpushare.api.v1alpha1 import parse_pool
from gpushare.backends import BACKENDS, DEFAULT, OWNED_LABELS, SharingBackend, backend_for
from gpushare.backends.ack import ACK
from gpushare.backends.nvidia import MIG, NVIDIA
from gpushare.policy.planner import Ownership, desired_labels, restore_labels


def test_every_v1alpha1_pool_is_acks_and_owns_what_the_operator_always_owned() -> None:
    pool = parse_pool(
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": "p"},
            "spec": {"nodeSelector": {"matchLabels": {"np": "a"}}, "computeAllocation": True},
        }
    )
    assert backend_for(pool.spec) is ACK and DEFAULT is ACK
    expected: dict[str, SharingBackend] = {"ack": ACK, "nvidia": NVIDIA, "nvidia-mig": MIG}
    assert expected == BACKENDS
    # The ownership annotation keeps its keys (NVIDIA's config and MIG labels added): an older operator's
    # annotation reads the same (the new key absent: it was not set), and one written now reads
    # the same in an older operator (which ignores the key it does not know).
    assert OWNED_LABELS == c.MANAGED_LABELS
    assert Ownership.capture("p", {c.LABEL_SCHEDULE: "share"}).dump() == (
        '{"pool":"p","prior":{"ack.node.gpu.placement":null,"ack.node.gpu.schedule":"share",'
        '"cgpu":null,"cgpu.disable.isolation":null,"gpushare.io/pool":null,'
        '"nvidia.com/device-plugin.config":null,"nvidia.com/mig.config":null}}'
    )
    old = '{"pool":"p","prior":{"ack.node.gpu.schedule":"share","gpushare.io/pool":null}}'
    assert Ownership.parse(old) == Ownership.capture("p", {c.LABEL_SCHEDULE: "share"})
    assert desired_labels(pool.spec, "p") == {
        c.LABEL_CGPU: "true",
        c.LABEL_DISABLE_ISOLATION: "false",
        c.LABEL_SCHEDULE: "core_mem",
        c.LABEL_PLACEMENT: pool.spec.placement,
        c.LABEL_POOL: "p",
    }


def test_ack_restores_a_schedule_it_found_absent_as_default_and_the_rest_as_it_was() -> None:
    prior = {c.LABEL_CGPU: None, c.LABEL_PLACEMENT: "binpack", c.LABEL_POOL: "old"}
    assert restore_labels(prior) == {
        c.LABEL_CGPU: None,
        c.LABEL_DISABLE_ISOLATION: None,
        c.LABEL_SCHEDULE: c.SCHEDULE_DEFAULT,
        c.LABEL_PLACEMENT: "binpack",
        c.LABEL_POOL: "old",
    }


def test_ack_says_which_switches_disrupt_which_pods() -> None:
    assert ACK.mode_of({}) == c.SCHEDULE_DEFAULT and ACK.mode_of({c.LABEL_SCHEDULE: "share"}) == "share"
    assert ACK.disrupts("share", "core_mem") and not ACK.disrupts("share", "share")
    assert ACK.holds_shared_gpu({c.RES_GPU_MEM: 4}) and not ACK.holds_shared_gpu({c.RES_GPU_COUNT: 1})
    core_mem = {c.RES_GPU_MEM: "30", c.RES_GPU_CORE: "200"}
    assert ACK.advertises("core_mem", core_mem, {}) and not ACK.advertises("share", core_mem, {})
    assert "gpu-core.percentage" in ACK.pending_message("share", core_mem, {})
