"""opc.wss with an independent stack: asyncua through a TCP-to-WebSocket
bridge reads ServerStatus and subscribes, while a second asyncua client does
the same over opc.tcp against the same gateway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import pytest
from asyncua import Client, ua
from conftest import ServerTarget
from wss_bridge import SUBPROTOCOL, WssBridge

T = TypeVar("T")

STEP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0
COUNTER = ua.NodeId("Gateway.Demo.Counter", 2)
SERVER_STATUS = ua.NodeId(ua.ObjectIds.Server_ServerStatus)

pytestmark = pytest.mark.uagate_only


async def bounded(aw: Awaitable[T], seconds: float = STEP_TIMEOUT_S) -> T:
    return await asyncio.wait_for(aw, seconds)


class Changes:
    """Collects data change notifications of one subscription."""

    def __init__(self) -> None:
        self.values: asyncio.Queue[object] = asyncio.Queue()

    def datachange_notification(self, node, val, data) -> None:  # noqa: ANN001 (asyncua callback)
        self.values.put_nowait(val)


async def read_and_subscribe(url: str) -> tuple[ua.ServerStatusDataType, list[int]]:
    """Connects anonymously, reads ServerStatus and takes three Counter changes."""
    client = Client(url, timeout=REQUEST_TIMEOUT_S)
    await bounded(client.connect())
    try:
        status = await bounded(client.get_node(SERVER_STATUS).read_value())
        changes = Changes()
        sub = await bounded(client.create_subscription(100, changes))
        await bounded(sub.subscribe_data_change(client.get_node(COUNTER)))
        seen = [await bounded(changes.values.get()) for _ in range(3)]
        await bounded(sub.delete())
        return status, seen
    finally:
        await bounded(client.disconnect())


async def test_asyncua_over_wss_and_tcp_against_one_gateway(server: ServerTarget) -> None:
    assert server.wss_url is not None
    bridge = WssBridge(server.wss_url, server.tls_cert_file)
    await bridge.start()
    try:
        (wss_status, wss_values), (tcp_status, tcp_values) = await bounded(
            asyncio.gather(read_and_subscribe(bridge.url), read_and_subscribe(server.url)),
            90,
        )
    finally:
        await bridge.stop()
    for status in (wss_status, tcp_status):
        assert isinstance(status, ua.ServerStatusDataType)
        assert status.State == ua.ServerState.Running
        assert status.BuildInfo.ProductName == "uagate OPC UA gateway"
    # Same server, same counter: both streams increase.
    for values in (wss_values, tcp_values):
        assert all(isinstance(v, int) for v in values), values
        assert values == sorted(values) and len(set(values)) == 3, values
    # The connection really went over opc.wss with the UACP subprotocol.
    assert bridge.subprotocols and all(p == SUBPROTOCOL for p in bridge.subprotocols), bridge.subprotocols
