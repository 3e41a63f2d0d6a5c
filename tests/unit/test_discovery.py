"""What a starting process still waits for in the apiserver's discovery (``gpushare.k8s.discovery``)."""

from __future__ import annotations

from gpushare.k8s.discovery import missing

POOLS = ("gpushare.io/v1alpha1", "gpusharepools")
PEERINGS = ("kopf.dev/v1", "clusterkopfpeerings")


def test_a_resource_is_missing_until_its_group_version_lists_it() -> None:
    assert missing({}, [POOLS, PEERINGS]) == [POOLS, PEERINGS]  # nothing answered yet
    assert missing({"gpushare.io/v1alpha1": [], "kopf.dev/v1": ["kopfpeerings"]}, [POOLS, PEERINGS]) == [
        POOLS,
        PEERINGS,
    ]
    served = {"gpushare.io/v1alpha1": ["gpusharepools", "gpusharepools/status"], "kopf.dev/v1": []}
    assert missing(served, [POOLS, PEERINGS]) == [PEERINGS]
    assert missing(served, [POOLS]) == []
