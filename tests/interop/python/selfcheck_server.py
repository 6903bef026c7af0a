"""Self-check target for the interop harness: the asyncua package's own example server.

Used only when UAGATE_INTEROP_TARGET=asyncua-server, to prove that the interop tests
(Python and Node) work against an independent, known-good OPC UA server while uagate
itself is not ready. It speaks the same start-up contract as `uagate run`:

    python selfcheck_server.py --dir DIR

generates a server certificate in DIR (so the secure endpoints are offered), picks a
free ephemeral port on 127.0.0.1, runs the asyncua example server in-process (the same
set-up as `asyncua.tools.uaserver`, plus the demo nodes below), and once the port accepts
connections prints exactly one line `READY opc.tcp=opc.tcp://127.0.0.1:<port>/` on stdout.
SIGTERM stops it.

To check the service-level tests it also exposes the NodeIds uagate's gateway namespace
(`urn:uagate:gateway`, namespace index 2) offers, with equivalent behaviour:

- ns=2;s=Gateway.Demo                 object
- ns=2;s=Gateway.Demo.Level           Double, writable, EURange 0..100
- ns=2;s=Gateway.Demo.Setpoint        Double, writable
- ns=2;s=Gateway.Demo.Add             method (Double, Double) -> Double, checking its arguments

and fills in what the example server lacks: Server.GetMonitoredItems (i=11492), a
100 ms ServerStatus.CurrentTime clock (the example server's own clock ticks once a second), and percent deadbands (asyncua only logs "not
implemented" for them). These additions exist only so the tests can be checked against
an independent server; they are not a reference implementation.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from pathlib import Path

from datetime import datetime, timezone
from typing import Any

from asyncua import Server, ua
from asyncua.crypto.cert_gen import setup_self_signed_certificate
from asyncua.server.monitored_item_service import MonitoredItemService
from asyncua.server.subscription_service import SubscriptionService
from cryptography.x509.oid import ExtendedKeyUsageOID

# asyncua's example server always announces this application URI.
SERVER_APP_URI = "urn:freeopcua:python:server"
READY_TIMEOUT_S = 60.0
GATEWAY_NS_URI = "urn:uagate:gateway"
CLOCK_PERIOD_S = 0.1
EU_RANGE = ua.Range(Low=0.0, High=100.0)


def free_port() -> int:
    """Ask the kernel for a free ephemeral port on loopback (bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_listening(port: int, server_task: asyncio.Task[None]) -> None:
    """Poll until 127.0.0.1:port accepts a TCP connection (bounded by READY_TIMEOUT_S)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    while loop.time() < deadline:
        if server_task.done():
            raise RuntimeError("example server exited before listening")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2.0)
        except (OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise TimeoutError(f"example server not listening on port {port} after {READY_TIMEOUT_S}s")


def percent_deadband_exceeded(self: MonitoredItemService, values: Any, flt: ua.DataChangeFilter) -> bool:
    """asyncua's deadband check, extended with Percent (Part 8: percent of the EURange span)."""
    if flt.DeadbandType != ua.DeadbandType.Percent:
        return ORIGINAL_DEADBAND_CHECK(self, values, flt)
    cur, old = values.get_current_datavalue(), values.get_old_datavalue()
    if old is None or cur is None or cur.Value is None or old.Value is None:
        return True
    span = EU_RANGE.High - EU_RANGE.Low
    return bool(abs(cur.Value.Value - old.Value.Value) > flt.DeadbandValue / 100.0 * span)


ORIGINAL_DEADBAND_CHECK = MonitoredItemService._is_deadband_exceeded
MonitoredItemService._is_deadband_exceeded = percent_deadband_exceeded  # type: ignore[method-assign]


async def transfer_to_new_connection(
    self: SubscriptionService, params: ua.TransferSubscriptionsParameters, session_id: ua.NodeId, callback: Any
) -> list[ua.TransferResult]:
    """asyncua's TransferSubscriptions, also taking Publish requests from the new connection."""
    results = await ORIGINAL_TRANSFER(self, params, session_id, callback)
    for sub_id, result in zip(params.SubscriptionIds, results):
        sub = self.subscriptions.get(int(sub_id))
        if sub is not None and result.StatusCode.is_good():
            sub.pub_request_callback = callback.__self__.get_publish_request
    return results


ORIGINAL_TRANSFER = SubscriptionService.transfer_subscriptions
SubscriptionService.transfer_subscriptions = transfer_to_new_connection  # type: ignore[method-assign]


def add_result(inputs: list[ua.Variant]) -> ua.CallMethodResult:
    """Gateway.Demo.Add: checks count and types of its inputs like a conforming server."""
    result = ua.CallMethodResult()
    if len(inputs) < 2:
        result.StatusCode = ua.StatusCode(ua.StatusCodes.BadArgumentsMissing)
        return result
    if len(inputs) > 2:
        result.StatusCode = ua.StatusCode(ua.StatusCodes.BadTooManyArguments)
        return result
    per_arg = [
        ua.StatusCode(ua.StatusCodes.Good if v.VariantType == ua.VariantType.Double else ua.StatusCodes.BadTypeMismatch)
        for v in inputs
    ]
    if not all(sc.is_good() for sc in per_arg):
        result.StatusCode = ua.StatusCode(ua.StatusCodes.BadInvalidArgument)
        result.InputArgumentResults = per_arg
        return result
    result.InputArgumentResults = per_arg
    result.OutputArguments = [ua.Variant(inputs[0].Value + inputs[1].Value, ua.VariantType.Double)]
    return result


async def add_demo_nodes(server: Server) -> None:
    """The Gateway.Demo object with the NodeIds uagate's gateway namespace uses."""
    idx = await server.register_namespace(GATEWAY_NS_URI)
    assert idx == 2, f"{GATEWAY_NS_URI} got namespace index {idx}, expected 2"
    demo = await server.nodes.objects.add_object(ua.NodeId("Gateway.Demo", idx), ua.QualifiedName("Demo", idx))
    level = await demo.add_variable(
        ua.NodeId("Gateway.Demo.Level", idx), ua.QualifiedName("Level", idx), 50.0, ua.VariantType.Double
    )
    await level.set_writable()
    await level.add_property(idx, "EURange", EU_RANGE)
    # Part 8 names the property 0:EURange; asyncua's add_property takes the browse name's namespace.
    eu = await level.get_child(f"{idx}:EURange")
    await eu.write_attribute(ua.AttributeIds.BrowseName, ua.DataValue(ua.Variant(ua.QualifiedName("EURange", 0))))
    setpoint = await demo.add_variable(
        ua.NodeId("Gateway.Demo.Setpoint", idx), ua.QualifiedName("Setpoint", idx), 0.0, ua.VariantType.Double
    )
    await setpoint.set_writable()

    async def add(parent: ua.NodeId, *inputs: ua.Variant) -> ua.CallMethodResult:
        return add_result(list(inputs))

    await demo.add_method(
        ua.NodeId("Gateway.Demo.Add", idx),
        ua.QualifiedName("Add", idx),
        add,
        [ua.VariantType.Double, ua.VariantType.Double],
        [ua.VariantType.Double],
    )


def link_get_monitored_items(server: Server) -> None:
    """Server.GetMonitoredItems (i=11492): (SubscriptionId) -> (ServerHandles[], ClientHandles[])."""
    service = server.iserver.subscription_service

    async def get_monitored_items(parent: ua.NodeId, *inputs: ua.Variant) -> ua.CallMethodResult:
        result = ua.CallMethodResult()
        if len(inputs) != 1 or inputs[0].VariantType != ua.VariantType.UInt32:
            result.StatusCode = ua.StatusCode(ua.StatusCodes.BadInvalidArgument)
            return result
        sub = service.subscriptions.get(inputs[0].Value)
        if sub is None:
            result.StatusCode = ua.StatusCode(ua.StatusCodes.BadSubscriptionIdInvalid)
            return result
        items = sub.monitored_item_srv._monitored_items
        result.OutputArguments = [
            ua.Variant(list(items), ua.VariantType.UInt32),
            ua.Variant([items[mid].client_handle for mid in items], ua.VariantType.UInt32),
        ]
        result.InputArgumentResults = [ua.StatusCode()]
        return result

    server.link_method(server.get_node(ua.NodeId(ua.ObjectIds.Server_GetMonitoredItems)), get_monitored_items)


async def run_server(url: str, cert: Path, key: Path) -> None:
    """The asyncua example server (as `uaserver` sets it up) plus the additions described above."""
    logging.basicConfig(format="%(levelname)s: %(message)s", level=logging.ERROR)
    server = Server()
    await server.init()
    server.set_endpoint(url)
    await server.load_certificate(str(cert))
    await server.load_private_key(str(key))
    server.set_server_name("FreeOpcUa Example Server")
    await add_demo_nodes(server)
    link_get_monitored_items(server)
    current_time = server.get_node(ua.NodeId(ua.ObjectIds.Server_ServerStatus_CurrentTime))
    async with server:
        while True:
            await current_time.write_value(datetime.now(timezone.utc), ua.VariantType.DateTime)
            await asyncio.sleep(CLOCK_PERIOD_S)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True, type=Path, help="directory for the server certificate")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    cert = args.dir / "server-cert.der"
    key = args.dir / "server-key.pem"
    await setup_self_signed_certificate(
        key,
        cert,
        SERVER_APP_URI,
        "localhost",
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        {"commonName": "asyncua example server (uagate self-check)"},
    )
    port = free_port()
    url = f"opc.tcp://127.0.0.1:{port}/"
    server_task = asyncio.ensure_future(run_server(url, cert, key))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, server_task.cancel)
    await wait_listening(port, server_task)
    print(f"READY opc.tcp={url}", flush=True)
    try:
        await server_task
    except (asyncio.CancelledError, SystemExit):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
