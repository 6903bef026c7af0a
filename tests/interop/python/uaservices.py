"""Low-level helpers for the subscription / call interop tests (asyncua 2.1 client).

asyncua's high-level Subscription runs its own Publish loop and acknowledges everything,
so the tests that need to see single Publish responses (keep-alives, Republish, Transfer)
drive the Subscription service set by hand: CreateSubscription is sent as a raw request
(UaSession.create_subscription would start asyncua's Publish loop), Publish goes through
UaSession.publish, which sends exactly one PublishRequest. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from asyncua import Client, ua
from asyncua.ua.ua_binary import struct_from_binary
from test_asyncua_client import REQUEST_TIMEOUT_S, bounded

# Gateway demo nodes (uagate's gateway namespace urn:uagate:gateway is namespace index 2).
DEMO = ua.NodeId("Gateway.Demo", 2)
DEMO_LEVEL = ua.NodeId("Gateway.Demo.Level", 2)
DEMO_SETPOINT = ua.NodeId("Gateway.Demo.Setpoint", 2)
DEMO_ADD = ua.NodeId("Gateway.Demo.Add", 2)

SERVER = ua.NodeId(ua.ObjectIds.Server)
CURRENT_TIME = ua.NodeId(ua.ObjectIds.Server_ServerStatus_CurrentTime)
NAMESPACE_ARRAY = ua.NodeId(ua.ObjectIds.Server_NamespaceArray)
SERVER_STATE = ua.NodeId(ua.ObjectIds.Server_ServerStatus_State)
SERVICE_LEVEL = ua.NodeId(ua.ObjectIds.Server_ServiceLevel)
GET_MONITORED_ITEMS = ua.NodeId(ua.ObjectIds.Server_GetMonitoredItems)
REQUEST_SERVER_STATE_CHANGE = ua.NodeId(ua.ObjectIds.Server_RequestServerStateChange)
REDUNDANCY_SUPPORT = ua.NodeId(ua.ObjectIds.Server_ServerRedundancy_RedundancySupport)

# Publish requests wait server-side for data or a keep-alive; this bounds one of them.
PUBLISH_TIMEOUT_S = 10.0


def code_name(code: ua.StatusCode | int) -> str:
    """Symbolic name of a status code (e.g. "BadTypeMismatch")."""
    value = code.value if isinstance(code, ua.StatusCode) else code
    return ua.status_codes.get_name_and_doc(value)[0]


@dataclass(frozen=True)
class RawSubscription:
    """A subscription created by hand, with the server's revised parameters."""

    id: int
    interval_ms: float
    keepalive_count: int
    lifetime_count: int


async def create_subscription(
    client: Client, interval_ms: float, keepalive_count: int = 10, lifetime_count: int | None = None
) -> RawSubscription:
    """CreateSubscription without starting asyncua's Publish loop (Publish is driven by the test)."""
    request = ua.CreateSubscriptionRequest()
    request.Parameters = ua.CreateSubscriptionParameters(
        RequestedPublishingInterval=interval_ms,
        RequestedLifetimeCount=lifetime_count if lifetime_count is not None else keepalive_count * 10,
        RequestedMaxKeepAliveCount=keepalive_count,
        MaxNotificationsPerPublish=0,
        PublishingEnabled=True,
        Priority=0,
    )
    data = await bounded(client.uaclient._send_request(request, REQUEST_TIMEOUT_S))
    response = struct_from_binary(ua.CreateSubscriptionResponse, data)
    response.ResponseHeader.ServiceResult.check()
    res = response.Parameters
    assert res.SubscriptionId != 0, "CreateSubscription returned SubscriptionId 0"
    assert res.RevisedPublishingInterval > 0, res
    assert res.RevisedMaxKeepAliveCount > 0, res
    return RawSubscription(
        res.SubscriptionId, res.RevisedPublishingInterval, res.RevisedMaxKeepAliveCount, res.RevisedLifetimeCount
    )


def item_request(
    node: ua.NodeId,
    client_handle: int,
    sampling_ms: float,
    data_filter: ua.DataChangeFilter | None = None,
    queue_size: int = 1,
) -> ua.MonitoredItemCreateRequest:
    """A Reporting-mode MonitoredItemCreateRequest for the Value attribute of `node`."""
    params = ua.MonitoringParameters(
        ClientHandle=client_handle,
        SamplingInterval=sampling_ms,
        QueueSize=queue_size,
        DiscardOldest=True,
    )
    if data_filter is not None:
        params.Filter = data_filter
    return ua.MonitoredItemCreateRequest(
        ItemToMonitor=ua.ReadValueId(NodeId=node, AttributeId=ua.AttributeIds.Value),
        MonitoringMode=ua.MonitoringMode.Reporting,
        RequestedParameters=params,
    )


async def create_items(
    client: Client, sub: RawSubscription, items: list[ua.MonitoredItemCreateRequest]
) -> list[ua.MonitoredItemCreateResult]:
    """CreateMonitoredItems; fails the test unless every item was created."""
    params = ua.CreateMonitoredItemsParameters(
        SubscriptionId=sub.id, TimestampsToReturn=ua.TimestampsToReturn.Both, ItemsToCreate=items
    )
    results = await bounded(client.uaclient.session.create_monitored_items(params))
    assert len(results) == len(items), results
    for res in results:
        assert res.StatusCode.is_good(), f"CreateMonitoredItems: {code_name(res.StatusCode)}"
    return results


async def publish(
    client: Client, acks: list[tuple[int, int]] | None = None, timeout: float = PUBLISH_TIMEOUT_S
) -> ua.PublishResult:
    """One Publish request (acknowledging `acks` = [(subscription id, sequence number)])."""
    ack_list = [ua.SubscriptionAcknowledgement(SubscriptionId=s, SequenceNumber=n) for s, n in acks or []]
    response = await bounded(client.uaclient.session.publish(ack_list), timeout)
    response.ResponseHeader.ServiceResult.check()
    for res in response.Parameters.Results:
        assert res.is_good(), f"Publish acknowledgement result {code_name(res)}"
    return response.Parameters


def data_changes(result: ua.PublishResult) -> list[ua.MonitoredItemNotification]:
    """Every MonitoredItemNotification in one Publish result."""
    out: list[ua.MonitoredItemNotification] = []
    # An empty NotificationData may be encoded as a null array (None in asyncua).
    for notif in result.NotificationMessage.NotificationData or []:
        if isinstance(notif, ua.DataChangeNotification):
            out.extend(notif.MonitoredItems)
    return out


def is_keepalive(result: ua.PublishResult) -> bool:
    return not result.NotificationMessage.NotificationData


class Publisher:
    """Publishes on one session, acknowledging what it received on the next request."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.pending: list[tuple[int, int]] = []

    async def next(self, timeout: float = PUBLISH_TIMEOUT_S) -> ua.PublishResult:
        acks, self.pending = self.pending, []
        result = await publish(self.client, acks, timeout)
        if not is_keepalive(result):
            self.pending.append((result.SubscriptionId, result.NotificationMessage.SequenceNumber))
        return result

    async def values_for(self, seconds: float, handle: int | None = None) -> list[Any]:
        """Values of every data change received (for `handle`, or all) in Publish responses
        requested during `seconds`. A Publish in flight is never abandoned (its response
        would be lost), so the window ends with the first response after `seconds`; the
        subscription's keep-alive keeps that short."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        values: list[Any] = []
        while loop.time() < deadline:
            result = await self.next()
            values.extend(n.Value.Value.Value for n in data_changes(result) if handle is None or n.ClientHandle == handle)
        return values

    async def wait_value(self, handle: int, predicate: Any, seconds: float) -> list[Any]:
        """Publish until a data change for `handle` satisfies `predicate`; returns all values seen for it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        seen: list[Any] = []
        while loop.time() < deadline:
            result = await self.next()
            for n in data_changes(result):
                if n.ClientHandle == handle:
                    seen.append(n.Value.Value.Value)
                    if predicate(seen[-1]):
                        return seen
        raise AssertionError(f"no matching value for client handle {handle} within {seconds}s; saw {seen}")


async def call(client: Client, obj: ua.NodeId, method: ua.NodeId, *args: ua.Variant) -> ua.CallMethodResult:
    """One Call request with one method; returns its CallMethodResult without raising."""
    request = ua.CallMethodRequest(ObjectId=obj, MethodId=method, InputArguments=list(args))
    (result,) = await bounded(client.uaclient.session.call([request]))
    return result
