"""The soak's metrics-agree check (``status_metrics_disagree``, pure) over a real exposition: the
operator's own gauges, set by ``gpushare.metrics.set_pool_status`` from a status, read back as
Prometheus' text; and its count of loans from the audit log's node writes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from gpushare import constants as c
from gpushare import metrics
from gpushare.devcluster.soak import _annotation_written, metric_sum, status_metrics_disagree


def _pool(name: str, ready: str, matched: int, schedule: str = "cgpu") -> dict[str, Any]:
    conditions = [
        {"type": "Ready", "status": ready},
        {"type": "Progressing", "status": "False"},
        {"type": "Degraded", "status": "False"},
        {"type": "Conflict", "status": "False"},
    ]
    status = {"conditions": conditions, "nodes": {"matched": matched}, "schedule": schedule}
    return {"metadata": {"name": name}, "status": status}


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    yield
    for pool in ("agree-a", "agree-b"):
        metrics.forget_pool(pool)


def _exposition(*pools: dict[str, Any]) -> str:
    for pool in pools:
        metrics.set_pool_status(pool["metadata"]["name"], pool["status"], ready_timeout_seconds=300)
    return generate_latest(metrics.REGISTRY).decode()


def test_the_gauges_set_from_a_status_agree_with_it() -> None:
    pool = _pool("agree-a", "True", 2)
    text = _exposition(pool)
    assert metric_sum(text, "gpushare_pool_matched_nodes", pool="agree-a") == 2
    assert metric_sum(text, "gpushare_pool_matched_nodes", pool="agree-none") is None
    assert status_metrics_disagree(pool, text) == []


def test_a_status_the_gauges_do_not_say_is_named() -> None:
    text = _exposition(_pool("agree-b", "True", 2))
    later = _pool("agree-b", "False", 3, schedule="share")  # written behind the exporter's back
    assert status_metrics_disagree(later, text) == [
        "GPUSharePool/agree-b: Ready is False, gpushare_pool_condition says 1.0",
        "GPUSharePool/agree-b: status.nodes.matched is 3, gpushare_pool_matched_nodes says 2.0",
        "GPUSharePool/agree-b: status.schedule is share, gpushare_pool_info has no such mode",
    ]
    # a pool the exporter never saw: every gauge is missing
    assert len(status_metrics_disagree(_pool("agree-unseen", "True", 1), text)) == 6


def test_a_loan_is_read_from_a_node_write() -> None:
    lent = {"metadata": {"annotations": {c.ANNOTATION_LOAN: '{"from": "b", "to": "a"}'}}}
    assert _annotation_written(lent, c.ANNOTATION_LOAN) == '{"from": "b", "to": "a"}'
    assert (
        _annotation_written({"metadata": {"annotations": {c.ANNOTATION_LOAN: None}}}, c.ANNOTATION_LOAN) == ""
    )
    assert _annotation_written({"metadata": {"labels": {"x": "y"}}}, c.ANNOTATION_LOAN) is None
    assert _annotation_written(None, c.ANNOTATION_LOAN) is None
