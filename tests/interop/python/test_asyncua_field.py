"""uagate as a gateway in front of asyncua FIELD servers.

The field servers are asyncua Servers running in this test's event loop (field_server.py);
uagate connects to them southbound (`[[field_servers]]`, security None) and mounts their
Objects folder as Objects/<name>. An asyncua client talks to uagate northbound. Because
the field servers live in-process, the tests can look inside them: the value a northbound
Write left behind, and the monitored items the gateway created southbound.

Every wait is bounded; every field server and gateway process is stopped at teardown.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from asyncua import Client, ua
from asyncua.common.subscription import Subscription
from conftest import ServerTarget
from field_server import FIELD_NS_URI, FieldServer
from test_asyncua_client import REQUEST_TIMEOUT_S, bounded

pytestmark = pytest.mark.uagate_only

GATEWAY_NS = 2  # urn:uagate:gateway
OBJECTS = ua.NodeId(ua.ObjectIds.ObjectsFolder)
NAMESPACE_ARRAY = ua.NodeId(ua.ObjectIds.Server_NamespaceArray)
CONNECT_TIMEOUT_S = 20.0


def mount(name: str) -> ua.NodeId:
    return ua.NodeId(f"Field.{name}", GATEWAY_NS)


def status(name: str, var: str) -> ua.NodeId:
    return ua.NodeId(f"FieldStatus.{name}.{var}", GATEWAY_NS)


def gateway_config(field_toml: str) -> str:
    return f"""\
[listen]
opc_tcp = "127.0.0.1:0"
[server]
application_name = "uagate-test"
allow_anonymous_write = true

{field_toml}"""


def field_toml(name: str, urls: list[str], redundancy: str = "none") -> str:
    endpoints = ", ".join(f'"{u}"' for u in urls)
    return f"""\
[[field_servers]]
name = "{name}"
endpoints = [{endpoints}]
security_mode = "none"
security_policy = "None"
redundancy = "{redundancy}"
keep_alive_interval = "200ms"
request_timeout = "3s"
[field_servers.reconnect]
initial_delay = "200ms"
max_delay = "1s"
"""


def same_url(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()


async def start_gateway(target: ServerTarget, config: str) -> str:
    """Import `config` and start uagate; the READY wait runs in a thread so the in-process
    field servers keep serving meanwhile."""
    path = target.tmp / "uagate-field.toml"
    path.write_text(config)
    await asyncio.to_thread(target.cli, "config", "import", str(path))
    return await asyncio.to_thread(target.start)


@asynccontextmanager
async def field_servers(*specs: tuple[str, float]) -> AsyncIterator[list[FieldServer]]:
    """Start one FieldServer per (name, base); stop all of them on exit."""
    servers: list[FieldServer] = []
    try:
        for name, base in specs:
            fs = FieldServer(name, base)
            servers.append(fs)
            await fs.start()
        yield servers
    finally:
        for fs in servers:
            await fs.stop()


@asynccontextmanager
async def connected(url: str) -> AsyncIterator[Client]:
    client = Client(url, timeout=REQUEST_TIMEOUT_S)
    await bounded(client.connect())
    try:
        yield client
    finally:
        try:
            await asyncio.wait_for(client.disconnect(), REQUEST_TIMEOUT_S)
        except Exception:  # the test outcome is already decided; do not mask it
            pass


async def eventually(
    what: str, probe: Callable[[], Awaitable[Any]], timeout: float, period: float = 0.1
) -> Any:
    """Poll `probe` until it returns a truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await asyncio.wait_for(probe(), max(0.5, deadline - time.monotonic()))
        except (ua.UaError, asyncio.TimeoutError, OSError) as exc:
            last = exc
        if last and not isinstance(last, BaseException):
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"{what}: not within {timeout}s (last: {last!r})")
        await asyncio.sleep(period)


async def read(client: Client, node: ua.NodeId) -> Any:
    return await bounded(client.get_node(node).read_value(), REQUEST_TIMEOUT_S)


async def wait_connected(client: Client, name: str, target: ServerTarget) -> None:
    async def probe() -> bool:
        return await read(client, status(name, "State")) == "Connected"

    try:
        await eventually(f"FieldStatus.{name}.State == 'Connected'", probe, CONNECT_TIMEOUT_S, period=0.2)
    except pytest.fail.Exception:
        state = await read(client, status(name, "State"))
        last_error = await read(client, status(name, "LastError"))
        pytest.fail(f"field connection {name} not Connected within {CONNECT_TIMEOUT_S}s: "
                    f"State={state!r} LastError={last_error!r}\n{target.log_tail()}")


async def field_ns(client: Client) -> int:
    namespaces = await read(client, NAMESPACE_ARRAY)
    assert FIELD_NS_URI in namespaces, f"{FIELD_NS_URI} not in the gateway NamespaceArray {namespaces}"
    return namespaces.index(FIELD_NS_URI)


class Recorder:
    """asyncua subscription handler recording (arrival, value, status) of each data change."""

    def __init__(self) -> None:
        self.changes: list[tuple[float, Any, ua.StatusCode]] = []

    def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
        self.changes.append((time.monotonic(), val, data.monitored_item.Value.StatusCode))

    def good_since(self, t0: float, accept: Callable[[Any], bool] = lambda v: True) -> list[Any]:
        return [v for t, v, s in self.changes if t >= t0 and s.is_good() and accept(v)]


async def subscribe(client: Client, node: ua.NodeId, handler: Recorder, sampling_ms: float = 100) -> Subscription:
    params = ua.CreateSubscriptionParameters(
        RequestedPublishingInterval=100,
        RequestedLifetimeCount=300,
        RequestedMaxKeepAliveCount=10,
        MaxNotificationsPerPublish=0,
        PublishingEnabled=True,
        Priority=0,
    )
    sub = Subscription(client.uaclient.session, params, handler)
    await bounded(sub.init())
    await bounded(sub.subscribe_data_change(client.get_node(node), queuesize=10, sampling_interval=sampling_ms))
    return sub


# -- 1. Read / Write / Browse / Call / Translate through the mount ----------------------------
async def test_mount_read_write_browse_call_translate(target: ServerTarget) -> None:
    async with field_servers(("line1", 20.0)) as (field,):
        url = await start_gateway(target, gateway_config(field_toml("line1", [field.url])))
        async with connected(url) as client:
            await wait_connected(client, "line1", target)
            assert same_url(await read(client, status("line1", "ActiveEndpoint")), field.url)
            ns = await field_ns(client)
            temperature = ua.NodeId("Plant.Temperature", ns)
            setpoint = ua.NodeId("Plant.Setpoint", ns)
            plant = ua.NodeId("Plant", ns)
            add = ua.NodeId("Plant.Add", ns)

            # Read: Temperature is a Double the field server keeps changing.
            first = await read(client, temperature)
            assert isinstance(first, float) and field.is_own_value(first), first

            async def changed() -> bool:
                return (await read(client, temperature)) != first

            await eventually("Temperature read through the gateway changes", changed, 5.0)

            # Write through the gateway, read back via the gateway AND on the field server itself.
            await bounded(client.get_node(setpoint).write_value(ua.DataValue(ua.Variant(42.25, ua.VariantType.Double))))
            assert await read(client, setpoint) == 42.25
            assert field.setpoint is not None
            assert await field.setpoint.read_value() == 42.25, "the write did not reach the field server"

            # Browse Objects/line1: the field server's Plant, not its Server object.
            refs = await bounded(client.get_node(mount("line1")).get_children_descriptions())
            names = {(r.BrowseName.NamespaceIndex, r.BrowseName.Name) for r in refs}
            assert (ns, "Plant") in names, names
            assert not any(name == "Server" for _, name in names), names
            plant_ref = next(r for r in refs if r.BrowseName == ua.QualifiedName("Plant", ns))
            assert (plant_ref.NodeId.Identifier, plant_ref.NodeId.NamespaceIndex) == ("Plant", ns), plant_ref
            plant_children = await bounded(client.get_node(plant).get_children_descriptions())
            assert {r.BrowseName.Name for r in plant_children} >= {"Temperature", "Setpoint", "Add"}, plant_children

            # Call Add through the gateway; the field server's method ran.
            result = await bounded(client.get_node(plant).call_method(add, 2.5, 4.0))
            assert result == 6.5
            assert field.adds == [(2.5, 4.0)]

            # Translate Objects -> 2:line1 -> ns:Plant -> ns:Temperature.
            node = await bounded(
                client.get_node(OBJECTS).get_child([f"{GATEWAY_NS}:line1", f"{ns}:Plant", f"{ns}:Temperature"])
            )
            assert node.nodeid == temperature, node.nodeid

            # And back up out of the mount, which neither server knows whole:
            # Temperature -> ^ns:Plant -> ^2:line1 (the mount folder) -> ^0:Objects -> 0:Server.
            def element(name: ua.QualifiedName, inverse: bool) -> ua.RelativePathElement:
                e = ua.RelativePathElement()
                e.ReferenceTypeId = ua.NodeId(ua.ObjectIds.HierarchicalReferences)
                e.IsInverse = inverse
                e.IncludeSubtypes = True
                e.TargetName = name
                return e

            path = ua.BrowsePath()
            path.StartingNode = temperature
            path.RelativePath = ua.RelativePath()
            path.RelativePath.Elements = [
                element(ua.QualifiedName("Plant", ns), True),
                element(ua.QualifiedName("line1", GATEWAY_NS), True),
                element(ua.QualifiedName("Objects", 0), True),
                element(ua.QualifiedName("Server", 0), False),
            ]
            [result] = await bounded(client.uaclient.translate_browsepaths_to_nodeids([path]))
            assert result.StatusCode.is_good(), result
            targets = [(t.TargetId.NamespaceIndex, t.TargetId.Identifier) for t in result.Targets]
            assert targets == [(0, ua.ObjectIds.Server)], result


# -- 1b. HistoryRead through the mount ---------------------------------------------------------
async def test_history_read_through_the_mount(target: ServerTarget) -> None:
    """Raw history paged by the field server's continuation points is the same through the
    gateway as directly; NodeId values and event fields come back in the gateway's namespace;
    a continuation point of another mount and a node without history are refused."""
    async with field_servers(("line1", 20.0)) as (field,):
        url = await start_gateway(target, gateway_config(field_toml("line1", [field.url])))
        async with connected(url) as client, connected(field.url) as direct:
            await wait_connected(client, "line1", target)
            ns = await field_ns(client)
            assert ns != field.ns, "the field namespace must move, or remapping goes unseen"
            start = datetime.now(timezone.utc)
            for mode in ("Plant.Temperature", "Plant.Add"):
                await asyncio.sleep(0.15)
                await field.set_mode(ua.NodeId(mode, field.ns))
            for pressure in (1.5, 2.5, 3.5):
                await asyncio.sleep(0.15)
                await field.emit_pump_event(pressure)

            def temperature_of(client: Client, index: int) -> Any:
                return client.get_node(ua.NodeId("Plant.Temperature", index))

            async def ten_values() -> bool:
                end = datetime.now(timezone.utc) - timedelta(seconds=1)
                return len(await temperature_of(direct, field.ns).read_raw_history(start, end)) >= 10

            await eventually("ten Temperature values in the field server's history", ten_values, 10.0)
            # A little in the past: a value stamped just before "now" may not be
            # stored in the field server's history yet when the first read runs.
            end = datetime.now(timezone.utc) - timedelta(seconds=1)

            # Raw values: the same list, several pages of HISTORY_PAGE.
            def rows(values: list[ua.DataValue]) -> list[tuple[Any, Any]]:
                return [(dv.SourceTimestamp, dv.Value.Value) for dv in values]

            want = rows(await bounded(temperature_of(direct, field.ns).read_raw_history(start, end)))
            got = rows(await bounded(temperature_of(client, ns).read_raw_history(start, end)))
            assert len(want) >= 10, want
            assert got == want

            # NodeId values are remapped into the gateway's namespace.
            mode_node = client.get_node(ua.NodeId("Plant.Mode", ns))
            modes = [dv.Value.Value for dv in await bounded(mode_node.read_raw_history(start, end))]
            assert [(m.NamespaceIndex, m.Identifier) for m in modes] == [
                (ns, "Plant.Temperature"),
                (ns, "Plant.Add"),
            ], modes

            # Event history: the fields name the event type and source in the gateway's namespace.
            assert field.pump_event is not None
            pump_event = ua.NodeId(field.pump_event.nodeid.Identifier, ns)
            plant = client.get_node(ua.NodeId("Plant", ns))
            events = await bounded(plant.read_event_history(start, end, evtypes=[pump_event]))
            assert [ev.Pressure for ev in events] == [1.5, 2.5, 3.5], events
            assert {ev.SourceNode for ev in events} == {ua.NodeId("Plant", ns)}, events
            assert {ev.EventType for ev in events} == {pump_event}, events

            # A continuation point that names another mount, and a gateway node with no history.
            details = ua.ReadRawModifiedDetails(
                IsReadModified=False, StartTime=start, EndTime=end, NumValuesPerNode=0, ReturnBounds=False
            )
            forged = await bounded(temperature_of(client, ns).history_read(details, b"\xf1\x05\x00" + b"x" * 8))
            assert forged.StatusCode.value == ua.StatusCodes.BadContinuationPointInvalid, forged
            local = await bounded(client.get_node(status("line1", "State")).history_read(details))
            assert local.StatusCode.value == ua.StatusCodes.BadHistoryOperationUnsupported, local


# -- 2. Shared southbound monitored item --------------------------------------------------------
async def test_ten_clients_share_one_field_monitored_item(target: ServerTarget) -> None:
    clients_n = 10
    async with field_servers(("line1", 20.0)) as (field,):
        url = await start_gateway(target, gateway_config(field_toml("line1", [field.url])))
        max_items = 0
        stop_sampling = asyncio.Event()

        async def sample_field_items() -> None:
            nonlocal max_items
            while not stop_sampling.is_set():
                max_items = max(max_items, field.temperature_item_count())
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample_field_items())
        try:
            async with AsyncExitStack() as stack:
                clients = [await stack.enter_async_context(connected(url)) for _ in range(clients_n)]
                await wait_connected(clients[0], "line1", target)
                ns = await field_ns(clients[0])
                temperature = ua.NodeId("Plant.Temperature", ns)
                assert field.temperature_item_count() == 0

                recorders = [Recorder() for _ in clients]
                subs = await asyncio.gather(*(subscribe(c, temperature, r, 100) for c, r in zip(clients, recorders)))
                t0 = time.monotonic()

                async def all_received() -> bool:
                    return all(len(r.good_since(t0, field.is_own_value)) >= 3 for r in recorders)

                await eventually("every northbound client receives Temperature changes", all_received, 10.0)
                counts = [len(r.good_since(0)) for r in recorders]
                assert field.temperature_item_count() == 1, (
                    f"{field.temperature_item_count()} field-side monitored items for Temperature "
                    f"(expected 1 shared item); northbound notifications {counts}"
                )
                assert max_items == 1, f"up to {max_items} field-side items for Temperature existed at once"

                # Values keep arriving (shared item fans out to all 10).
                t1 = time.monotonic()
                await eventually(
                    "notifications keep coming to every client",
                    lambda: _true(all(len(r.good_since(t1)) >= 2 for r in recorders)),
                    5.0,
                )

                await asyncio.gather(*(bounded(s.delete()) for s in subs))

                async def field_item_gone() -> bool:
                    return field.temperature_item_count() == 0

                await eventually("the field-side item disappears after the last northbound delete",
                                 field_item_gone, 5.0)
        finally:
            stop_sampling.set()
            await sampler
        assert max_items == 1, max_items


async def _true(value: bool) -> bool:
    return value


# -- 2b. Events of a field notifier, shared ----------------------------------------------------
class EventRecorder:
    """asyncua subscription handler keeping every event it is sent."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def event_notification(self, event: Any) -> None:
        self.events.append(event)


async def test_field_events_are_shared_and_remapped(target: ServerTarget) -> None:
    """Event items of two clients with the same filter on a field notifier are served by ONE
    southbound event item; the where clause (OfType PumpEvent) reaches the field server in its
    own namespace; the events arrive in order with EventType and SourceNode in the gateway's
    namespace; another filter is another southbound item; all go with the last subscriber."""
    async with field_servers(("line1", 20.0)) as (field,):
        assert field.plant is not None and field.pump_event is not None
        config = gateway_config(field_toml("line1", [field.url]))
        config = config.replace('opc_tcp = "127.0.0.1:0"\n', 'opc_tcp = "127.0.0.1:0"\nmetrics = "127.0.0.1:0"\n', 1)
        url = await start_gateway(target, config)
        line = await asyncio.to_thread(target.next_stdout_line)
        assert line and line.startswith("METRICS http://127.0.0.1:"), line
        metrics_url = line.split(" ", 1)[1].strip()
        async with connected(url) as a, connected(url) as b:
            await wait_connected(a, "line1", target)
            ns = await field_ns(a)
            assert ns != field.ns, "the field namespace must move, or remapping goes unseen"
            pump_event = ua.NodeId(field.pump_event.nodeid.Identifier, ns)
            plant = ua.NodeId("Plant", ns)

            def event_items() -> int:
                assert field.plant is not None
                return len(field.monitored_items(field.plant.nodeid, ua.AttributeIds.EventNotifier))

            def event_items_metric() -> float | None:
                with urllib.request.urlopen(metrics_url, timeout=REQUEST_TIMEOUT_S) as resp:
                    text = resp.read().decode()
                want = 'uagate_field_event_items{connection="line1"} '
                return next((float(ln[len(want):]) for ln in text.splitlines() if ln.startswith(want)), None)

            async def items_are(n: int) -> bool:
                # The field server's count and the gateway's metric agree.
                return event_items() == n and await asyncio.to_thread(event_items_metric) == n

            recorders: list[EventRecorder] = []
            subs: list[Subscription] = []
            for client in (a, b):
                rec = EventRecorder()
                sub = await bounded(client.create_subscription(100, rec))
                await bounded(sub.subscribe_events(client.get_node(plant), pump_event))
                recorders.append(rec)
                subs.append(sub)
            await eventually("one southbound event item on Plant for two clients", lambda: items_are(1), 5.0)

            for pressure in (1.5, 2.5, 3.5):
                await field.emit_pump_event(pressure)
                await asyncio.sleep(0.05)
            for i, rec in enumerate(recorders):

                async def three(rec: EventRecorder = rec) -> bool:
                    return len(rec.events) >= 3

                await eventually(f"client {i} receives the three PumpEvents", three, 5.0)
                assert [ev.Pressure for ev in rec.events] == [1.5, 2.5, 3.5], rec.events
                assert {ev.SourceNode for ev in rec.events} == {plant}, rec.events
                assert {ev.EventType for ev in rec.events} == {pump_event}, rec.events
                assert len({ev.EventId for ev in rec.events}) == 3, rec.events

            # Another filter (all BaseEventType events) is another southbound item.
            other = await bounded(b.create_subscription(100, EventRecorder()))
            await bounded(other.subscribe_events(b.get_node(plant)))
            await eventually("a second southbound event item for another filter", lambda: items_are(2), 5.0)

            for sub in [*subs, other]:
                await bounded(sub.delete())
            await eventually("no southbound event item after the last subscriber", lambda: items_are(0), 5.0)


async def test_hot_pair_events_follow_the_active_server(target: ServerTarget) -> None:
    """In a hot pair both servers carry the shared event item; only the active server's events
    reach the client, and after the active server stops, the other one's events do."""
    async with field_servers(("a", 1000.0), ("b", 3000.0)) as servers:
        assert all(fs.plant is not None and fs.pump_event is not None for fs in servers)
        pump_ids = {fs.pump_event.nodeid for fs in servers if fs.pump_event is not None}
        assert len(pump_ids) == 1, f"the pair must define PumpEvent alike: {pump_ids}"
        urls = [fs.url for fs in servers]
        gw_url = await start_gateway(target, gateway_config(field_toml("pair", urls, redundancy="hot")))
        async with connected(gw_url) as client:
            await wait_connected(client, "pair", target)
            ns = await field_ns(client)

            async def active_server() -> FieldServer | None:
                endpoint = await read(client, status("pair", "ActiveEndpoint"))
                return next((fs for fs in servers if same_url(endpoint, fs.url)), None)

            first = await eventually("an ActiveEndpoint of the pair", active_server, 5.0)
            other = next(fs for fs in servers if fs is not first)
            rec = EventRecorder()
            sub = await bounded(client.create_subscription(100, rec))
            pump_event = ua.NodeId(first.pump_event.nodeid.Identifier, ns)  # type: ignore[union-attr]
            await bounded(sub.subscribe_events(client.get_node(ua.NodeId("Plant", ns)), pump_event))

            async def on_both() -> bool:
                return all(
                    len(fs.monitored_items(fs.plant.nodeid, ua.AttributeIds.EventNotifier)) == 1  # type: ignore[union-attr]
                    for fs in servers
                )

            await eventually("the event item on both servers of the hot pair", on_both, 5.0)

            def pressures() -> list[float]:
                return [ev.Pressure for ev in rec.events]

            await first.emit_pump_event(1.5)
            await other.emit_pump_event(9.5)
            await eventually("the active server's event", lambda: _true(1.5 in pressures()), 5.0)
            await asyncio.sleep(0.5)
            assert pressures() == [1.5], f"an event of the backup {other.name} leaked: {pressures()}"

            await first.stop()

            async def switched() -> bool:
                return (await active_server()) is other

            await eventually("ActiveEndpoint moves to the other server after the stop", switched, 5.0)
            await other.emit_pump_event(2.5)
            await eventually(f"events of {other.name} after the failover", lambda: _true(2.5 in pressures()), 5.0)
            assert pressures()[0] == 1.5, pressures()
            await bounded(sub.delete())


async def test_field_server_events_reach_the_server_object_and_the_mount_folder(target: ServerTarget) -> None:
    """The gateway's Server object is the root notifier: its event items get the events of
    every field server's Server object; a mount folder's get those of its own field server."""
    async with field_servers(("line1", 20.0), ("line2", 50.0)) as (one, two):
        config = gateway_config(field_toml("line1", [one.url]) + field_toml("line2", [two.url]))
        url = await start_gateway(target, config)
        async with connected(url) as client:
            await wait_connected(client, "line1", target)
            await wait_connected(client, "line2", target)
            everything, line2_only = EventRecorder(), EventRecorder()
            subs = []
            for rec, notifier in ((everything, ua.NodeId(ua.ObjectIds.Server)), (line2_only, mount("line2"))):
                sub = await bounded(client.create_subscription(100, rec))
                await bounded(sub.subscribe_events(client.get_node(notifier)))
                subs.append(sub)
            server = ua.NodeId(ua.ObjectIds.Server)

            async def items_on_field_server_objects() -> bool:
                counts = [len(fs.monitored_items(server, ua.AttributeIds.EventNotifier)) for fs in (one, two)]
                return counts == [1, 2]  # line2: one for the Server object's item, one for its folder's

            await eventually("event items on the field Server objects", items_on_field_server_objects, 5.0)
            await one.emit_server_event("line1 alarm")
            await two.emit_server_event("line2 alarm")

            def messages(rec: EventRecorder) -> list[str]:
                return sorted(ev.Message.Text for ev in rec.events)

            await eventually("both alarms on the gateway Server object",
                             lambda: _true(messages(everything) == ["line1 alarm", "line2 alarm"]), 5.0)
            await eventually("line2's alarm on its mount folder",
                             lambda: _true(messages(line2_only) == ["line2 alarm"]), 5.0)
            # The source of a field server's own event is its mount folder.
            sources = {ev.Message.Text: ev.SourceNode for ev in everything.events}
            assert sources == {"line1 alarm": mount("line1"), "line2 alarm": mount("line2")}, sources
            await asyncio.sleep(0.3)
            assert messages(line2_only) == ["line2 alarm"], "line1's alarm reached line2's folder"
            for sub in subs:
                await bounded(sub.delete())


async def test_field_events_resume_after_the_field_server_restarts(target: ServerTarget) -> None:
    """The field server stops and a new one starts at the same address: the gateway
    reconnects, creates the shared event item again, and the same northbound event item
    receives the new server's events."""
    first = FieldServer("line1", 20.0)
    await first.start()
    servers = [first]
    try:
        url = await start_gateway(target, gateway_config(field_toml("line1", [first.url])))
        async with connected(url) as client:
            await wait_connected(client, "line1", target)
            ns = await field_ns(client)
            assert first.pump_event is not None
            pump_event = ua.NodeId(first.pump_event.nodeid.Identifier, ns)
            rec = EventRecorder()
            sub = await bounded(client.create_subscription(100, rec))
            await bounded(sub.subscribe_events(client.get_node(ua.NodeId("Plant", ns)), pump_event))

            def pressures() -> list[float]:
                return [ev.Pressure for ev in rec.events]

            async def item_on(fs: FieldServer) -> bool:
                assert fs.plant is not None
                return len(fs.monitored_items(fs.plant.nodeid, ua.AttributeIds.EventNotifier)) == 1

            await eventually("the event item on the field server", lambda: item_on(first), 5.0)
            await first.emit_pump_event(1.5)
            await eventually("the first server's event", lambda: _true(pressures() == [1.5]), 5.0)

            await first.stop()
            second = FieldServer("line1", 20.0, port=first.port)
            await second.start()
            servers.append(second)
            await eventually("the event item created again on the restarted server", lambda: item_on(second), 15.0)
            await second.emit_pump_event(2.5)
            await eventually("the restarted server's event", lambda: _true(pressures() == [1.5, 2.5]), 5.0)
            assert {ev.SourceNode for ev in rec.events} == {ua.NodeId("Plant", ns)}, rec.events
            await bounded(sub.delete())
    finally:
        for fs in servers:
            await fs.stop()


# -- 2c. A connection that gave up starts over by itself -------------------------------------
async def test_a_field_connection_that_gave_up_recovers_without_a_restart(target: ServerTarget) -> None:
    """The field server stops; two failed attempts use up the reconnect cycle (max_retries =
    2): the connection reports GaveUp and a Read of a mounted node is refused at once with
    BadNoCommunication instead of waiting for its timeout. The server comes back on the
    same port; max_delay (3 s) after giving up a new cycle finds it, with no gateway restart.
    (A Read of a field node that cannot be served is BadNoCommunication, docs/field.md.)"""
    first = FieldServer("line1", 20.0)
    await first.start()
    servers = [first]
    try:
        toml = field_toml("line1", [first.url]).replace(
            'max_delay = "1s"\n', 'max_delay = "3s"\nmax_retries = 2\n'
        )
        url = await start_gateway(target, gateway_config(toml))
        async with connected(url) as client:
            await wait_connected(client, "line1", target)
            ns = await field_ns(client)
            temperature = ua.NodeId("Plant.Temperature", ns)
            assert isinstance(await read(client, temperature), float)

            await first.stop()

            async def gave_up() -> bool:
                return await read(client, status("line1", "State")) == "GaveUp"

            await eventually("FieldStatus.line1.State == 'GaveUp'", gave_up, 10.0, period=0.05)
            t0 = time.monotonic()
            with pytest.raises(ua.UaStatusCodeError) as refused:
                await read(client, temperature)
            assert refused.value.code == ua.StatusCodes.BadNoCommunication, refused.value
            assert time.monotonic() - t0 < 1.0, "the Read waited although the connection gave up"
            gave_up_at = time.monotonic()

            second = FieldServer("line1", 20.0, port=first.port)
            await second.start()
            servers.append(second)
            await wait_connected(client, "line1", target)
            # Not before max_delay after giving up (the new cycle), well within it plus a connect.
            assert time.monotonic() - gave_up_at > 2.0
            value = await read(client, temperature)
            assert isinstance(value, float) and second.is_own_value(value), value
    finally:
        for fs in servers:
            await fs.stop()


# -- 3. Hot redundant pair: ServiceLevel handover, no flap back, failover on stop ----------------
async def test_hot_pair_service_level_handover_and_failover(target: ServerTarget) -> None:
    async with field_servers(("a", 1000.0), ("b", 3000.0)) as servers:
        urls = [fs.url for fs in servers]
        gw_url = await start_gateway(target, gateway_config(field_toml("pair", urls, redundancy="hot")))
        async with connected(gw_url) as client:
            await wait_connected(client, "pair", target)
            ns = await field_ns(client)
            temperature = ua.NodeId("Plant.Temperature", ns)

            async def active_server() -> FieldServer | None:
                endpoint = await read(client, status("pair", "ActiveEndpoint"))
                return next((fs for fs in servers if same_url(endpoint, fs.url)), None)

            first = await eventually("an ActiveEndpoint of the pair", active_server, 5.0)
            other = next(fs for fs in servers if fs is not first)

            rec = Recorder()
            sub = await subscribe(client, temperature, rec, 100)
            t0 = time.monotonic()
            await eventually(
                f"good Temperature values from the active server {first.name}",
                lambda: _true(len(rec.good_since(t0, first.is_own_value)) >= 2),
                5.0,
            )

            # Maintenance (ServiceLevel 0) on the active server -> handover to the other one.
            await first.set_service_level(0)
            t_maint = time.monotonic()

            async def switched_to_other() -> bool:
                return (await active_server()) is other

            await eventually("ActiveEndpoint moves to the other server after ServiceLevel 0",
                             switched_to_other, 5.0)
            took = time.monotonic() - t_maint
            t_switch = time.monotonic()
            await eventually(
                f"good Temperature values from {other.name} after the handover",
                lambda: _true(len(rec.good_since(t_switch, other.is_own_value)) >= 2),
                5.0,
            )

            # Healthy again -> no switch back while the other one stays Healthy.
            await first.set_service_level(255)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                active = await active_server()
                assert active is other, (
                    f"gateway flapped back to {active.name if active else active!r} after ServiceLevel 255"
                )
                await asyncio.sleep(0.1)
            t_back = time.monotonic()
            await eventually(
                f"values still from {other.name}",
                lambda: _true(len(rec.good_since(t_back, other.is_own_value)) >= 2),
                3.0,
            )

            # Hot: only the active server reports. Once the handover settled, nothing came
            # from the server in Maintenance / the passive one, and nothing was bad.
            leaked = [(t - t_switch, v) for t, v, s in rec.changes
                      if t_switch + 0.5 <= t and first.is_own_value(v)]
            assert not leaked, f"values from the passive server {first.name} after the handover: {leaked[:5]}"
            # (The very first notification may be BadWaitingForInitialData, before t_maint.)
            bad = [(t - t_maint, v, s) for t, v, s in rec.changes if t >= t_maint and not s.is_good()]
            assert not bad, f"non-good notifications during the ServiceLevel handover: {bad[:5]}"

            # Stop the active server -> failover to the first one, good values within 2 s.
            await other.stop()
            t_stop = time.monotonic()
            await eventually(
                f"good Temperature values from {first.name} after {other.name} stopped",
                lambda: _true(len(rec.good_since(t_stop, first.is_own_value)) >= 1),
                2.0,
                period=0.05,
            )
            failover_s = time.monotonic() - t_stop

            async def active_is_first() -> bool:
                return (await active_server()) is first

            await eventually("ActiveEndpoint back on the first server after the stop", active_is_first, 5.0)
            assert await read(client, status("pair", "State")) == "Connected"
            await bounded(sub.delete())
        print(f"handover after ServiceLevel 0: {took:.2f}s; failover after stop: {failover_s:.2f}s")
