"""Fixtures for tests against the real local control plane (gpushare.devcluster).

Every test under tests/integration/ is marked ``integration``. When the control-plane
binaries are absent the tests FAIL (they are never skipped) with a message saying to
run ``make control-plane``.

- ``cluster`` (session): a started cluster (``ClusterInfo``: kubeconfig, server, token,
  CA, bin_dir, log dir) with the generated CRD installed (Established) and the stand-in
  device-plugin DaemonSet in kube-system.
- ``api``: a kubernetes_asyncio ApiClient for the test's event loop.
- ``namespace``: a fresh namespace, deleted afterwards.
- ``fake_nodes``: ``await fake_nodes.create(n, ...)`` makes kwok GPU nodes; every fake node
  created during the test is deleted afterwards.
- ``start_operator``: ``start_operator(*flags)`` launches ``gpushare run`` against the cluster and
  waits until it serves; every operator started is stopped afterwards. ``operator``: one, started.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare.devcluster import (
    BinariesMissing,
    ClusterInfo,
    DevCluster,
    delete_nodes,
    ensure_device_plugin_daemonset,
    find_binaries,
    list_fake_nodes,
)
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.fakes import FakeNodeSet
from gpushare.k8s.client import make_api_client
from support.cluster import serve
from support.operator_proc import OperatorProc, launch_operator

REPO = Path(__file__).resolve().parents[2]
CRD_FILES = sorted((REPO / "crds").glob("*.yaml"))
HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


async def _prepare(info: ClusterInfo) -> None:
    api = await make_api_client(str(info.kubeconfig))
    async with api:
        await install_crd_files(api, CRD_FILES)
        await ensure_device_plugin_daemonset(api)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterInfo]:
    try:
        find_binaries()
    except BinariesMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    keep = bool(os.environ.get("GPUSHARE_KEEP_CLUSTER"))
    yield from serve(DevCluster(keep=keep), _prepare, "local control plane")


@pytest.fixture
async def api(cluster: ClusterInfo) -> AsyncIterator[client.ApiClient]:
    api_client = await make_api_client(str(cluster.kubeconfig))
    async with api_client:
        yield api_client


@pytest.fixture
async def namespace(api: client.ApiClient) -> AsyncIterator[str]:
    name = f"t-{secrets.token_hex(4)}"
    core = client.CoreV1Api(api)
    await core.create_namespace(
        cast(Any, {"metadata": {"name": name, "labels": {"gpushare.io/test": "true"}}})
    )
    yield name
    try:
        await core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
async def fake_nodes(api: client.ApiClient) -> AsyncIterator[FakeNodeSet]:
    before = set(await list_fake_nodes(api))
    helper = FakeNodeSet(api, f"n{secrets.token_hex(3)}")
    yield helper
    leftover = set(await list_fake_nodes(api)) - before
    await delete_nodes(api, sorted(leftover))


@pytest.fixture
def start_operator(cluster: ClusterInfo, tmp_path: Path) -> Iterator[Callable[..., OperatorProc]]:
    started: list[OperatorProc] = []

    def start(*extra: str) -> OperatorProc:
        op = launch_operator(cluster.kubeconfig, tmp_path / f"operator-{len(started)}.log", *extra)
        started.append(op)
        op.wait_serving()
        return op

    yield start
    for op in started:
        op.stop()


@pytest.fixture
def operator(start_operator: Callable[..., OperatorProc]) -> OperatorProc:
    return start_operator()
