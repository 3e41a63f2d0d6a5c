"""OperatorState, the operator's Kopf memo: what its per-object copies share, and before startup."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpushare.handlers import lifecycle
from gpushare.handlers.options import RunOptions
from gpushare.handlers.state import OperatorState, Started
from gpushare.k8s.cluster import Cluster
from gpushare.reconcile import Reconciler

#: Kopf's decorator types the probe as its callback protocol (every kwarg Kopf passes): untyped here,
#: called with the one kwarg it reads.
probe_pools: Any = lifecycle.probe_pools


def test_before_startup_there_is_no_reconciler_and_the_probe_says_zero() -> None:
    state = OperatorState(options=RunOptions(events_namespace="ops"))
    with pytest.raises(RuntimeError, match="startup handler has not run"):
        _ = state.reconciler
    assert probe_pools(memo=state) == 0


async def test_kopfs_shallow_copies_share_what_startup_set_and_the_reports() -> None:
    """Kopf gives each watched object ``copy.copy(memo)``, made after the startup handler ran."""
    state = OperatorState()
    api = client.ApiClient(configuration=client.Configuration(host="https://127.0.0.1:1"))
    try:
        cluster = Cluster(api)
        state.started = Started(api=api, cluster=cluster, reconciler=Reconciler(cluster))
        per_object = copy.copy(state)
        assert per_object.reconciler is state.reconciler and per_object.cluster is cluster
        per_object.plugin_namespace_reports["uid-1"] = "gpu-ops"
        assert state.plugin_namespace_reports == {"uid-1": "gpu-ops"}
        state.reconciler.wakeup("pool-a")
        assert probe_pools(memo=per_object) == 1
    finally:
        await api.close()
