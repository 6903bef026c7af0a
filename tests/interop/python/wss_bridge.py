"""A TCP-to-WebSocket bridge for clients without an opc.wss transport.

asyncua has no WebSocket transport, so the interop test points it at
`opc.tcp://127.0.0.1:<bridge port>/` and this bridge carries the bytes to
uagate's opc.wss endpoint, the way a standard TCP-to-WebSocket bridge would:
each accepted TCP connection gets its own TLS WebSocket connection with the
`opcua+uacp` subprotocol; every UACP message read from TCP (8-byte header,
size at bytes 4..8) is sent as one binary WebSocket message, and every
message received is written back to TCP. Close codes the server sends are
recorded for the tests.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from pathlib import Path

from websockets.asyncio.client import connect

SUBPROTOCOL = "opcua+uacp"


class WssBridge:
    """Listens on 127.0.0.1 (ephemeral port) and bridges to `wss_url`."""

    def __init__(self, wss_url: str, ca_file: Path) -> None:
        # opc.wss://host:port/path -> wss://host:port/path
        self.target = "wss://" + wss_url.split("://", 1)[1]
        self.ssl = ssl.create_default_context(cafile=str(ca_file))
        # The certificate is pinned by the CA file; its SANs are the
        # gateway's host names and 127.0.0.1.
        self.server: asyncio.base_events.Server | None = None
        self.port: int | None = None
        self.close_codes: list[int | None] = []
        self.subprotocols: list[str | None] = []
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"opc.tcp://127.0.0.1:{self.port}/"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for t in list(self._tasks):
            t.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            async with connect(
                self.target,
                subprotocols=[SUBPROTOCOL],
                ssl=self.ssl,
                max_size=None,
                ping_interval=None,
                open_timeout=10,
            ) as ws:
                self.subprotocols.append(ws.subprotocol)

                async def tcp_to_ws() -> None:
                    while True:
                        header = await reader.readexactly(8)
                        size = struct.unpack_from("<I", header, 4)[0]
                        body = await reader.readexactly(max(size - 8, 0))
                        await ws.send(header + body)

                async def ws_to_tcp() -> None:
                    async for message in ws:
                        writer.write(message)
                        await writer.drain()

                pumps = [asyncio.create_task(tcp_to_ws()), asyncio.create_task(ws_to_tcp())]
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
                for p in pumps:
                    p.cancel()
                self.close_codes.append(ws.close_code)
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)
