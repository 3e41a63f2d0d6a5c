"""A TCP relay that can cut every connection it holds at once: the soak's ``watch-cut`` fault.

``CutProxy(host, port)`` listens on 127.0.0.1 and relays each connection to ``host:port`` byte for
byte, so TLS passes through untouched: the client still verifies the upstream's certificate
(the kube-apiserver's names 127.0.0.1; only the port differs, and a certificate does not name
ports). ``cut()`` aborts every connection it holds, both sides at once, mid-stream: a client
reading a watch loses it wherever the bytes were, inside a TLS record or an event's line. The
proxy goes on accepting; a connection whose upstream refuses (the apiserver down) is closed at
once, as the apiserver itself would be unreachable.

It runs in a thread with its own event loop, so the caller's loop blocking (a process signalled
and waited for, a log read) never stalls the relayed traffic. Development harness only.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

#: bytes read at once from either side
CHUNK = 64 * 1024


class CutProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        #: connections accepted, connections whose upstream refused, connections cut
        self.accepted = self.refused = self.cut_total = 0
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="cutproxy", daemon=True)

    def start(self) -> int:
        """Start listening on a free port of 127.0.0.1; the port."""
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = fut.result(10)
        return self.port

    @property
    def server(self) -> str:
        """The proxy's address as a kubeconfig's ``server``."""
        return f"https://127.0.0.1:{self.port}"

    def cut(self) -> int:
        """Abort every connection held now (both sides); how many were cut."""
        return asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(10)

    def held(self) -> int:
        """Connections held now."""
        return len(self._pairs)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            u_reader, u_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self.refused += 1
            c_writer.transport.abort()
            return
        pair = (c_writer, u_writer)
        self._pairs.add(pair)
        try:
            relays = [
                asyncio.ensure_future(_relay(c_reader, u_writer)),
                asyncio.ensure_future(_relay(u_reader, c_writer)),
            ]
            # one side ending ends the connection: TLS has nothing to say after either side closes
            await asyncio.wait(relays, return_when=asyncio.FIRST_COMPLETED)
            for task in relays:
                task.cancel()
        finally:
            self._pairs.discard(pair)
            for w in pair:
                w.transport.abort()
                w.close()

    async def _cut(self) -> int:
        pairs = list(self._pairs)
        self._pairs.clear()
        for pair in pairs:
            for w in pair:
                w.transport.abort()
        self.cut_total += len(pairs)
        return len(pairs)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await asyncio.sleep(0.1)  # the aborted transports' sockets closed (their callbacks run)


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.CancelledError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
