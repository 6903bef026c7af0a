"""An in-process asyncua server that plays a FIELD server behind uagate.

`FieldServer.start()` runs an asyncua Server on 127.0.0.1 with an ephemeral port (bind
port 0, then read the bound port back), security policy None only, and this address space
in namespace FIELD_NS_URI:

- Objects/Plant                 object       (ns;s=Plant)
- Objects/Plant/Temperature     Double       (ns;s=Plant.Temperature), changes every 100 ms
- Objects/Plant/Setpoint        Double       (ns;s=Plant.Setpoint), writable
- Objects/Plant/Add             method       (ns;s=Plant.Add), (Double a, Double b) -> a + b
- Objects/Plant/Mode            NodeId       (ns;s=Plant.Mode), names a node of this namespace
- Types/.../PumpEvent           event type   (BaseEventType with a Double property Pressure)

Temperature is `base + 0.1 * tick`, so two field servers with different `base` values
tell apart which server a northbound value came from. `stop()` is idempotent and bounded.

History: Temperature and Mode keep their value changes, and Plant (an event notifier) its
PumpEvents (`emit_pump_event`), in asyncua's in-memory history. A HistoryRead answers at
most HISTORY_PAGE values at a time, with a continuation point for the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timezone
from typing import Any

from asyncua import Server, ua
from asyncua.common.node import Node
from asyncua.server.history import HistoryDict

FIELD_NS_URI = "urn:interop:field"
TICK_S = 0.1
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
HISTORY_PAGE = 4
HISTORY_COUNT = 1000

SERVICE_LEVEL = ua.NodeId(ua.ObjectIds.Server_ServiceLevel)


def stamped(value: ua.Variant) -> ua.DataValue:
    """A value with its SourceTimestamp, as a field device reports it."""
    now = datetime.now(timezone.utc)
    return ua.DataValue(value, SourceTimestamp=now, ServerTimestamp=now)


class SourceKeyedHistory(HistoryDict):
    """asyncua's in-memory history, with events kept under their SourceNode. asyncua keys a
    historized event by the node that emitted it, and the events its own history subscription
    receives all say the Server object; a PumpEvent of Plant belongs to Plant's history."""

    async def save_event(self, event: Any) -> None:
        event.emitting_node = event.SourceNode
        await super().save_event(event)


class FieldServer:
    """One asyncua field server (not started until `start`)."""

    def __init__(self, name: str = "field", base: float = 20.0, port: int = 0) -> None:
        """`port` 0 binds an ephemeral port; another port restarts a server where one was."""
        self.name = name
        self.base = base
        self._bind_port = port
        self.server = Server()
        self.url: str = ""
        self.port: int = 0
        self.ns: int = 0
        self.plant: Node | None = None
        self.temperature: Node | None = None
        self.setpoint: Node | None = None
        self.add: Node | None = None
        self.mode: Node | None = None
        self.pump_event: Node | None = None
        self._pump_events: Any = None
        self._server_events: Any = None
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
        srv.set_endpoint(f"opc.tcp://127.0.0.1:{self._bind_port}/")
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
        self.mode = await self.plant.add_variable(
            ua.NodeId("Plant.Mode", ns),
            ua.QualifiedName("Mode", ns),
            ua.Variant(ua.NodeId("Plant.Setpoint", ns), ua.VariantType.NodeId),
        )
        self.pump_event = await srv.create_custom_event_type(
            ns, "PumpEvent", ua.ObjectIds.BaseEventType, [("Pressure", ua.VariantType.Double)]
        )
        await self.plant.set_event_notifier([ua.EventNotifier.SubscribeToEvents, ua.EventNotifier.HistoryRead])
        # asyncua historizes the event types a source says it generates.
        await self.plant.add_reference(self.pump_event.nodeid, ua.ObjectIds.GeneratesEvent)
        await srv.start()
        srv.iserver.history_manager.storage = SourceKeyedHistory(HISTORY_PAGE)
        # The first value kept is the current one: give it a SourceTimestamp, which asyncua's
        # history compares with the requested time range (it keeps what is written as is).
        await srv.write_attribute_value(self.temperature.nodeid, stamped(ua.Variant(self.base, ua.VariantType.Double)))
        await self.set_mode(ua.NodeId("Plant.Setpoint", ns))
        await srv.historize_node_data_change([self.temperature, self.mode], period=None, count=HISTORY_COUNT)
        await srv.historize_node_event(self.plant, period=None, count=HISTORY_COUNT)
        self._pump_events = await srv.get_event_generator(self.pump_event, self.plant)
        self._server_events = await srv.get_event_generator(self.pump_event, ua.ObjectIds.Server)
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
            # Stop listening before anything else. asyncua's stop closes the open connections
            # first and the listener only later; a client that reconnects at once (uagate does)
            # would be accepted in between and keep a connection to a server that has stopped.
            bserver = self.server.bserver
            if bserver is not None and bserver._server is not None:
                bserver._server.close()
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
                self.temperature.nodeid, stamped(ua.Variant(value, ua.VariantType.Double))
            )

    def _add(self, parent: ua.NodeId, a: ua.Variant, b: ua.Variant) -> list[ua.Variant]:
        self.adds.append((a.Value, b.Value))
        return [ua.Variant(a.Value + b.Value, ua.VariantType.Double)]

    async def set_mode(self, node: ua.NodeId) -> None:
        assert self.mode is not None
        await self.server.write_attribute_value(self.mode.nodeid, stamped(ua.Variant(node, ua.VariantType.NodeId)))

    async def emit_pump_event(self, pressure: float) -> None:
        """Fires one PumpEvent from Plant (kept in Plant's event history)."""
        self._pump_events.event.Pressure = pressure
        await self._pump_events.trigger(message=f"pressure {pressure}")

    async def emit_server_event(self, message: str) -> None:
        """Fires one PumpEvent from the Server object (the root notifier), with `message`."""
        self._server_events.event.Pressure = 0.0
        await self._server_events.trigger(message=message)

    def is_own_value(self, value: Any) -> bool:
        """Whether a Temperature value came from this server (its `base` band of 1000)."""
        return isinstance(value, float) and self.base <= value < self.base + 1000.0

    async def set_service_level(self, level: int) -> None:
        await self.server.write_attribute_value(SERVICE_LEVEL, ua.DataValue(ua.Variant(level, ua.VariantType.Byte)))

    # -- introspection -------------------------------------------------------------------
    def monitored_items(self, node: ua.NodeId, attribute: ua.AttributeIds = ua.AttributeIds.Value) -> list[Any]:
        """The MonitoredItemData of every monitored item on (node, attribute), over all the
        clients' subscriptions (not the server's own history subscription)."""
        found = []
        subs = self.server.iserver.subscription_service.subscriptions
        historian = self.server.iserver.history_manager._sub
        own = historian.subscription_id if historian is not None else None
        for sid, isub in list(subs.items()):
            if sid == own:
                continue
            for mdata in list(isub.monitored_item_srv._monitored_items.values()):
                rvid = mdata.read_value_id
                if rvid is not None and rvid.NodeId == node and rvid.AttributeId == attribute:
                    found.append(mdata)
        return found

    def temperature_item_count(self) -> int:
        assert self.temperature is not None
        return len(self.monitored_items(self.temperature.nodeid))
