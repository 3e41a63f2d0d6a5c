"""The Node watch's echo shortcut against the real kube-apiserver (``gpushare.k8s.watch``).

A Node's MODIFIED event, as the apiserver writes it, begins the way ``peek_node_event`` reads it
(name and resourceVersion, without parsing the event); an event the consumer already has at
exactly that version (the echo of its own write) is not parsed nor delivered, and any other is.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpushare.devcluster.fakes import create_gpu_nodes
from gpushare.k8s.watch import ListWatch


async def _patch(core: client.CoreV1Api, name: str, value: str) -> str:
    body = {"metadata": {"labels": {"gpushare-test/echo": value}}}
    node = await core.patch_node(name, body)
    return str(node.metadata.resource_version)


async def test_the_echo_of_a_known_write_is_recognised_unparsed_and_other_writes_are_delivered(
    api: client.ApiClient,
) -> None:
    suffix = secrets.token_hex(3)
    mine, theirs = await create_gpu_nodes(api, 2, prefix=f"echo-{suffix}", wait_ready=False)
    core = client.CoreV1Api(api)
    peeked: list[tuple[str, str]] = []
    delivered: list[tuple[str, str, str]] = []
    known_versions: dict[str, str] = {}

    def known(name: str, rv: str) -> bool:
        peeked.append((name, rv))
        return known_versions.get(name) == rv

    def on_event(type_: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        delivered.append((type_, str(meta.get("name")), str(meta.get("resourceVersion"))))

    watch = ListWatch(api, "nodes", on_event, lambda _keys: None, known=known, reconnect=0.1)
    task = asyncio.create_task(watch.run())
    mine_rvs: list[str] = []

    async def peeked_at(name: str, rv: str) -> None:
        for _ in range(600):
            if (name, rv) in peeked:
                return
            await asyncio.sleep(0.05)
        pytest.fail(f"the watch never read {name}'s event at resourceVersion {rv}", pytrace=False)

    try:
        await asyncio.wait_for(watch.listed.wait(), 60)
        theirs_rv = await _patch(core, theirs, "b")
        await peeked_at(theirs, theirs_rv)
        # "Our" writes: the version a patch returns is known once it has returned, as the operator
        # believes its write then. An event read before that is delivered like any other; so write
        # until one echo came after its answer.
        for attempt in range(10):
            known_versions[mine] = "pending"
            rv = await _patch(core, mine, f"a{attempt}")
            known_versions[mine] = rv
            mine_rvs.append(rv)
            await peeked_at(mine, rv)
            if watch.known_events:
                break
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for name in (mine, theirs):
            with contextlib.suppress(client.ApiException):
                await core.delete_node(name)

    # Every event was read from its first bytes: the apiserver writes them as peek expects.
    assert (theirs, theirs_rv) in peeked, peeked[-5:]
    assert all((mine, rv) in peeked for rv in mine_rvs), (mine_rvs, peeked[-5:])
    # The other write is delivered, parsed; an echo that came after its write's answer is not.
    assert ("MODIFIED", theirs, theirs_rv) in delivered
    assert watch.known_events >= 1, "no echo arrived after its write's answer in 10 writes"
    unparsed = [rv for rv in mine_rvs if ("MODIFIED", mine, rv) not in delivered]
    assert len(unparsed) == watch.known_events, (mine_rvs, delivered[-5:])
