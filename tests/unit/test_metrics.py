"""The pool gauges the alerts and the dashboard are built on (gpushare.metrics.set_pool_status)."""

from __future__ import annotations

from typing import Any

from gpushare import metrics

R = metrics.REGISTRY


def _status(mode: str, ready: int, matched: int, **conds: str) -> dict[str, Any]:
    return {
        "schedule": mode,
        "nodes": {"matched": matched, "ready": ready, "pending": matched - ready, "held": 0},
        "conditions": [
            {"type": t, "status": s, "reason": "X", "lastTransitionTime": "2026-12-01T00:00:00Z"}
            for t, s in conds.items()
        ],
    }


def test_pool_status_gauges_follow_the_status() -> None:
    pool = "metrics-test-a"
    st = _status("cgpu", 1, 3, Ready="False", Progressing="True", Degraded="False")
    metrics.set_pool_status(pool, st, ready_timeout_seconds=300, now=1000.0)
    assert R.get_sample_value("gpushare_pool_info", {"pool": pool, "backend": "ack", "mode": "cgpu"}) == 1
    assert R.get_sample_value("gpushare_pool_condition", {"pool": pool, "condition": "Progressing"}) == 1
    assert R.get_sample_value("gpushare_pool_condition", {"pool": pool, "condition": "Ready"}) == 0
    # a condition missing from the status reads 0, not stale
    assert R.get_sample_value("gpushare_pool_condition", {"pool": pool, "condition": "Conflict"}) == 0
    assert R.get_sample_value("gpushare_pool_matched_nodes", {"pool": pool}) == 3
    assert R.get_sample_value("gpushare_pool_ready_timeout_seconds", {"pool": pool}) == 300
    assert R.get_sample_value("gpushare_pool_last_progress_timestamp_seconds", {"pool": pool}) == 1000.0

    # same counts later: no progress, the timestamp stays
    metrics.set_pool_status(pool, st, ready_timeout_seconds=300, now=2000.0)
    assert R.get_sample_value("gpushare_pool_last_progress_timestamp_seconds", {"pool": pool}) == 1000.0
    # one more node Ready: progress
    moved = _status("cgpu", 2, 3, Ready="False", Progressing="True")
    metrics.set_pool_status(pool, moved, ready_timeout_seconds=300, now=2100.0)
    assert R.get_sample_value("gpushare_pool_last_progress_timestamp_seconds", {"pool": pool}) == 2100.0

    # mode switch: the old mode's series goes away (pools by mode counts each pool once)
    metrics.set_pool_status(pool, _status("core_mem", 3, 3, Ready="True"), ready_timeout_seconds=60)
    assert R.get_sample_value("gpushare_pool_info", {"pool": pool, "backend": "ack", "mode": "cgpu"}) is None
    assert R.get_sample_value("gpushare_pool_info", {"pool": pool, "backend": "ack", "mode": "core_mem"}) == 1
    assert R.get_sample_value("gpushare_pool_ready_timeout_seconds", {"pool": pool}) == 60

    # an NVIDIA pool whose config changes: the old config name's series goes away too
    nv = "metrics-test-nvidia"
    for name in ("gpushare-ts4-aaaaaaaa", "gpushare-ts2-bbbbbbbb"):
        metrics.set_pool_status(
            nv, {**_status("x", 1, 1), "backend": "nvidia", "schedule": name}, ready_timeout_seconds=60
        )
    assert (
        R.get_sample_value(
            "gpushare_pool_info", {"pool": nv, "backend": "nvidia", "mode": "gpushare-ts4-aaaaaaaa"}
        )
        is None
    )
    assert (
        R.get_sample_value(
            "gpushare_pool_info", {"pool": nv, "backend": "nvidia", "mode": "gpushare-ts2-bbbbbbbb"}
        )
        == 1
    )
    metrics.forget_pool(nv)
    assert (
        R.get_sample_value(
            "gpushare_pool_info", {"pool": nv, "backend": "nvidia", "mode": "gpushare-ts2-bbbbbbbb"}
        )
        is None
    )

    metrics.forget_pool(pool)
    for name, labels in (
        ("gpushare_pool_info", {"pool": pool, "backend": "ack", "mode": "core_mem"}),
        ("gpushare_pool_condition", {"pool": pool, "condition": "Ready"}),
        ("gpushare_pool_matched_nodes", {"pool": pool}),
        ("gpushare_pool_last_progress_timestamp_seconds", {"pool": pool}),
    ):
        assert R.get_sample_value(name, labels) is None, name
