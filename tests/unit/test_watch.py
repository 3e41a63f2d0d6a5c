"""The operator's own Node and Pod watches (gpushare.k8s.watch, gpushare.handlers.watch) against a
small stand-in apiserver (aiohttp): paginated list, watch stream, 410 Gone, dropped connections,
and what reaches the reconciler (projections, deletions, vanished objects after a new list)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
import structlog.testing
from aiohttp import web
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.handlers.watch import Feeds
from gpushare.k8s.watch import ListWatch
from gpushare.reconcile import Reconciler
from gpushare.webhook.context import ContextCache

NP = "alibabacloud.com/nodepool-id"


def node(name: str, rv: int, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": {NP: "a", **labels}},
        "status": {"allocatable": {c.RES_GPU_MEM: "16", "cpu": "32"}},
    }


def pod(name: str, node_name: str, *, gpu: bool = False, plugin: bool = False) -> dict[str, Any]:
    labels = dict(c.DEFAULT_PLUGIN_LABELS) if plugin else {"app": "x"}
    resources = {"limits": {c.RES_GPU_MEM: "4"}} if gpu else {}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": "Running"},
    }


class FakeApiserver:
    """Serves /api/v1/nodes and /api/v1/pods: list pages of ``limit``, then scripted watch streams."""

    def __init__(self) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {"nodes": [], "pods": []}
        self.rv = 10
        #: per resource: the next watch streams, each a list of events or an HTTP status (a watch
        #: waits for the next one: an idle watch)
        self.streams: dict[str, asyncio.Queue[Any]] = {"nodes": asyncio.Queue(), "pods": asyncio.Queue()}
        self.requests: list[dict[str, str]] = []

    def script(self, resource: str, *streams: Any) -> None:
        for stream in streams:
            self.streams[resource].put_nowait(stream)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        resource = request.match_info["resource"]
        query = dict(request.query)
        self.requests.append({"resource": resource, **query})
        if query.get("watch") in ("true", "True", "1"):
            script = await self.streams[resource].get()
            if isinstance(script, int):
                return web.Response(status=script, text="{}")
            resp = web.StreamResponse()
            await resp.prepare(request)
            for event in script:  # bytes: a line as it is (the apiserver's own format)
                await resp.write(event if isinstance(event, bytes) else json.dumps(event).encode() + b"\n")
            await resp.write_eof()
            return resp
        items = self.objects[resource]
        limit = int(query.get("limit") or len(items) or 1)
        start = int(query.get("continue") or 0)
        page = items[start : start + limit]
        more = start + limit < len(items)
        meta = {"resourceVersion": str(self.rv), **({"continue": str(start + limit)} if more else {})}
        return web.json_response({"items": page, "metadata": meta})


@pytest.fixture
async def apiserver() -> AsyncIterator[tuple[FakeApiserver, client.ApiClient]]:
    fake = FakeApiserver()
    app = web.Application()
    app.router.add_get("/api/v1/{resource}", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    api = client.ApiClient(configuration=cfg)
    try:
        yield fake, api
    finally:
        for resource in fake.streams:
            fake.script(resource, [], [])  # end the watches still waiting for a stream
        await api.close()
        await runner.cleanup()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lists: list[set[str]] = []

    def on_event(self, type_: str, obj: Any) -> None:
        self.events.append((type_, obj["metadata"]["name"]))

    def on_listed(self, keys: set[str]) -> None:
        self.lists.append(keys)


async def _until(check: Any) -> None:
    """Poll (the watches run in this loop) for up to about 30 s: a shared machine can be slow."""
    for _ in range(3000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_lists_in_pages_then_follows_the_watch(apiserver: tuple[FakeApiserver, Any]) -> None:
    fake, api = apiserver
    fake.objects["nodes"] = [node(f"n{i}", 1 + i) for i in range(5)]
    fake.script(
        "nodes",
        [
            {"type": "MODIFIED", "object": node("n1", 20, extra="1")},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "25"}}},
            {"type": "DELETED", "object": node("n2", 26)},
        ],
    )
    rec = Recorder()
    watch = ListWatch(api, "nodes", rec.on_event, rec.on_listed, page=2, reconnect=0.01)
    task = asyncio.create_task(watch.run())
    try:
        await _until(lambda: len(rec.events) == 7)
        await asyncio.wait_for(watch.listed.wait(), 30)
        await _until(lambda: len([r for r in fake.requests if "watch" in r]) >= 2)
    finally:
        task.cancel()
    assert rec.events[:5] == [("ADDED", f"n{i}") for i in range(5)]
    assert rec.events[5:] == [("MODIFIED", "n1"), ("DELETED", "n2")]
    assert rec.lists == [{f"n{i}" for i in range(5)}]
    lists = [r for r in fake.requests if "watch" not in r]
    assert [r.get("continue") for r in lists] == [None, "2", "4"]
    assert all(r["limit"] == "2" for r in lists)
    watches = [r for r in fake.requests if "watch" in r]
    # the first watch from the list's version, the next from the last bookmark/event seen
    assert watches[0]["resourceVersion"] == "10"
    assert watches[1]["resourceVersion"] == "26"


async def test_gone_lists_again_and_errors_retry(apiserver: tuple[FakeApiserver, Any]) -> None:
    fake, api = apiserver
    fake.objects["nodes"] = [node("n0", 1), node("n1", 2)]
    fake.script(
        "nodes",
        500,  # an apiserver error: watched again after the delay, same version
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}],
    )
    rec = Recorder()
    watch = ListWatch(api, "nodes", rec.on_event, rec.on_listed, reconnect=0.01)
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(watch.run())
        try:
            await _until(lambda: len(rec.lists) == 2)
        finally:
            task.cancel()
    kinds = [("watch" if "watch" in r else "list") for r in fake.requests]
    assert kinds[:4] == ["list", "watch", "watch", "list"]
    assert rec.events == [("ADDED", "n0"), ("ADDED", "n1")] * 2
    # the 500 is a failure, the next answer (the watch that says 410) ends it; a 410 is no failure
    said = [(e["event"], e.get("resource")) for e in logs if e["log_level"] != "debug"]
    assert said == [
        ("Watch failed; retrying", "nodes"),
        ("Watch resumed", "nodes"),
        ("Watch expired; listing again", "nodes"),
    ]


async def test_feeds_keep_projections_and_drop_what_vanished(apiserver: tuple[FakeApiserver, Any]) -> None:
    fake, api = apiserver
    reconciler = Reconciler(cluster=None)  # type: ignore[arg-type]
    webhook = ContextCache()  # fed by the same Node watch (gpushare run --webhook)
    feeds = Feeds(reconciler, [webhook])
    fake.objects["nodes"] = [node("n0", 1), node("n1", 2)]
    fake.objects["pods"] = [
        pod("gpu", "n0", gpu=True),
        pod("plugin", "n1", plugin=True),
        pod("web", "n0"),  # neither: never kept
    ]
    fake.script("nodes", [{"type": "DELETED", "object": node("n1", 30)}])
    fake.script(
        "pods",
        [{"type": "MODIFIED", "object": {**pod("gpu", "n0", gpu=True), "status": {"phase": "Succeeded"}}}],
    )
    nodes = ListWatch(api, "nodes", feeds.node, feeds.nodes_listed, reconnect=0.01)
    pods = ListWatch(api, "pods", feeds.pod, feeds.pods_listed, reconnect=0.01)
    tasks = [asyncio.create_task(w.run()) for w in (nodes, pods)]
    try:
        await asyncio.wait_for(asyncio.gather(nodes.listed.wait(), pods.listed.wait()), 30)
        await _until(lambda: "n1" not in reconciler.nodes)
        await _until(lambda: reconciler.pods.get("n0", {}).get("uid-gpu") is not None)
        await _until(lambda: reconciler.pods["n0"]["uid-gpu"].phase == "Succeeded")
        assert reconciler.nodes["n0"].labels[NP] == "a"
        assert set(webhook.fed) == {"n0"} and webhook.fed["n0"][0].labels[NP] == "a"
        assert reconciler.nodes["n0"].allocatable == {c.RES_GPU_MEM: "16"}  # the slim projection
        assert reconciler.pods["n1"]["uid-plugin"].labels == c.DEFAULT_PLUGIN_LABELS
        assert reconciler.pods["n0"]["uid-gpu"].labels == {}
        assert "uid-web" not in {k for on_node in reconciler.pods.values() for k in on_node}
        # Then 410: a new list no longer has n0 (deleted while not watched) nor the plugin pod:
        # both are forgotten.
        fake.objects["nodes"] = [node("n2", 40)]
        fake.objects["pods"] = [pod("gpu", "n0", gpu=True)]
        fake.rv = 50
        fake.script("nodes", 410)
        fake.script("pods", 410)
        await _until(lambda: set(reconciler.nodes) == {"n2"})
        assert set(webhook.fed) == {"n2"}
        await _until(lambda: "n1" not in reconciler.pods)
        assert set(reconciler.pods["n0"]) == {"uid-gpu"}
        assert "n0" in reconciler.dirty and "n1" in reconciler.dirty
    finally:
        for t in tasks:
            t.cancel()


async def test_a_pod_no_longer_relevant_is_forgotten(apiserver: tuple[FakeApiserver, Any]) -> None:
    fake, api = apiserver
    reconciler = Reconciler(cluster=None)  # type: ignore[arg-type]
    feeds = Feeds(reconciler)
    fake.objects["pods"] = [pod("plugin", "n1", plugin=True)]
    fake.script("pods", [{"type": "MODIFIED", "object": pod("plugin", "n1")}])  # labels changed
    watch = ListWatch(api, "pods", feeds.pod, feeds.pods_listed, reconnect=0.01)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(watch.listed.wait(), 30)
        await _until(lambda: watch.events == 1)
    finally:
        task.cancel()
    assert reconciler.pods == {}


def _apiserver_line(name: str, rv: str, type_: str = "MODIFIED", kind: str = "Node") -> bytes:
    """A watch event as the kube-apiserver writes it (Go's field order, compact)."""
    meta = {
        "name": name,
        "uid": "6f0c-11",
        "resourceVersion": rv,
        "creationTimestamp": "2026-12-02T00:00:00Z",
        "labels": {NP: "a", "x": '"resourceVersion":"1"'},
    }
    obj = {
        "kind": kind,
        "apiVersion": "v1",
        "metadata": meta,
        "status": {"allocatable": {c.RES_GPU_MEM: "16"}},
    }
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


def test_peek_reads_a_node_events_name_and_version_without_parsing_it() -> None:
    from gpushare.k8s.watch import peek_node_event

    assert peek_node_event(_apiserver_line("gpu-7", "4711")) == ("gpu-7", "4711")
    # only a Node's MODIFIED event, only as the apiserver writes it
    assert peek_node_event(_apiserver_line("gpu-7", "4711", type_="ADDED")) is None
    assert peek_node_event(_apiserver_line("gpu-7", "4711", kind="Pod")) is None
    assert peek_node_event(json.dumps(json.loads(_apiserver_line("gpu-7", "4711"))).encode()) is None
    # nothing nested is crossed: a version only inside the labels is not the node's
    line = _apiserver_line("gpu-7", "4711").replace(b'"resourceVersion":"4711",', b"")
    assert peek_node_event(line) is None


async def test_the_echo_of_the_operators_own_write_is_not_parsed(
    apiserver: tuple[FakeApiserver, Any],
) -> None:
    fake, api = apiserver
    reconciler = Reconciler(cluster=None)  # type: ignore[arg-type]

    class Viewer:
        def __init__(self) -> None:
            self.views: list[tuple[str, str]] = []

        def node_view(self, type_: str, name: str, view: Any) -> None:
            self.views.append((name, view.resource_version if view else ""))

        def nodes_listed(self, names: set[str]) -> None:
            pass

    viewer = Viewer()
    feeds = Feeds(reconciler, view_listeners=[viewer])
    fake.objects["nodes"] = [node("n0", 1), node("n1", 2)]
    watch = ListWatch(api, "nodes", feeds.node, feeds.nodes_listed, reconnect=0.01, known=feeds.known)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(watch.listed.wait(), 30)
        # the operator wrote n0 (the patch returned version 20): believed until the watch has it
        written = node("n0", 20, **{c.LABEL_POOL: "p"})
        reconciler.state.believe(written)
        assert "n0" in reconciler.state.fresh
        # the echo of that write, and someone else's write of n1, as the apiserver writes them
        echo = _apiserver_line("n0", "20").replace(b'"x":', b'"' + c.LABEL_POOL.encode() + b'":"p","x":')
        fake.script("nodes", [_apiserver_line("n1", "21")], [echo])
        await _until(lambda: watch.known_events == 1)
    finally:
        task.cancel()
    assert watch.events == 1, "n1's event was parsed and delivered; the echo was not"
    assert "n0" not in reconciler.state.fresh, "the echo moved the write into the watched state"
    assert reconciler.nodes["n0"].resource_version == "20" and "n0" not in reconciler.dirty
    assert reconciler.nodes["n1"].resource_version == "21"
    assert viewer.views[-2:] == [("n1", "21"), ("n0", "20")]
    # a listener that needs the raw objects (a webhook fed the objects) gets the echo parsed
    raw = Feeds(reconciler, [ContextCache()])
    reconciler.state.believe(node("n0", 30))
    assert not raw.known("n0", "30")
    assert not feeds.known("n0", "31"), "another version is not the echo"


async def test_a_watch_on_the_small_read_buffer_still_reads_an_event_of_megabytes(
    apiserver: tuple[FakeApiserver, Any],
) -> None:
    """The watches' session reads with ``WATCH_READ_BUFSIZE`` (64 KiB: aiohttp stops reading at
    twice that unread, the backlog stays in the socket); an event line up to ``MAX_EVENT_BYTES``
    is still read whole (without the explicit line limit, aiohttp refuses a line over 128 KiB)."""
    from gpushare.k8s.client import WATCH_READ_BUFSIZE, new_api_client
    from gpushare.k8s.watch import MAX_EVENT_BYTES

    fake, plain = apiserver
    api = new_api_client(plain.configuration, environ={}, read_bufsize=WATCH_READ_BUFSIZE)
    big = node("big", 30)
    big["metadata"]["annotations"] = {"example.com/blob": "x" * (MAX_EVENT_BYTES // 2)}
    assert 20 * WATCH_READ_BUFSIZE < len(json.dumps(big)) < MAX_EVENT_BYTES
    fake.objects["nodes"] = [node("n0", 1)]
    fake.script(
        "nodes",
        [
            {"type": "MODIFIED", "object": big},
            *({"type": "MODIFIED", "object": node(f"n{i}", 40 + i)} for i in range(200)),
        ],
    )
    seen: list[tuple[str, str, int]] = []

    def on_event(type_: str, obj: Any) -> None:
        blob = (obj["metadata"].get("annotations") or {}).get("example.com/blob", "")
        seen.append((type_, obj["metadata"]["name"], len(blob)))

    watch = ListWatch(api, "nodes", on_event, lambda keys: None, reconnect=0.01)
    task = asyncio.create_task(watch.run())
    try:
        await _until(lambda: len(seen) == 202)
    finally:
        task.cancel()
        await api.close()
    assert seen[:2] == [("ADDED", "n0", 0), ("MODIFIED", "big", MAX_EVENT_BYTES // 2)]
    assert seen[2:] == [("MODIFIED", f"n{i}", 0) for i in range(200)]
