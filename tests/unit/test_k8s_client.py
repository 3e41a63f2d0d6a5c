"""make_api_client: explicit Configuration, in-cluster first, never the library default."""

from __future__ import annotations

import asyncio.sslproto
import datetime as dt
import json
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from gpushare.devcluster.pki import make_ca
from gpushare.k8s import rest
from gpushare.k8s.client import (
    TLS_READ_BUFFER,
    KubeConfigError,
    env_lookups_find_nothing,
    load_configuration,
    make_api_client,
    new_api_client,
)
from gpushare.pki import generate_ca, issue_serving_cert
from gpushare.policy import PodView
from gpushare.policy.views import PluginPod, plugin_pod

CA_PEM = make_ca().cert_pem.decode()


def write_kubeconfig(path: Path, server: str, token: str) -> Path:
    ca = path.parent / "ca.crt"
    ca.write_text(CA_PEM)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_kubeconfig_sets_host_and_token_without_touching_default(tmp_path: Path) -> None:
    before = k8s_client.Configuration.get_default_copy().host
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", "s3cret")
    api = await make_api_client(str(kc))
    try:
        assert api.configuration.host == "https://127.0.0.1:6443"
        assert api.configuration.api_key["BearerToken"] == "Bearer s3cret"
        assert k8s_client.Configuration.get_default_copy().host == before
    finally:
        await api.close()


async def test_two_clients_are_independent(tmp_path: Path) -> None:
    a = write_kubeconfig(tmp_path / "a", "https://127.0.0.1:1111", "ta")
    (tmp_path / "b").mkdir()
    b = write_kubeconfig(tmp_path / "b" / "kc", "https://127.0.0.1:2222", "tb")
    ca = await load_configuration(str(a))
    cb = await load_configuration(str(b))
    assert (ca.host, cb.host) == ("https://127.0.0.1:1111", "https://127.0.0.1:2222")
    assert ca is not cb


async def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match=r"kubeconfig '.*nope' does not exist"):
        await load_configuration(str(tmp_path / "nope"))


async def test_kubeconfig_env_is_read_at_call_time(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:3333", "t")
    cfg = await load_configuration(environ={"KUBECONFIG": str(kc)}, sa_dir=tmp_path / "nosa")
    assert cfg.host == "https://127.0.0.1:3333"


async def test_in_cluster_wins_when_no_kubeconfig_given(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("podtoken")
    (sa / "ca.crt").write_text(CA_PEM)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = await load_configuration(environ=env, sa_dir=sa)
    assert cfg.host == "https://10.0.0.1:443"
    assert cfg.api_key["BearerToken"] == "Bearer podtoken"
    # An explicit kubeconfig still beats the pod's service account.
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:4444", "t")
    cfg2 = await load_configuration(str(kc), environ=env, sa_dir=sa)
    assert cfg2.host == "https://127.0.0.1:4444"


def test_loading_a_configuration_caps_the_tls_read_buffer(tmp_path: Path) -> None:
    """asyncio gives every TLS connection a 256 KiB read buffer, resident; gpushare caps it."""
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", "t")
    probe = (
        "import asyncio, asyncio.sslproto as s, sys\n"
        "from gpushare.k8s.client import load_configuration\n"
        "before = s.SSLProtocol.max_size\n"
        f"asyncio.run(load_configuration({str(kc)!r}))\n"
        "print(before, s.SSLProtocol.max_size)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(256 * 1024), str(TLS_READ_BUFFER)]


async def test_a_response_many_times_the_tls_read_buffer_arrives_whole(tmp_path: Path) -> None:
    """With the cap in force, a 3 MB answer over TLS is read in many steps and arrives intact."""
    now = dt.datetime.now(dt.UTC)
    ca, ca_key = generate_ca(now)
    cert, key = issue_serving_cert(ca, ca_key, ["127.0.0.1"], now)
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    big = {"metadata": {"name": "big", "annotations": {f"k{i}": "x" * 1000 for i in range(3000)}}}

    async def node(_: web.Request) -> web.Response:
        return web.json_response(big)

    app = web.Application()
    app.router.add_get("/api/v1/nodes/big", node)
    runner = web.AppRunner(app)
    await runner.setup()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kc = write_kubeconfig(tmp_path / "kc2", f"https://127.0.0.1:{port}", "t")
    (tmp_path / "ca.crt").write_bytes(ca)  # write_kubeconfig wrote its own CA there
    api = await make_api_client(str(kc))
    try:
        assert asyncio.sslproto.SSLProtocol.max_size == TLS_READ_BUFFER
        resp: Any = await k8s_client.CoreV1Api(api).read_node("big", _preload_content=False)
        body = await resp.read()
        resp.release()
        assert len(body) > 10 * TLS_READ_BUFFER
        assert json.loads(body) == big
    finally:
        await api.close()
        await runner.cleanup()


# --- the raw request layer (gpushare.k8s.rest) ----------------------------------------------------


async def test_the_session_trusts_the_environment_only_with_a_proxy_variable(tmp_path: Path) -> None:
    """kubernetes_asyncio turns aiohttp's trust_env on: a netrc and a proxy lookup in a thread per
    request. gpushare's clients keep it off unless a proxy variable asks for it."""
    cfg = await load_configuration(str(write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", "t")))
    plain = new_api_client(cfg, environ={})
    proxied = new_api_client(cfg, environ={"HTTPS_PROXY": "http://proxy.example:3128"})
    try:
        assert plain.rest_client.pool_manager.trust_env is False
        assert proxied.rest_client.pool_manager.trust_env is True
        connector = plain.rest_client.pool_manager.connector
        assert connector is not None and not connector.closed
    finally:
        await plain.close()
        await proxied.close()
    assert plain.rest_client.pool_manager.closed


async def test_rest_sends_and_reads_json_and_keeps_the_status_of_an_error(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.text()
        seen.append(
            {
                "method": request.method,
                "path": request.rel_url.raw_path,
                "query": dict(request.query),
                "type": request.content_type,
                "auth": request.headers.get("Authorization"),
                "body": json.loads(body) if body else None,
            }
        )
        if request.path.endswith("/missing"):
            return web.json_response({"kind": "Status", "message": "nodes missing not found"}, status=404)
        items = (
            [{"metadata": {"name": "a"}}]
            if "continue" not in request.query
            else [{"metadata": {"name": "b"}}]
        )
        meta = {} if "continue" in request.query else {"continue": "t1"}
        return web.json_response({"items": items, "metadata": meta})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cfg = await load_configuration(str(write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}", "tok")))
    api = new_api_client(cfg)
    try:
        r = rest.Rest(api)
        await r.patch(rest.path("/api/v1", "nodes", "n/1"), {"metadata": {"labels": {"a": None}}})
        assert seen[-1] == {
            "method": "PATCH",
            "path": "/api/v1/nodes/n%2F1",
            "query": {},
            "type": rest.MERGE_PATCH,
            "auth": "Bearer tok",
            "body": {"metadata": {"labels": {"a": None}}},
        }
        with pytest.raises(rest.ApiError) as exc:
            await r.get("/api/v1/nodes/missing", query={"watch": False})
        assert exc.value.status == 404
        assert json.loads(exc.value.body or "")["message"] == "nodes missing not found"
        assert seen[-1]["query"] == {"watch": "false"}

        async def fetch(q: rest.Query) -> dict[str, Any]:
            return await r.get("/api/v1/pods", query=q)

        names = [
            o["metadata"]["name"]
            async for p in rest.pages(fetch, {"fieldSelector": "x"}, limit=1)
            for o in rest.items(p)
        ]
        assert names == ["a", "b"]
        assert [s["query"] for s in seen[-2:]] == [
            {"fieldSelector": "x", "limit": "1"},
            {"fieldSelector": "x", "limit": "1", "continue": "t1"},
        ]
    finally:
        await api.close()
        await runner.cleanup()


@pytest.mark.parametrize(
    ("phase", "conditions", "ready"),
    [
        ("Running", [{"type": "Ready", "status": "True"}], True),
        ("Running", [{"type": "Ready", "status": "False"}], False),
        ("Running", [], False),
        ("Pending", [{"type": "Ready", "status": "True"}], False),
    ],
)
def test_one_readiness_rule_for_plugin_pods_listed_or_watched(
    phase: str, conditions: list[dict[str, str]], ready: bool
) -> None:
    """``Cluster.plugin_pods`` (a list) and the reconciler (the pod watch) read a plugin pod alike."""
    obj = {
        "metadata": {
            "name": "p",
            "namespace": "kube-system",
            "uid": "u1",
            "creationTimestamp": "2026-12-01T10:00:00Z",
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "conditions": conditions},
    }
    pod = plugin_pod(PodView.from_obj(obj))
    assert pod == PluginPod(
        "n1", "kube-system", "p", "u1", dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC), ready, False
    )
    gone = plugin_pod(PodView.from_obj({**obj, "metadata": {"deletionTimestamp": "x"}}))
    assert (gone.deleting, gone.created) == (True, None)


def test_env_lookups_find_nothing_only_without_proxy_and_netrc(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    assert env_lookups_find_nothing(home)
    assert env_lookups_find_nothing({**home, "no_proxy": "10.0.0.0/8", "HTTPS_PROXY": ""})
    assert not env_lookups_find_nothing({**home, "HTTPS_PROXY": "http://proxy:3128"})
    assert not env_lookups_find_nothing({**home, "http_proxy": "http://proxy:3128"})
    netrc = tmp_path / "netrc"
    assert env_lookups_find_nothing({**home, "NETRC": str(netrc)})
    netrc.write_text("machine x login u password p\n")
    assert not env_lookups_find_nothing({**home, "NETRC": str(netrc)})


@pytest.mark.parametrize(
    ("env", "trusted"),
    [({}, False), ({"HTTPS_PROXY": "http://proxy:3128"}, True), ({"NETRC": "netrc"}, True)],
)
async def test_clients_look_up_proxies_and_netrc_only_where_they_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], trusted: bool
) -> None:
    """aiohttp's per-request proxy and netrc lookups (each a thread hop) stay on only where
    the environment has something for them to find."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("NETRC", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ws_proxy", "wss_proxy"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "netrc").write_text("machine x login u password p\n")
    for name, value in env.items():
        monkeypatch.setenv(name, str(tmp_path / value) if name == "NETRC" else value)
    api = await make_api_client(str(write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", "t")))
    try:
        assert api.rest_client.pool_manager.trust_env is trusted
    finally:
        await api.close()
