"""A real local Kubernetes control plane (etcd, kube-apiserver, kcm, scheduler, kwok) on loopback.

Used by the integration tests, the benchmarks and the demo. See docs/development.md.
Development harness only: left out of the wheel (pyproject.toml), so it is importable from the
editable install of ``make setup``, never from the installed package or the image.
"""

from __future__ import annotations

from gpushare.devcluster.binaries import BinariesMissing, find_binaries
from gpushare.devcluster.cluster import ClusterInfo, DevCluster, read_info
from gpushare.devcluster.fakes import (
    create_gpu_nodes,
    delete_nodes,
    ensure_device_plugin_daemonset,
    list_fake_nodes,
    wait_for,
    wait_plugin_ready,
)
from gpushare.devcluster.process import DevClusterError

__all__ = [
    "BinariesMissing",
    "ClusterInfo",
    "DevCluster",
    "DevClusterError",
    "create_gpu_nodes",
    "delete_nodes",
    "ensure_device_plugin_daemonset",
    "find_binaries",
    "list_fake_nodes",
    "read_info",
    "wait_for",
    "wait_plugin_ready",
]
