"""`uagate demo`: a newcomer browses live data at once.

The demo runs two in-process simulated field servers as a hot redundant pair, mounted under
Objects/plant over SignAndEncrypt. An asyncua client checks that the pair is connected, that
the mount shows the simulator's objects and that values are live.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from asyncua import Client, ua
from conftest import ServerTarget

pytestmark = pytest.mark.uagate_only

SIM_NS_URI = "urn:uagate:sim"
STATE = ua.NodeId("FieldStatus.plant.State", 2)
MOUNT = ua.NodeId("Field.plant", 2)
WAIT_S = 20.0


async def test_demo_mounts_a_live_hot_pair(target: ServerTarget) -> None:
    url = target.start("demo", "--listen", "127.0.0.1:0")
    client = Client(url, timeout=10)
    async with asyncio.timeout(60):
        await client.connect()
        try:
            deadline = time.monotonic() + WAIT_S
            state = None
            while time.monotonic() < deadline:
                state = await client.get_node(STATE).read_value()
                if state == "Connected":
                    break
                await asyncio.sleep(0.1)
            assert state == "Connected", f"demo field connection: {state}\n{target.log_tail()}"

            children = await client.get_node(MOUNT).get_children()
            names = [(await c.read_browse_name()).Name for c in children]
            assert "Simulation" in names, names
            assert "Server" not in names, names

            ns = await client.get_namespace_index(SIM_NS_URI)
            counter = client.get_node(ua.NodeId("Simulation.Counter", ns))
            first = await counter.read_value()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and await counter.read_value() == first:
                await asyncio.sleep(0.1)
            assert await counter.read_value() != first, "the demo's values are live"
        finally:
            await client.disconnect()
