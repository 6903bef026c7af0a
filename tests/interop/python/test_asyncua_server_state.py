"""Server.RequestServerStateChange (i=12886) as seen by asyncua clients (uagate only).

Only an admin user on an encrypted channel may change the server state; every other
client sees the change through ServiceLevel (i=2267) and ServerStatus.State (i=2259).
The asyncua example server has no such method, so every test here is `uagate_only`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone

import pytest
from asyncua import Client, ua
from conftest import ClientCert, ServerTarget
from test_asyncua_client import REQUEST_TIMEOUT_S, bounded, secure_client
from uaservices import (
    REQUEST_SERVER_STATE_CHANGE,
    SERVER,
    SERVER_STATE,
    SERVICE_LEVEL,
    Publisher,
    RawSubscription,
    call,
    code_name,
    create_items,
    create_subscription,
    data_changes,
    item_request,
)

pytestmark = pytest.mark.uagate_only

ADMIN = ("root", "root-pass-9")
OPERATOR = ("olivia", "olivia-pass-4")
SERVICE_LEVEL_HANDLE = 1
STATE_HANDLE = 2
# What "within one publishing interval" may add: sampling, scheduling, loopback latency.
MARGIN_S = 2.0


@asynccontextmanager
async def connected(client: Client) -> AsyncIterator[Client]:
    await bounded(client.connect())
    try:
        yield client
    finally:
        await bounded(client.disconnect())


def state_change_args(state: ua.ServerState, reason: str = "maintenance") -> list[ua.Variant]:
    """(State, EstimatedReturnTime, SecondsTillShutdown, Reason, Restart) as Part 5 defines them."""
    return [
        ua.Variant(int(state), ua.VariantType.Int32),
        ua.Variant(datetime.now(timezone.utc) + timedelta(minutes=10), ua.VariantType.DateTime),
        ua.Variant(0, ua.VariantType.UInt32),
        ua.Variant(ua.LocalizedText(reason, "en"), ua.VariantType.LocalizedText),
        ua.Variant(False, ua.VariantType.Boolean),
    ]


async def request_state(client: Client, state: ua.ServerState) -> str:
    """Call RequestServerStateChange; returns the symbolic status of the method result."""
    result = await call(client, SERVER, REQUEST_SERVER_STATE_CHANGE, *state_change_args(state))
    return code_name(result.StatusCode)


class Observer:
    """A second client watching ServiceLevel and ServerStatus.State through one subscription."""

    def __init__(self, client: Client, sub: RawSubscription) -> None:
        self.client = client
        self.sub = sub
        self.publisher = Publisher(client)
        self.latest: dict[int, object] = {}

    @classmethod
    async def start(cls, client: Client) -> Observer:
        sub = await create_subscription(client, interval_ms=100, keepalive_count=5)
        await create_items(
            client,
            sub,
            [
                item_request(SERVICE_LEVEL, SERVICE_LEVEL_HANDLE, sampling_ms=50),
                item_request(SERVER_STATE, STATE_HANDLE, sampling_ms=50),
            ],
        )
        return cls(client, sub)

    async def wait_for(self, service_level: int, state: ua.ServerState, seconds: float) -> None:
        """Publish until both monitored values are as expected, at most `seconds`."""
        want = {SERVICE_LEVEL_HANDLE: service_level, STATE_HANDLE: int(state)}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.latest != want:
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"after {seconds:.1f}s ServiceLevel/State are {self.latest}, expected {want}")
            result = await self.publisher.next(timeout=left + 1.0)
            for n in data_changes(result):
                assert n.Value.StatusCode.is_good(), n
                self.latest[n.ClientHandle] = int(n.Value.Value.Value)

    @property
    def change_bound_s(self) -> float:
        return self.sub.interval_ms / 1000.0 + MARGIN_S


@asynccontextmanager
async def observer(server: ServerTarget) -> AsyncIterator[Observer]:
    async with connected(Client(server.url, timeout=REQUEST_TIMEOUT_S)) as client:
        obs = await Observer.start(client)
        await obs.wait_for(255, ua.ServerState.Running, seconds=5.0)
        yield obs


async def read_state(client: Client) -> tuple[int, int]:
    level = await bounded(client.get_node(SERVICE_LEVEL).read_value())
    state = await bounded(client.get_node(SERVER_STATE).read_value())
    return int(level), int(state)


async def test_admin_suspends_and_resumes_server(target: ServerTarget, client_cert: ClientCert) -> None:
    target.user_add(ADMIN[0], "admin", ADMIN[1])
    target.trust_client(client_cert.cert_der)
    target.start()
    async with observer(target) as obs:
        async with connected(await secure_client(target.url, client_cert, user=ADMIN)) as admin:
            assert await request_state(admin, ua.ServerState.Suspended) == "Good"
            await obs.wait_for(0, ua.ServerState.Suspended, seconds=obs.change_bound_s)
            assert await read_state(admin) == (0, int(ua.ServerState.Suspended))
            status = await bounded(admin.get_node(ua.NodeId(ua.ObjectIds.Server_ServerStatus)).read_value())
            assert status.State == ua.ServerState.Suspended

            assert await request_state(admin, ua.ServerState.Running) == "Good"
            await obs.wait_for(255, ua.ServerState.Running, seconds=obs.change_bound_s)
            assert await read_state(admin) == (255, int(ua.ServerState.Running))


async def test_operator_may_not_change_server_state(target: ServerTarget, client_cert: ClientCert) -> None:
    target.user_add(OPERATOR[0], "operator", OPERATOR[1])
    target.trust_client(client_cert.cert_der)
    target.start()
    async with connected(await secure_client(target.url, client_cert, user=OPERATOR)) as operator:
        assert await request_state(operator, ua.ServerState.Suspended) == "BadUserAccessDenied"
        assert await read_state(operator) == (255, int(ua.ServerState.Running))


async def test_anonymous_may_not_change_server_state(target: ServerTarget, client_cert: ClientCert) -> None:
    target.trust_client(client_cert.cert_der)
    target.start()
    async with connected(await secure_client(target.url, client_cert)) as anonymous:
        assert await request_state(anonymous, ua.ServerState.Suspended) == "BadUserAccessDenied"
        assert await read_state(anonymous) == (255, int(ua.ServerState.Running))


async def test_admin_on_unencrypted_channel_may_not_change_server_state(target: ServerTarget) -> None:
    target.user_add(ADMIN[0], "admin", ADMIN[1])
    target.start()
    client = Client(target.url, timeout=REQUEST_TIMEOUT_S)
    client.set_user(ADMIN[0])
    client.set_password(ADMIN[1])
    async with connected(client) as admin:
        status = await request_state(admin, ua.ServerState.Suspended)
        assert status in {"BadUserAccessDenied", "BadSecurityModeInsufficient"}, status
        assert await read_state(admin) == (255, int(ua.ServerState.Running))
