"""The soak's ``watch-cut`` relay (``gpushare.devcluster.cutproxy``): bytes pass both ways untouched
(TLS verifies the upstream's certificate through it, by the address the certificate names), a
cut ends every held connection mid-stream on both sides, and the relay goes on accepting."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import pytest

from gpushare.devcluster import pki
from gpushare.devcluster.cutproxy import CutProxy


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Echo each line; ``half`` is answered with half an event (no end of line), as a watch stream
    caught between two reads."""
    try:
        while line := await reader.readline():
            writer.write(b"half an ev" if line == b"half\n" else line)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


def test_relays_both_ways_cuts_everything_and_keeps_accepting() -> None:
    async def scenario() -> None:
        upstream = await asyncio.start_server(_echo, "127.0.0.1", 0)
        proxy = CutProxy("127.0.0.1", upstream.sockets[0].getsockname()[1])
        proxy.start()
        try:
            conns = [await asyncio.open_connection("127.0.0.1", proxy.port) for _ in range(3)]
            for i, (r, w) in enumerate(conns):
                w.write(b"line %d\n" % i)
                assert await asyncio.wait_for(r.readline(), 5) == b"line %d\n" % i
            # the first client has half an event from the upstream when the cut comes
            conns[0][1].write(b"half\n")
            await asyncio.sleep(0.1)
            assert proxy.held() == 3
            assert proxy.cut() == 3
            for r, _ in conns:  # each client's stream ends there: no line completes
                with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                    got = await asyncio.wait_for(r.readline(), 5)
                    if not got.endswith(b"\n"):
                        raise asyncio.IncompleteReadError(got, None)
            assert proxy.held() == 0
            # and a new connection goes through
            r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
            w.write(b"again\n")
            assert await asyncio.wait_for(r.readline(), 5) == b"again\n"
            assert (proxy.accepted, proxy.cut_total) == (4, 3)
            for _, cw in [*conns, (r, w)]:
                cw.close()
                with contextlib.suppress(ConnectionError):
                    await cw.wait_closed()
        finally:
            proxy.stop()
            upstream.close()
            await upstream.wait_closed()

    asyncio.run(scenario())


def test_an_upstream_down_closes_the_client_and_tls_verifies_through_it(tmp_path: Path) -> None:
    """TLS passes through: a client verifying the certificate for 127.0.0.1 talks to the upstream
    through the relay's port. An upstream refusing closes the client's connection at once."""
    ca = pki.make_ca()
    pki.make_serving_cert(ca, "kube-apiserver").write(tmp_path / "tls.crt", tmp_path / "tls.key")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())

    async def scenario() -> None:
        upstream = await asyncio.start_server(_echo, "127.0.0.1", 0, ssl=server_ctx)
        port = upstream.sockets[0].getsockname()[1]
        proxy = CutProxy("127.0.0.1", port)
        proxy.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", proxy.port, ssl=client_ctx)
            w.write(b"over tls\n")
            assert await asyncio.wait_for(r.readline(), 5) == b"over tls\n"
            assert proxy.cut() == 1
            with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
                got = await asyncio.wait_for(r.readline(), 5)
                if not got:
                    raise asyncio.IncompleteReadError(got, None)
            upstream.close()
            await upstream.wait_closed()
            w.close()
            r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
            assert await asyncio.wait_for(r.read(), 5) == b""
            assert proxy.refused == 1
            w.close()
        finally:
            proxy.stop()

    asyncio.run(scenario())
