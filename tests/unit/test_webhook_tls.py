"""The webhook server's TLS floor: 1.2 and 1.3 handshake, anything older is refused by the server."""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import ssl
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import kopf
import pytest

from gpushare.webhook import tls as certs
from gpushare.webhook.server import MINIMUM_TLS_VERSION, GPUShareWebhookServer


async def _allow(review: Any, **_: Any) -> dict[str, Any]:
    return {"response": {"uid": review["request"]["uid"], "allowed": True}}


def _files(tmp_path: Path) -> certs.CertFiles:
    bundle = certs.renew(None, ["127.0.0.1"], dt.datetime.now(dt.UTC))
    files, _ = certs.write_files(bundle, tmp_path)
    return files


def test_a_lax_context_is_raised_to_tls_1_2(tmp_path: Path) -> None:
    files = _files(tmp_path)
    lax = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
    with warnings.catch_warnings():  # setting a deprecated version warns; that is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        lax.minimum_version = ssl.TLSVersion.TLSv1
    server = GPUShareWebhookServer(
        addr="127.0.0.1", port=1, certfile=str(files.certfile), pkeyfile=str(files.keyfile),
        cafile=str(files.cafile), context=lax,
    )  # fmt: skip
    _, context = server._build_ssl()
    assert context is lax
    assert context.minimum_version == MINIMUM_TLS_VERSION == ssl.TLSVersion.TLSv1_2


def _handshake(port: int, cafile: Path, version: ssl.TLSVersion) -> ssl.TLSVersion | str:
    ctx = ssl.create_default_context(cafile=str(cafile))
    with warnings.catch_warnings():  # TLS 1.1 is deprecated: the client offers it on purpose
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = version
        ctx.maximum_version = version
    if version < ssl.TLSVersion.TLSv1_2:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client offer it; the server must refuse
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            return str(tls.version())
    except (ssl.SSLError, OSError) as exc:
        return f"refused: {exc}"


async def test_server_handshakes_tls_1_2_and_1_3_only(tmp_path: Path, unused_tcp_port: int) -> None:
    files = _files(tmp_path)
    server = GPUShareWebhookServer(
        addr="127.0.0.1", port=unused_tcp_port, host="127.0.0.1", certfile=str(files.certfile),
        pkeyfile=str(files.keyfile), cafile=str(files.cafile),
    )  # fmt: skip
    # (an async generator, typed AsyncIterator like Kopf's WebhookServer.__call__: aclose() exists)
    gen = cast("AsyncGenerator[kopf.WebhookClientConfig, None]", server(_allow))  # type: ignore[arg-type]
    await gen.__anext__()
    try:
        got = {
            v: await asyncio.to_thread(_handshake, unused_tcp_port, files.cafile, v)
            for v in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_1)
        }
    finally:
        await gen.aclose()
    assert got[ssl.TLSVersion.TLSv1_3] == "TLSv1.3"
    assert got[ssl.TLSVersion.TLSv1_2] == "TLSv1.2"
    if "no protocols available" in str(got[ssl.TLSVersion.TLSv1_1]):
        pytest.fail("this OpenSSL cannot even offer TLS 1.1 as a client; the check proves nothing here")
    assert str(got[ssl.TLSVersion.TLSv1_1]).startswith("refused")
