"""Subscriptions, monitored items, Write and Call as seen by the asyncua client.

Each test starts its own server (see conftest.py); every network wait is bounded. Tests
marked `uagate_only` check behaviour the self-check server (asyncua) does not have.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from asyncua import Client, ua
from asyncua.common.subscription import Subscription
from conftest import ClientCert, ServerTarget
from test_asyncua_client import REQUEST_TIMEOUT_S, bounded, secure_client
from uaservices import (
    CURRENT_TIME,
    DEMO,
    DEMO_ADD,
    DEMO_LEVEL,
    DEMO_SETPOINT,
    GET_MONITORED_ITEMS,
    NAMESPACE_ARRAY,
    REDUNDANCY_SUPPORT,
    SERVER,
    Publisher,
    call,
    code_name,
    create_items,
    create_subscription,
    data_changes,
    is_keepalive,
    item_request,
    publish,
)

RATE_WINDOW_S = 3.0
# Writes need a user with the operator role (uagate refuses anonymous writes: BadUserAccessDenied).
OPERATOR = ("opal", "opal-pass-2")


@asynccontextmanager
async def connected(client: Client) -> AsyncIterator[Client]:
    await bounded(client.connect())
    try:
        yield client
    finally:
        await bounded(client.disconnect())


def anonymous(server: ServerTarget) -> Client:
    return Client(server.url, timeout=REQUEST_TIMEOUT_S)


@pytest.fixture
def writer(target: ServerTarget, client_cert: ClientCert) -> ServerTarget:
    """A started server with the OPERATOR user and this test's client certificate trusted."""
    target.user_add(OPERATOR[0], "operator", OPERATOR[1])
    target.trust_client(client_cert.cert_der)
    target.start()
    return target


async def operator_client(server: ServerTarget, cert: ClientCert) -> Client:
    """OPERATOR over Basic256Sha256 SignAndEncrypt (not yet connected)."""
    return await secure_client(server.url, cert, user=OPERATOR)


async def write_double(client: Client, node: ua.NodeId, value: float) -> None:
    await bounded(client.get_node(node).write_value(ua.DataValue(ua.Variant(value, ua.VariantType.Double))))


class TimedHandler:
    """asyncua subscription handler that records when each data change arrived."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.values: list[Any] = []
        self.status_changes: list[ua.StatusChangeNotification] = []

    def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
        self.arrivals.append(time.monotonic())
        self.values.append(val)

    def status_change_notification(self, status: ua.StatusChangeNotification) -> None:
        self.status_changes.append(status)


async def test_current_time_notifications_follow_publishing_interval(server: ServerTarget) -> None:
    async with connected(anonymous(server)) as client:
        handler = TimedHandler()
        params = ua.CreateSubscriptionParameters(
            RequestedPublishingInterval=200,
            RequestedLifetimeCount=300,
            RequestedMaxKeepAliveCount=10,
            MaxNotificationsPerPublish=0,
            PublishingEnabled=True,
            Priority=0,
        )
        sub = Subscription(client.uaclient.session, params, handler)
        revised = await bounded(sub.init())
        interval_s = revised.RevisedPublishingInterval / 1000.0
        assert 0 < revised.RevisedPublishingInterval <= 1000, f"revised publishing interval {revised}"
        # Queue size 1: at most one notification per Publish response for this item.
        await bounded(sub.subscribe_data_change(client.get_node(CURRENT_TIME), queuesize=1, sampling_interval=100))

        # Count over a fixed window that starts with the first notification.
        deadline = time.monotonic() + 10.0
        while not handler.arrivals and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert handler.arrivals, "no data change for ServerStatus.CurrentTime within 10 s"
        start = handler.arrivals[0]
        await asyncio.sleep(RATE_WINDOW_S + 0.1)
        in_window = [t for t in handler.arrivals if t - start < RATE_WINDOW_S]
        await bounded(sub.delete())

    expected = RATE_WINDOW_S / interval_s
    assert 0.5 * expected <= len(in_window) <= 1.5 * expected + 2, (
        f"{len(in_window)} notifications in {RATE_WINDOW_S}s at a revised interval of "
        f"{revised.RevisedPublishingInterval} ms (expected about {expected:.0f})"
    )
    gaps = [b - a for a, b in zip(in_window, in_window[1:])]
    assert 0.5 * interval_s <= statistics.median(gaps) <= 2.0 * interval_s, f"median gap {statistics.median(gaps)}"
    assert handler.values and all(v is not None for v in handler.values)
    assert not handler.status_changes, handler.status_changes


async def test_keepalive_on_unchanging_node(server: ServerTarget) -> None:
    async with connected(anonymous(server)) as client:
        sub = await create_subscription(client, interval_ms=100, keepalive_count=3, lifetime_count=30)
        await create_items(client, sub, [item_request(NAMESPACE_ARRAY, client_handle=7, sampling_ms=100)])
        keepalive_s = sub.interval_ms * sub.keepalive_count / 1000.0
        bound = 3 * keepalive_s + 1.0

        publisher = Publisher(client)
        first = await publisher.next(timeout=bound)
        assert first.SubscriptionId == sub.id
        initial = data_changes(first)
        assert [n.ClientHandle for n in initial] == [7], f"first Publish: {first}"
        assert isinstance(initial[0].Value.Value.Value, list) and initial[0].Value.Value.Value[0] == "http://opcfoundation.org/UA/"

        arrivals = []
        keepalives = []
        for _ in range(4):
            result = await publisher.next(timeout=bound)
            arrivals.append(time.monotonic())
            assert result.SubscriptionId == sub.id
            assert is_keepalive(result), f"NamespaceArray did not change, yet got {result.NotificationMessage}"
            keepalives.append(result)
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
        # Each keep-alive waits out about interval * keep-alive count: not immediately, not much later.
        for gap in gaps:
            assert 0.5 * keepalive_s <= gap <= bound, f"keep-alive gaps {gaps}, expected about {keepalive_s}s"
        # A keep-alive carries the sequence number of the next NotificationMessage without using it up.
        next_seq = first.NotificationMessage.SequenceNumber + 1
        assert {k.NotificationMessage.SequenceNumber for k in keepalives} == {next_seq}


@pytest.mark.parametrize(
    ("deadband_type", "deadband_value", "big_step"),
    [(ua.DeadbandType.Absolute, 5.0, 10.0), (ua.DeadbandType.Percent, 10.0, 15.0)],
    ids=["absolute-5", "percent-10"],
)
async def test_deadband_filters_small_changes(
    writer: ServerTarget, client_cert: ClientCert, deadband_type: ua.DeadbandType, deadband_value: float, big_step: float
) -> None:
    async with connected(await operator_client(writer, client_cert)) as client:
        level = client.get_node(DEMO_LEVEL)
        eu_range = await bounded((await bounded(level.get_child("0:EURange"))).read_value())
        assert (eu_range.Low, eu_range.High) == (0.0, 100.0), eu_range
        await write_double(client, DEMO_LEVEL, 50.0)

        sub = await create_subscription(client, interval_ms=100, keepalive_count=5)
        data_filter = ua.DataChangeFilter(
            Trigger=ua.DataChangeTrigger.StatusValue, DeadbandType=deadband_type, DeadbandValue=deadband_value
        )
        await create_items(client, sub, [item_request(DEMO_LEVEL, client_handle=1, sampling_ms=50, data_filter=data_filter)])
        publisher = Publisher(client)
        assert await publisher.wait_value(1, lambda v: True, seconds=5.0) == [50.0]

        # +1 three times: at most 3 units from the last reported value, inside the deadband.
        for value in (51.0, 52.0, 53.0):
            await write_double(client, DEMO_LEVEL, value)
            await asyncio.sleep(0.2)
        assert await publisher.values_for(1.5, handle=1) == [], "changes inside the deadband were reported"

        target = 53.0 + big_step
        await write_double(client, DEMO_LEVEL, target)
        seen = await publisher.wait_value(1, lambda v: v == target, seconds=5.0)
        assert seen == [target], f"expected exactly the change past the deadband, saw {seen}"


async def test_write_setpoint_and_read_back(writer: ServerTarget, client_cert: ClientCert) -> None:
    async with connected(await operator_client(writer, client_cert)) as client:
        node = client.get_node(DEMO_SETPOINT)
        before = await bounded(node.read_data_value())
        variant_type = before.Value.VariantType
        value = 42.5 if variant_type in (ua.VariantType.Double, ua.VariantType.Float) else 42
        await bounded(node.write_value(ua.DataValue(ua.Variant(value, variant_type))))
        after = await bounded(node.read_data_value())
        assert after.StatusCode.is_good(), after
        assert after.Value.VariantType == variant_type
        assert after.Value.Value == value


async def test_call_add_method(server: ServerTarget) -> None:
    async with connected(anonymous(server)) as client:
        d = ua.VariantType.Double
        ok = await call(client, DEMO, DEMO_ADD, ua.Variant(2.0, d), ua.Variant(3.0, d))
        assert ok.StatusCode.is_good(), code_name(ok.StatusCode)
        assert [v.Value for v in ok.OutputArguments] == [5.0]
        assert ok.OutputArguments[0].VariantType == d

        missing = await call(client, DEMO, DEMO_ADD, ua.Variant(2.0, d))
        assert code_name(missing.StatusCode) == "BadArgumentsMissing"

        wrong = await call(client, DEMO, DEMO_ADD, ua.Variant(2.0, d), ua.Variant("three", ua.VariantType.String))
        assert code_name(wrong.StatusCode) in {"BadInvalidArgument", "BadTypeMismatch"}, code_name(wrong.StatusCode)
        if wrong.InputArgumentResults:
            assert [code_name(sc) for sc in wrong.InputArgumentResults] == ["Good", "BadTypeMismatch"]

        # High-level asyncua call on the same method (raises on a Bad result).
        assert await bounded(client.get_node(DEMO).call_method(DEMO_ADD, 2.0, 3.0)) == 5.0


async def test_republish_returns_unacknowledged_message(writer: ServerTarget, client_cert: ClientCert) -> None:
    async with connected(await operator_client(writer, client_cert)) as client:
        await write_double(client, DEMO_LEVEL, 20.0)
        sub = await create_subscription(client, interval_ms=100, keepalive_count=10)
        await create_items(client, sub, [item_request(DEMO_LEVEL, client_handle=3, sampling_ms=50)])

        # A Publish whose response the client "lost": never acknowledged.
        lost = await publish(client)
        assert not is_keepalive(lost), lost
        seq = lost.NotificationMessage.SequenceNumber
        assert seq in lost.AvailableSequenceNumbers, (seq, lost.AvailableSequenceNumbers)

        again = await bounded(client.uaclient.session.republish(sub.id, seq))
        assert again.SequenceNumber == seq
        assert again.PublishTime == lost.NotificationMessage.PublishTime
        got = [(n.ClientHandle, n.Value.Value.Value) for n in data_changes(ua.PublishResult(NotificationMessage=again))]
        assert got == [(3, 20.0)]


@pytest.mark.uagate_only
async def test_republish_unknown_sequence_number(writer: ServerTarget, client_cert: ClientCert) -> None:
    async with connected(await operator_client(writer, client_cert)) as client:
        await write_double(client, DEMO_LEVEL, 20.0)
        sub = await create_subscription(client, interval_ms=100, keepalive_count=10)
        await create_items(client, sub, [item_request(DEMO_LEVEL, client_handle=3, sampling_ms=50)])
        first = await publish(client)
        seq = first.NotificationMessage.SequenceNumber
        with pytest.raises(ua.UaStatusCodeError) as err:
            await bounded(client.uaclient.session.republish(sub.id, seq + 1000))
        assert code_name(err.value.code) == "BadMessageNotAvailable"
        # Acknowledged messages are gone too.
        await publish(client, [(sub.id, seq)], timeout=5.0)
        with pytest.raises(ua.UaStatusCodeError) as acked:
            await bounded(client.uaclient.session.republish(sub.id, seq))
        assert code_name(acked.value.code) == "BadMessageNotAvailable"


async def test_transfer_subscription_to_second_session(server: ServerTarget, client_cert: ClientCert) -> None:
    server.user_add("tessa", "operator", "tessa-pass-5")
    server.trust_client(client_cert.cert_der)
    user = ("tessa", "tessa-pass-5")
    async with connected(await secure_client(server.url, client_cert, user=user)) as first:
        sub = await create_subscription(first, interval_ms=100, keepalive_count=10)
        await create_items(first, sub, [item_request(CURRENT_TIME, client_handle=11, sampling_ms=100)])
        initial = await publish(first)
        assert [n.ClientHandle for n in data_changes(initial)] == [11]

        async with connected(await secure_client(server.url, client_cert, user=user)) as second:
            params = ua.TransferSubscriptionsParameters(SubscriptionIds=[sub.id], SendInitialValues=True)
            (result,) = await bounded(second.uaclient.session.transfer_subscriptions(params))
            assert result.StatusCode.is_good(), code_name(result.StatusCode)

            # The data keeps flowing, now on the second session.
            publisher = Publisher(second)
            times = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10.0
            while len(times) < 3 and loop.time() < deadline:
                res = await publisher.next()
                if res.SubscriptionId != sub.id:
                    continue
                times.extend(n.Value.Value.Value for n in data_changes(res) if n.ClientHandle == 11)
            assert len(times) >= 3, f"only {len(times)} CurrentTime notifications on the new session"
            assert times == sorted(times)


async def test_get_monitored_items_returns_handles(server: ServerTarget) -> None:
    async with connected(anonymous(server)) as client:
        sub = await create_subscription(client, interval_ms=500, keepalive_count=10)
        created = await create_items(
            client,
            sub,
            [
                item_request(CURRENT_TIME, client_handle=101, sampling_ms=500),
                item_request(NAMESPACE_ARRAY, client_handle=102, sampling_ms=500),
            ],
        )
        res = await call(client, SERVER, GET_MONITORED_ITEMS, ua.Variant(sub.id, ua.VariantType.UInt32))
        assert res.StatusCode.is_good(), code_name(res.StatusCode)
        server_handles, client_handles = (v.Value for v in res.OutputArguments)
        assert sorted(zip(server_handles, client_handles)) == sorted(
            zip([c.MonitoredItemId for c in created], [101, 102])
        )
        # The high-level asyncua call returns the same two arrays.
        out = await bounded(client.get_node(SERVER).call_method(GET_MONITORED_ITEMS, ua.Variant(sub.id, ua.VariantType.UInt32)))
        assert sorted(out[1]) == [101, 102]


async def test_get_monitored_items_unknown_subscription(server: ServerTarget) -> None:
    async with connected(anonymous(server)) as client:
        res = await call(client, SERVER, GET_MONITORED_ITEMS, ua.Variant(424242, ua.VariantType.UInt32))
        assert code_name(res.StatusCode) == "BadSubscriptionIdInvalid"


@pytest.mark.uagate_only
async def test_redundancy_support_is_none_by_default(server: ServerTarget) -> None:
    async with connected(anonymous(server)) as client:
        value = await bounded(client.get_node(REDUNDANCY_SUPPORT).read_value())
        assert value == ua.RedundancySupport.None_
