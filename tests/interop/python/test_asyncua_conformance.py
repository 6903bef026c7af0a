"""Details a strict OPC UA client relies on, checked with asyncua.

Found by driving the gateway as an integrator would (2026-12-07): each test failed before its
fix. Each test starts its own server (see conftest.py); every network wait is bounded.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from asyncua import Client, ua
from asyncua.ua.ua_binary import struct_from_binary
from conftest import ClientCert, ServerTarget
from cryptography import x509
from test_asyncua_client import REQUEST_TIMEOUT_S, bounded, secure_client
from uaservices import (
    CURRENT_TIME,
    DEMO_SETPOINT,
    GET_MONITORED_ITEMS,
    SERVER,
    Publisher,
    call,
    code_name,
    create_items,
    create_subscription,
    data_changes,
    is_keepalive,
    item_request,
)

RESEND_DATA = ua.NodeId(ua.ObjectIds.Server_ResendData)
MIN_SUPPORTED_SAMPLE_RATE = ua.NodeId(ua.ObjectIds.Server_ServerCapabilities_MinSupportedSampleRate)

pytestmark = pytest.mark.uagate_only


async def raw_read(client: Client, index_range: str | None = None, timestamps: int = 2) -> ua.ReadResponse:
    """Sends a Read of CurrentTime as given, without asyncua's own checks of the values."""
    request = ua.ReadRequest()
    request.Parameters.TimestampsToReturn = timestamps
    node = ua.ReadValueId()
    node.NodeId = CURRENT_TIME
    node.AttributeId = ua.AttributeIds.Value
    if index_range is not None:
        node.IndexRange = index_range
    request.Parameters.NodesToRead = [node]
    data = await asyncio.wait_for(
        client.uaclient._send_request(request, REQUEST_TIMEOUT_S), REQUEST_TIMEOUT_S + 2
    )
    return struct_from_binary(ua.ReadResponse, data)


async def test_a_request_with_a_wrong_value_is_refused_and_the_connection_stays(server: ServerTarget) -> None:
    """An IndexRange that is not a range, or a TimestampsToReturn out of its enumeration, is this
    one request's mistake: it gets a ServiceFault (BadDecodingError) and the same connection and
    session go on (before: the channel was closed and the session left behind)."""
    client = Client(server.url, timeout=REQUEST_TIMEOUT_S)
    await bounded(client.connect())
    try:
        for index_range, timestamps in (("2:1", 2), ("abc", 2), (None, 7)):
            with pytest.raises(ua.UaStatusCodeError) as refused:
                await raw_read(client, index_range, timestamps)
            assert code_name(refused.value.code) == "BadDecodingError", (index_range, timestamps)
            # The same session answers the next Read.
            good = await raw_read(client)
            assert good.Results[0].StatusCode.is_good()
    finally:
        await bounded(client.disconnect())


async def test_the_server_certificate_names_the_application_uri_as_a_uri(server: ServerTarget) -> None:
    """Part 6 6.2.2: the ApplicationUri is the certificate's URI subjectAltName (it was written
    as a DNS name, which strict clients refuse with BadCertificateUriInvalid)."""
    client = Client(server.url, timeout=REQUEST_TIMEOUT_S)
    endpoints = await bounded(client.connect_and_get_server_endpoints())
    secured = [e for e in endpoints if e.ServerCertificate]
    assert secured, "no endpoint carries the server certificate"
    for endpoint in secured:
        cert = x509.load_der_x509_certificate(endpoint.ServerCertificate)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.UniformResourceIdentifier) == [endpoint.Server.ApplicationUri]
        assert endpoint.Server.ApplicationUri not in san.get_values_for_type(x509.DNSName)


async def test_a_subscription_outlives_a_session_closed_without_deleting_it(
    target: ServerTarget, client_cert: ClientCert
) -> None:
    """Part 4 5.6.4: CloseSession with deleteSubscriptions false keeps the subscriptions until
    their lifetime ends, so a new session of the same user takes them over with
    TransferSubscriptions and the data goes on (before: BadSubscriptionIdInvalid)."""
    target.user_add("tessa", "operator", "tessa-pass-5")
    target.trust_client(client_cert.cert_der)
    target.start()
    server = target
    user = ("tessa", "tessa-pass-5")
    first = await secure_client(server.url, client_cert, user=user)
    await bounded(first.connect())
    sub = await create_subscription(first, interval_ms=100, keepalive_count=10)
    await create_items(first, sub, [item_request(CURRENT_TIME, client_handle=21, sampling_ms=100)])
    await bounded(first.uaclient.close_session(False))
    try:
        await asyncio.wait_for(first.disconnect(), 3)
    except Exception:  # the session is already closed; only the channel is left to drop
        pass
    second = await secure_client(server.url, client_cert, user=user)
    await bounded(second.connect())
    try:
        params = ua.TransferSubscriptionsParameters(SubscriptionIds=[sub.id], SendInitialValues=True)
        (result,) = await bounded(second.uaclient.session.transfer_subscriptions(params))
        assert result.StatusCode.is_good(), code_name(result.StatusCode)
        publisher = Publisher(second)
        values = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10.0
        while len(values) < 2 and loop.time() < deadline:
            res = await publisher.next()
            if res.SubscriptionId == sub.id:
                values.extend(n.Value.Value.Value for n in data_changes(res) if n.ClientHandle == 21)
        assert len(values) >= 2, f"only {len(values)} notifications after the transfer"
    finally:
        await bounded(second.disconnect())


async def test_server_diagnostics_count_sessions_subscriptions_and_rejections(target: ServerTarget) -> None:
    """Part 5 6.3.3: ServerDiagnosticsSummary (EnabledFlag true) counts what happened; before,
    every counter but CurrentSessionCount stayed 0."""
    target.user_add("tessa", "operator", "tessa-pass-5")
    target.start()
    refused = Client(target.url, timeout=REQUEST_TIMEOUT_S)
    refused.set_user("tessa")
    refused.set_password("not-the-password")
    with pytest.raises(Exception):
        await bounded(refused.connect())
    try:
        await asyncio.wait_for(refused.disconnect(), 3)
    except Exception:  # the failed connect may have left nothing to close
        pass
    client = Client(target.url, timeout=REQUEST_TIMEOUT_S)
    await bounded(client.connect())
    try:
        await create_subscription(client, interval_ms=250, keepalive_count=10)
        summary = "i=2275"
        names = {
            "CurrentSessionCount": 2277,
            "CumulatedSessionCount": 2278,
            "SecurityRejectedSessionCount": 2279,
            "RejectedSessionCount": 3705,
            "CurrentSubscriptionCount": 2285,
            "CumulatedSubscriptionCount": 2286,
            "PublishingIntervalCount": 2284,
            "RejectedRequestsCount": 2288,
        }
        assert await bounded(client.get_node(ua.NodeId(2294)).read_value()) is True  # EnabledFlag
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while True:
            # One Read of all of them: the summary is refreshed once a second, and reads one
            # by one could each meet another refresh (seen: CumulatedSessionCount 0 from before
            # the first session beside CurrentSubscriptionCount 1 from after).
            read = await bounded(client.read_values([client.get_node(ua.NodeId(v)) for v in names.values()]))
            values = dict(zip(names.keys(), read))
            if values["CurrentSubscriptionCount"] == 1 or loop.time() > deadline:
                break
            await asyncio.sleep(0.25)
        # All of them, and how long the wait was, in words pytest does not shorten.
        seen = f"{json.dumps(values)} after {loop.time() - deadline + 5.0:.2f} s"
        assert values["CurrentSessionCount"] == 1, seen
        assert values["CumulatedSessionCount"] >= 2, seen
        assert values["RejectedSessionCount"] >= 1, seen
        assert values["SecurityRejectedSessionCount"] >= 1, seen
        assert values["RejectedRequestsCount"] >= values["RejectedSessionCount"], seen
        assert values["CurrentSubscriptionCount"] == 1, seen
        assert values["CumulatedSubscriptionCount"] == 1, seen
        assert values["PublishingIntervalCount"] == 1, seen
        whole = await bounded(client.get_node(summary).read_value())
        assert whole.CumulatedSubscriptionCount == 1, whole
    finally:
        await bounded(client.disconnect())


async def test_resend_data_and_another_sessions_subscription(server: ServerTarget) -> None:
    """Part 5 9.1 and 9.2: ResendData sends the last values of the caller's subscription again
    (it answered BadNotImplemented); GetMonitoredItems and ResendData on another session's
    subscription are BadUserAccessDenied (GetMonitoredItems said BadSubscriptionIdInvalid)."""
    owner = Client(server.url, timeout=REQUEST_TIMEOUT_S)
    other = Client(server.url, timeout=REQUEST_TIMEOUT_S)
    await bounded(owner.connect())
    await bounded(other.connect())
    try:
        sub = await create_subscription(owner, interval_ms=100, keepalive_count=3)
        await create_items(owner, sub, [item_request(DEMO_SETPOINT, client_handle=7, sampling_ms=100)])
        publisher = Publisher(owner)
        first = await publisher.wait_value(7, lambda _: True, 5.0)
        assert len(first) == 1, first
        # Nothing changes: keep-alives only, until ResendData.
        quiet = await publisher.next()
        assert is_keepalive(quiet) or not data_changes(quiet), quiet
        resent = await call(owner, SERVER, RESEND_DATA, ua.Variant(sub.id, ua.VariantType.UInt32))
        assert code_name(resent.StatusCode) == "Good"
        again = await publisher.wait_value(7, lambda _: True, 5.0)
        assert again == first, (first, again)
        for method in (GET_MONITORED_ITEMS, RESEND_DATA):
            refused = await call(other, SERVER, method, ua.Variant(sub.id, ua.VariantType.UInt32))
            assert code_name(refused.StatusCode) == "BadUserAccessDenied", method
            unknown = await call(other, SERVER, method, ua.Variant(sub.id + 1000, ua.VariantType.UInt32))
            assert code_name(unknown.StatusCode) == "BadSubscriptionIdInvalid", method
    finally:
        await bounded(other.disconnect())
        await bounded(owner.disconnect())


async def test_history_read_refusals_and_the_advertised_sample_rate(server: ServerTarget) -> None:
    """HistoryRead with TimestampsToReturn Neither is BadTimestampsToReturnInvalid (Part 4
    5.10.3.2; it answered Good), an unknown node BadNodeIdUnknown (it said
    BadHistoryOperationUnsupported); MinSupportedSampleRate is what CreateMonitoredItems grants
    (it advertised 100 ms and granted 50)."""
    client = Client(server.url, timeout=REQUEST_TIMEOUT_S)
    await bounded(client.connect())
    try:
        def history_request(node: ua.NodeId, timestamps: int) -> ua.HistoryReadRequest:
            request = ua.HistoryReadRequest()
            details = ua.ReadRawModifiedDetails()
            details.StartTime = ua.get_win_epoch()
            details.EndTime = ua.get_win_epoch()
            details.NumValuesPerNode = 10
            request.Parameters.HistoryReadDetails = details
            request.Parameters.TimestampsToReturn = timestamps
            request.Parameters.NodesToRead = [ua.HistoryReadValueId(NodeId=node)]
            return request

        async def send(request: ua.HistoryReadRequest) -> ua.HistoryReadResponse:
            data = await asyncio.wait_for(
                client.uaclient._send_request(request, REQUEST_TIMEOUT_S), REQUEST_TIMEOUT_S + 2
            )
            return struct_from_binary(ua.HistoryReadResponse, data)

        with pytest.raises(ua.UaStatusCodeError) as refused:
            await send(history_request(DEMO_SETPOINT, ua.TimestampsToReturn.Neither))
        assert code_name(refused.value.code) == "BadTimestampsToReturnInvalid"
        unknown = await send(history_request(ua.NodeId("Nope", 2), ua.TimestampsToReturn.Both))
        assert code_name(unknown.Results[0].StatusCode) == "BadNodeIdUnknown"
        no_history = await send(history_request(DEMO_SETPOINT, ua.TimestampsToReturn.Both))
        assert code_name(no_history.Results[0].StatusCode) == "BadHistoryOperationUnsupported"

        advertised = await bounded(client.get_node(MIN_SUPPORTED_SAMPLE_RATE).read_value())
        sub = await create_subscription(client, interval_ms=100)
        (created,) = await create_items(client, sub, [item_request(DEMO_SETPOINT, client_handle=1, sampling_ms=0)])
        assert created.RevisedSamplingInterval == advertised, (created.RevisedSamplingInterval, advertised)
    finally:
        await bounded(client.disconnect())


SESSION_DIAGNOSTICS = ua.NodeId(3707)  # SessionsDiagnosticsSummary.SessionDiagnosticsArray
SESSION_SECURITY_DIAGNOSTICS = ua.NodeId(3708)  # ...SessionSecurityDiagnosticsArray
SUBSCRIPTION_DIAGNOSTICS = ua.NodeId(2290)  # ServerDiagnostics.SubscriptionDiagnosticsArray


async def test_session_diagnostics_list_every_session_for_a_secure_administrator_only(
    target: ServerTarget, client_cert: ClientCert
) -> None:
    """Part 5 6.3.3-6.3.4: SessionDiagnosticsArray and SessionSecurityDiagnosticsArray hold one entry per
    session, with its client, its requests counted by service, its user and its security (before:
    null), SubscriptionDiagnosticsArray one per subscription; the security entries are checked
    with node-opcua (see below). They show other clients' sessions, so only an administrator on an encrypted channel
    may read or monitor them; anyone else gets BadUserAccessDenied, and UserAccessLevel says so."""
    target.user_add("ada", "admin", "ada-pass-55")
    target.trust_client(client_cert.cert_der)
    target.start()
    hmi = Client(target.url, timeout=REQUEST_TIMEOUT_S)
    hmi.description = "line 3 HMI"  # asyncua names the session "<description> Session1"
    await bounded(hmi.connect())
    admin = await secure_client(target.url, client_cert, user=("ada", "ada-pass-55"))
    await bounded(admin.connect())
    try:
        for _ in range(3):
            await bounded(hmi.get_node(CURRENT_TIME).read_value())
        for node in (SESSION_DIAGNOSTICS, SESSION_SECURITY_DIAGNOSTICS, SUBSCRIPTION_DIAGNOSTICS):
            refused = await bounded(hmi.get_node(node).read_data_value(raise_on_bad_status=False))
            assert code_name(refused.StatusCode) == "BadUserAccessDenied", node
            level = await bounded(hmi.get_node(node).read_attribute(ua.AttributeIds.UserAccessLevel))
            assert level.Value.Value & 0x01 == 0, (node, level.Value.Value)
            level = await bounded(admin.get_node(node).read_attribute(ua.AttributeIds.UserAccessLevel))
            assert level.Value.Value & 0x01 == 1, (node, level.Value.Value)
        sub = await create_subscription(hmi, interval_ms=250, keepalive_count=10)
        params = ua.CreateMonitoredItemsParameters(
            SubscriptionId=sub.id,
            TimestampsToReturn=ua.TimestampsToReturn.Both,
            ItemsToCreate=[item_request(SESSION_DIAGNOSTICS, client_handle=1, sampling_ms=1000)],
        )
        created = await bounded(hmi.uaclient.session.create_monitored_items(params))
        assert code_name(created[0].StatusCode) == "BadUserAccessDenied"

        # Refreshed once a second: wait until the HMI's three Reads are counted.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while True:
            sessions = await bounded(admin.get_node(SESSION_DIAGNOSTICS).read_value())
            mine = [s for s in sessions if s.SessionName.startswith("line 3 HMI")]
            if (mine and mine[0].ReadCount.TotalCount >= 4) or loop.time() > deadline:
                break
            await asyncio.sleep(0.25)
        assert len(sessions) == 2, [s.SessionName for s in sessions]
        assert mine, [s.SessionName for s in sessions]
        entry = mine[0]
        assert isinstance(entry, ua.SessionDiagnosticsDataType)
        # Three Reads of CurrentTime and two of the arrays (refused, not an error of the service).
        assert entry.ReadCount.TotalCount >= 5, entry.ReadCount
        assert entry.ReadCount.ErrorCount == 0, entry.ReadCount
        assert entry.CreateMonitoredItemsCount.TotalCount == 1, entry.CreateMonitoredItemsCount
        assert entry.CurrentSubscriptionsCount == 1
        assert entry.TotalRequestCount.TotalCount >= entry.ReadCount.TotalCount
        assert entry.ClientDescription.ApplicationName.Text, entry.ClientDescription
        assert entry.EndpointUrl, entry
        assert entry.ActualSessionTimeout > 0
        # One subscription, the HMI's, with its parameters.
        subscriptions = await bounded(admin.get_node(SUBSCRIPTION_DIAGNOSTICS).read_value())
        assert [(d.SessionId, d.SubscriptionId) for d in subscriptions] == [(entry.SessionId, sub.id)]
        assert subscriptions[0].PublishingInterval == 250.0
        assert subscriptions[0].MaxKeepAliveCount == 10
        assert subscriptions[0].PublishingEnabled is True
        assert subscriptions[0].MonitoredItemCount == 0
        # SessionSecurityDiagnosticsArray: asyncua 2.1 declares its Encoding field a Byte where
        # Part 5 12.11 (and the standard nodeset) says String, so it cannot decode the entries of
        # any server; tests/interop/node/session_diagnostics.test.mjs checks them with node-opcua.
    finally:
        await bounded(admin.disconnect())
        await bounded(hmi.disconnect())
