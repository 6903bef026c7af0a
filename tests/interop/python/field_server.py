"""An in-process asyncua server that plays a FIELD server behind uagate.

`FieldServer.start()` runs an asyncua Server on 127.0.0.1 with an ephemeral port (bind
port 0, then read the bound port back), security policy None only, and this address space
in namespace FIELD_NS_URI:

- Objects/Plant                 object       (ns;s=Plant)
- Objects/Plant/Temperature     Double       (ns;s=Plant.Temperature), changes every 100 ms
- Objects/Plant/Setpoint        Double       (ns;s=Plant.Setpoint), writable
- Objects/Plant/Add             method       (ns;s=Plant.Add), (Double a, Double b) -> a + b

Temperature is `base + 0.1 * tick`, so two field servers with different `base` values
tell apart which server a northbound value came from. `stop()` is idempotent and bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from asyncua import Server, ua
from asyncua.common.node import Node

FIELD_NS_URI = "urn:interop:field"
TICK_S = 0.1
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0

SERVICE_LEVEL = ua.NodeId(ua.ObjectIds.Server_ServiceLevel)


class FieldServer:
    """One asyncua field server (not started until `start`)."""

    def __init__(self, name: str = "field", base: float = 20.0) -> None:
        self.name = name
        self.base = base
        self.server = Server()
        self.url: str = ""
        self.port: int = 0
        self.ns: int = 0
        self.plant: Node | None = None
        self.temperature: Node | None = None
        self.setpoint: Node | None = None
        self.add: Node | None = None
        self.adds: list[tuple[float, float]] = []
        self._ticker: asyncio.Task[None] | None = None
        self._tick = 0
        self._running = False

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> str:
        await asyncio.wait_for(self._start(), START_TIMEOUT_S)
        return self.url

    async def _start(self) -> None:
        srv = self.server
        await srv.init()
        srv.set_endpoint("opc.tcp://127.0.0.1:0/")
        srv.set_server_name(f"uagate interop field server {self.name}")
        srv.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        self.ns = await srv.register_namespace(FIELD_NS_URI)
        ns = self.ns
        objects = srv.nodes.objects
        self.plant = await objects.add_object(ua.NodeId("Plant", ns), ua.QualifiedName("Plant", ns))
        self.temperature = await self.plant.add_variable(
            ua.NodeId("Plant.Temperature", ns),
            ua.QualifiedName("Temperature", ns),
            ua.Variant(self.base, ua.VariantType.Double),
        )
        self.setpoint = await self.plant.add_variable(
            ua.NodeId("Plant.Setpoint", ns),
            ua.QualifiedName("Setpoint", ns),
            ua.Variant(0.0, ua.VariantType.Double),
        )
        await self.setpoint.set_writable()
        self.add = await self.plant.add_method(
            ua.NodeId("Plant.Add", ns),
            ua.QualifiedName("Add", ns),
            self._add,
            [ua.VariantType.Double, ua.VariantType.Double],
            [ua.VariantType.Double],
        )
        await srv.start()
        assert srv.bserver is not None
        self.port = int(srv.bserver.port)
        assert self.port != 0, "asyncua did not report the bound port"
        self.url = f"opc.tcp://127.0.0.1:{self.port}/"
        # The endpoints were described before the port was known (port 0): fix their URLs.
        for edp in srv.iserver.endpoints:
            edp.EndpointUrl = self.url
            edp.Server.DiscoveryUrls = [self.url]
        self._running = True
        self._ticker = asyncio.create_task(self._run_ticker())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._ticker
            self._ticker = None
        if self._running:
            self._running = False
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.server.stop(), STOP_TIMEOUT_S)

    @property
    def running(self) -> bool:
        return self._running

    # -- behaviour -----------------------------------------------------------------------
    async def _run_ticker(self) -> None:
        assert self.temperature is not None
        while True:
            await asyncio.sleep(TICK_S)
            self._tick += 1
            value = self.base + 0.1 * self._tick
            await self.server.write_attribute_value(
                self.temperature.nodeid, ua.DataValue(ua.Variant(value, ua.VariantType.Double))
            )

    def _add(self, parent: ua.NodeId, a: ua.Variant, b: ua.Variant) -> list[ua.Variant]:
        self.adds.append((a.Value, b.Value))
        return [ua.Variant(a.Value + b.Value, ua.VariantType.Double)]

    def is_own_value(self, value: Any) -> bool:
        """Whether a Temperature value came from this server (its `base` band of 1000)."""
        return isinstance(value, float) and self.base <= value < self.base + 1000.0

    async def set_service_level(self, level: int) -> None:
        await self.server.write_attribute_value(SERVICE_LEVEL, ua.DataValue(ua.Variant(level, ua.VariantType.Byte)))

    # -- introspection -------------------------------------------------------------------
    def monitored_items(self, node: ua.NodeId, attribute: ua.AttributeIds = ua.AttributeIds.Value) -> list[Any]:
        """The MonitoredItemData of every monitored item on (node, attribute), over all subscriptions."""
        found = []
        subs = self.server.iserver.subscription_service.subscriptions
        for isub in list(subs.values()):
            for mdata in list(isub.monitored_item_srv._monitored_items.values()):
                rvid = mdata.read_value_id
                if rvid is not None and rvid.NodeId == node and rvid.AttributeId == attribute:
                    found.append(mdata)
        return found

    def temperature_item_count(self) -> int:
        assert self.temperature is not None
        return len(self.monitored_items(self.temperature.nodeid))
