"""The appliance pair (docs/pair.md) as real OPC UA clients see it (issue 18).

Two `uagate run` processes on loopback, A and B, each with its own data directory, ports and
ApplicationUri, are paired with the CLI (`pair invite` on A, `pair join` on B): A is the
primary, B the standby (a learner; no witness). What the tests prove:

- a client certificate trusted on A is accepted by B, and a user added on A logs in on B's
  console and activates an OPC UA session on B (the configuration is replicated);
- both appliances mount the same field server under the same NodeIds, each with its own
  field session, and publish ServerRedundancy (Hot, the other's ApplicationUri) and
  ServiceLevel (255 primary, 230 standby) as non-transparent redundancy (Part 4 §6.6.2);
- asyncua's HaClient (Warm, Part 4 §6.6.2.4.5, Table 111) given both URLs keeps receiving a
  field value when the primary goes into maintenance and when it is killed (SIGKILL);
- with a witness (`uagate witness`, the third voter), RequestServerStateChange on the primary
  hands the configuration leadership to the standby first: B leads by the time A's
  ServiceLevel reads 0.

Every wait is bounded; every process and field server is stopped at teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asyncua import Client, ua
from asyncua.client.ha.ha_client import HaClient, HaConfig, HaMode
from conftest import (
    PAIR_RE,
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    UAGATE_BIN,
    ClientCert,
    PairStatus,
    ServerTarget,
    console_request,
    free_port,
)
from test_asyncua_client import MODE, REQUEST_TIMEOUT_S, bounded, secure_client
from test_asyncua_field import (
    _true,
    connected,
    eventually,
    field_ns,
    field_servers,
    field_toml,
    read,
    wait_connected,
)
from test_asyncua_server_state import connected as connected_client
from test_asyncua_server_state import request_state
from uaservices import REDUNDANCY_SUPPORT, SERVICE_LEVEL

pytestmark = pytest.mark.uagate_only

A_URI = "urn:uagate-interop:appliance-a"
B_URI = "urn:uagate-interop:appliance-b"
SERVER_URI_ARRAY = ua.NodeId(ua.ObjectIds.Server_ServerRedundancy_ServerUriArray)
PAIR_TIMEOUT_S = 20.0
# How long the standby may take to apply a change committed on the primary (docs/pair.md:
# the standby follows within a heartbeat, 250 ms; the brief of issue 18 allows 2 s).
REPLICATION_BOUND_S = 2.0
# How long a redundancy-aware client may take to receive values again after the primary
# goes away: generous, this is not a benchmark.
FAILOVER_BOUND_S = 15.0
ADMIN = ("root", "root-pass-9")


def appliance_config(application_uri: str, fields: str = "") -> str:
    """One appliance's document: ephemeral loopback listeners (the console and TLS listeners
    follow opc_tcp's port 0), a pair listener that keeps its port across a restart (the other
    appliance dials it there) and its own ApplicationUri (per appliance)."""
    return f"""\
[listen]
opc_tcp = "127.0.0.1:0"
pair = "127.0.0.1:{free_port()}"
[server]
application_name = "uagate-pair-test"
application_uri = "{application_uri}"

{fields}"""


@pytest.fixture
def appliances(tmp_path) -> Iterator[tuple[ServerTarget, ServerTarget]]:
    """Two prepared, not yet started appliances (A then B); both stopped at teardown, at the
    same time (a gateway with field connections takes a while to shut down)."""
    a, b = ServerTarget(tmp_path / "a"), ServerTarget(tmp_path / "b")
    try:
        yield a, b
    finally:
        stoppers = [threading.Thread(target=t.stop) for t in (b, a)]
        for s in stoppers:
            s.start()
        for s in stoppers:
            s.join()


async def cli(target: ServerTarget, *args: str) -> str:
    """A uagate CLI command in a thread, so in-process field servers keep serving meanwhile."""
    done = await asyncio.to_thread(target.cli, *args)
    return done.stdout


async def pair_status(target: ServerTarget) -> PairStatus:
    return await asyncio.to_thread(target.pair_status)


async def start_pair(a: ServerTarget, b: ServerTarget, a_fields: str = "") -> None:
    """Imports each appliance's configuration (`a_fields`, field connections, on A only),
    starts both, joins B to A and waits (bounded) until A is the primary and B the standby
    that applied everything A has.

    B takes A's configuration when it joins, field connections included, but a running
    gateway applies a change of `[[field_servers]]` only at its next start (docs/config.md):
    with `a_fields`, B is restarted after the join so it mounts A's field servers."""
    for t, uri, fields in ((a, A_URI, a_fields), (b, B_URI, "")):
        path = t.tmp / "appliance.toml"
        path.write_text(appliance_config(uri, fields))
        await cli(t, "config", "import", str(path))
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
    await asyncio.to_thread(b.pair_join, a)
    await wait_paired(a, b)
    if a_fields:
        await asyncio.to_thread(b.restart)
        await wait_paired(a, b)


async def wait_paired(a: ServerTarget, b: ServerTarget) -> None:
    async def paired() -> bool:
        sa, sb = await pair_status(a), await pair_status(b)
        return sa.role == "primary" and sb.role == "standby" and sb.applied >= sa.applied > 0

    await eventually("A primary, B a standby that caught up", paired, PAIR_TIMEOUT_S, period=0.2)


async def try_connect(client: Client) -> BaseException | None:
    """Connects and disconnects; returns the error of a refused connect (None on success)."""
    try:
        await bounded(client.connect(), REQUEST_TIMEOUT_S)
    except (ua.UaError, OSError, TimeoutError) as exc:
        return exc
    try:
        await bounded(client.get_node(SERVICE_LEVEL).read_value(), REQUEST_TIMEOUT_S)
    finally:
        await bounded(client.disconnect(), REQUEST_TIMEOUT_S)
    return None


async def _equals(value: Any, want: Any) -> bool:
    return (await value) == want


class _Ignore:
    """A subscription handler for items that only have to exist."""

    def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
        pass


# -- 1. Trust replicated to the standby --------------------------------------------------------
async def test_a_certificate_the_standby_refused_is_approved_on_the_primary(
    appliances: tuple[ServerTarget, ServerTarget], client_cert: ClientCert
) -> None:
    """B refuses an unknown client certificate and lists it as rejected, and so does A (the
    primary, where the operator decides): `trust approve` of it on A lets the client open a Sign
    and a SignAndEncrypt channel (Basic256Sha256) to B within REPLICATION_BOUND_S of the command
    returning."""
    a, b = appliances
    await start_pair(a, b)
    assert b.url is not None

    refused = await try_connect(await secure_client(b.url, client_cert))
    assert refused is not None, "B accepted a client certificate nobody trusted"
    assert isinstance(refused, ua.UaStatusCodeError), refused
    assert refused.code == ua.StatusCodes.BadCertificateUntrusted, refused
    rejected = await asyncio.to_thread(b.trust_rejected)
    assert client_cert.thumbprint in {e.thumbprint for e in rejected}, rejected
    refused_at = time.monotonic()
    while client_cert.thumbprint not in {e.thumbprint for e in await asyncio.to_thread(a.trust_rejected)}:
        assert time.monotonic() - refused_at < REPLICATION_BOUND_S, (
            "the certificate B refused is not on A's rejected list, where the operator approves"
        )
        await asyncio.sleep(0.05)
    print(f"TRUST standby-refused certificate listed on the primary {time.monotonic() - refused_at:.2f}s")

    await asyncio.to_thread(a.cli, "trust", "approve", client_cert.thumbprint)
    trusted_at = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        error = await try_connect(await secure_client(b.url, client_cert))
        took = time.monotonic() - trusted_at
        if error is None:
            break
        assert took < REPLICATION_BOUND_S, (
            f"B still refuses the certificate {took:.2f}s after `trust add` on A returned: {error!r}"
        )
        await asyncio.sleep(0.05)
    print(f"TRUST primary->standby connect {took:.2f}s ({attempts} attempts)")
    assert client_cert.thumbprint in {e.thumbprint for e in await asyncio.to_thread(b.trust_list)}
    assert await try_connect(await secure_client(b.url, client_cert, mode=MODE.Sign)) is None


# -- 2. Users replicated to the standby --------------------------------------------------------
async def test_user_added_on_the_primary_logs_in_on_the_standby(
    appliances: tuple[ServerTarget, ServerTarget],
) -> None:
    """A user added on A (`user add --role operator`) logs in on B's console (REST login) and
    activates an OPC UA session with a UserName identity on B, which B's console lists under
    that user; a wrong password is refused on B. A password reset on A ends that OPC UA
    session on B (its next Read is BadSessionIdInvalid)."""
    a, b = appliances
    await start_pair(a, b)
    assert b.url is not None
    name, password = "olivia", "olivia-pass-4"
    login = {"username": name, "password": password}

    status, body = await asyncio.to_thread(console_request, b, "POST", "/api/v1/login", login)
    assert status == 401, (status, body)

    await asyncio.to_thread(a.user_add, name, "operator", password)
    added_at = time.monotonic()
    while True:
        status, body = await asyncio.to_thread(console_request, b, "POST", "/api/v1/login", login)
        took = time.monotonic() - added_at
        if status == 200:
            break
        assert took < REPLICATION_BOUND_S, f"B's console refuses the login {took:.2f}s after `user add` on A: {body}"
        await asyncio.sleep(0.05)
    print(f"USER primary->standby console login {took:.2f}s")
    assert isinstance(body, dict)
    token = body["token"]

    client = Client(b.url, timeout=REQUEST_TIMEOUT_S)
    client.set_user(name)
    client.set_password(password)
    await asyncio.wait_for(client.connect(), REQUEST_TIMEOUT_S * 2)
    try:
        status, sessions = await asyncio.to_thread(console_request, b, "GET", "/api/v1/sessions", None, token)
        assert status == 200, sessions
        assert isinstance(sessions, list)
        assert [s["user"] for s in sessions] == [name], sessions

        server_time = client.get_node(ua.ObjectIds.Server_ServerStatus_CurrentTime)
        await server_time.read_value()
        await asyncio.to_thread(a.cli, "user", "password", name, stdin="olivia-pass-5\n")
        reset_at = time.monotonic()
        while True:
            try:
                await server_time.read_value()
            except ua.UaStatusCodeError as e:
                assert e.code == ua.StatusCodes.BadSessionIdInvalid, e
                break
            except ConnectionError:
                # asyncua's own keep-alive met the BadSessionIdInvalid first and
                # closed the client: B must list no session of that user any more
                # (asked with a login of the new password: the reset ended the old one's).
                status, body = await asyncio.to_thread(
                    console_request, b, "POST", "/api/v1/login", {"username": name, "password": "olivia-pass-5"}
                )
                assert status == 200 and isinstance(body, dict), (status, body)
                status, sessions = await asyncio.to_thread(
                    console_request, b, "GET", "/api/v1/sessions", None, body["token"]
                )
                assert status == 200, sessions
                assert isinstance(sessions, list)
                assert name not in [s["user"] for s in sessions], sessions
                break
            took = time.monotonic() - reset_at
            assert took < REPLICATION_BOUND_S + 2.0, (
                f"B's OPC UA session begun with the old password still reads {took:.2f}s after the reset on A"
            )
            await asyncio.sleep(0.1)
        print(f"USER password reset on primary ends the standby's session in {time.monotonic() - reset_at:.2f}s")
    finally:
        # CloseSession of the ended session is refused; the connection closes all the same.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.disconnect(), REQUEST_TIMEOUT_S * 2)

    wrong = Client(b.url, timeout=REQUEST_TIMEOUT_S)
    wrong.set_user(name)
    wrong.set_password(password)
    error = await try_connect(wrong)
    assert isinstance(error, ua.UaStatusCodeError), error
    assert error.code in (ua.StatusCodes.BadUserAccessDenied, ua.StatusCodes.BadIdentityTokenRejected), error


# -- 3. One address space, two field sessions, ServerRedundancy and ServiceLevel ---------------
async def test_both_appliances_mount_the_field_server_and_publish_redundancy(
    appliances: tuple[ServerTarget, ServerTarget],
) -> None:
    """The field connection configured on A reaches B with the configuration: the same mounted
    NodeIds (namespace index and identifier) read the same values on A and B, each appliance
    with its own field session (one southbound monitored item each). ServerRedundancy lists
    the other appliance (Hot); ServiceLevel is 255 on the primary and 230 on the standby."""
    a, b = appliances
    async with field_servers(("line1", 20.0)) as (field,):
        await start_pair(a, b, a_fields=field_toml("line1", [field.url]))
        assert a.url is not None and b.url is not None
        async with connected(a.url) as ca, connected(b.url) as cb:
            await wait_connected(ca, "line1", a)
            await wait_connected(cb, "line1", b)
            ns_a, ns_b = await field_ns(ca), await field_ns(cb)
            assert ns_a == ns_b, f"the field namespace is {ns_a} on A but {ns_b} on B"
            ns = ns_a

            # A value set on the field server reads the same through both, under one NodeId.
            assert field.setpoint is not None
            await field.server.write_attribute_value(
                field.setpoint.nodeid, ua.DataValue(ua.Variant(17.25, ua.VariantType.Double))
            )
            setpoint = ua.NodeId("Plant.Setpoint", ns)
            for client, who in ((ca, "A"), (cb, "B")):
                await eventually(
                    f"Setpoint 17.25 read on {who}", lambda c=client: _equals(read(c, setpoint), 17.25), 5.0
                )
            mode = ua.NodeId("Plant.Mode", ns)
            assert await read(ca, mode) == await read(cb, mode) == ua.NodeId("Plant.Setpoint", ns)
            temperature = ua.NodeId("Plant.Temperature", ns)
            ta, tb = await read(ca, temperature), await read(cb, temperature)
            assert field.is_own_value(ta) and field.is_own_value(tb), (ta, tb)
            assert abs(ta - tb) < 1.0, f"Temperature {ta} on A, {tb} on B"

            # Each appliance has its own field session: one southbound item per subscriber.
            subs = [await bounded(c.create_subscription(100, _Ignore())) for c in (ca, cb)]
            for sub, client in zip(subs, (ca, cb)):
                await bounded(sub.subscribe_data_change(client.get_node(temperature)))
            await eventually(
                "a southbound Temperature item of each appliance",
                lambda: _true(field.temperature_item_count() == 2),
                5.0,
            )

            # ServerRedundancy: each lists the other; ServiceLevel by role. (The gateway takes
            # the pair's membership and role from the pair node once a second.)
            for client, who, other in ((ca, "A", B_URI), (cb, "B", A_URI)):

                async def hot(c: Client = client, o: str = other) -> bool:
                    support = int(await read(c, REDUNDANCY_SUPPORT))
                    return support == ua.RedundancySupport.Hot and await read(c, SERVER_URI_ARRAY) == [o]

                await eventually(f"ServerRedundancy on {who}: Hot, ServerUriArray [{other}]", hot, 5.0)
            await eventually("ServiceLevel 255 on the primary A", lambda: _equals(read(ca, SERVICE_LEVEL), 255), 5.0)
            await eventually("ServiceLevel 230 on the standby B", lambda: _equals(read(cb, SERVICE_LEVEL), 230), 5.0)
            for sub in subs:
                await bounded(sub.delete())


# -- 4. asyncua's HaClient across maintenance and a killed primary ------------------------------
class SourceRecorder:
    """HaClient subscription handler: (arrival, value, which appliance) of each data change."""

    def __init__(self, ha: HaClient, names: dict[str, str]) -> None:
        self.ha = ha
        self.names = names  # URL -> name
        self.changes: list[tuple[float, Any, str]] = []
        self.bad: list[tuple[float, str, str]] = []

    def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
        # The node belongs to the session of the HaClient's client that reported it.
        who = next(
            (self.names[info.url] for c, info in self.ha.clients.items() if node.session is c.uaclient.session), "?"
        )
        status = data.monitored_item.Value.StatusCode
        if status.is_good():
            self.changes.append((time.monotonic(), val, who))
        else:
            self.bad.append((time.monotonic(), who, status.name))

    def count_from(self, who: str, since: float) -> int:
        return sum(1 for t, _, w in self.changes if t >= since and w == who)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time without a good value between `start` and `end`, counting from the
        last value before `start`."""
        times = [t for t, _, _ in self.changes if t <= end]
        before = [t for t in times if t < start]
        points = ([before[-1]] if before else [start]) + [t for t in times if t >= start]
        return max((b - a for a, b in itertools.pairwise(points)), default=end - start)


async def test_ha_client_keeps_receiving_across_maintenance_and_a_killed_primary(
    appliances: tuple[ServerTarget, ServerTarget], client_cert: ClientCert
) -> None:
    """asyncua's HaClient (Warm: sessions and subscriptions on both, only the active server
    Reporting) given A and B, subscribed to a mounted field value changing every 100 ms, picks
    the primary (255 over 230); it keeps receiving values (from B) when A is put into
    maintenance (RequestServerStateChange Suspended: ServiceLevel 0) and, after A is back and
    active again, when A is killed with SIGKILL."""
    a, b = appliances
    a.user_add(ADMIN[0], "admin", ADMIN[1])
    a.trust_client(client_cert.cert_der)
    async with field_servers(("line1", 20.0)) as (field,):
        await start_pair(a, b, a_fields=field_toml("line1", [field.url]))
        assert a.url is not None and b.url is not None
        async with connected(a.url) as ca, connected(b.url) as cb:
            await wait_connected(ca, "line1", a)
            await wait_connected(cb, "line1", b)
            ns = await field_ns(ca)
            assert await field_ns(cb) == ns
        temperature = f"ns={ns};s=Plant.Temperature"

        config = HaConfig(
            HaMode.WARM,
            keepalive_timer=1,
            manager_timer=1,
            reconciliator_timer=1,
            session_timeout=30,
            request_timeout=3,
            session_name="uagate interop HaClient",
            urls=[a.url, b.url],
        )
        ha = HaClient(config)
        rec = SourceRecorder(ha, {a.url: "A", b.url: "B"})
        await ha.start()
        try:
            sub = await ha.create_subscription(100, rec)
            await ha.subscribe_data_change(sub, [temperature], queuesize=10)
            t0 = time.monotonic()
            await eventually(
                "HaClient receives values from the primary A",
                lambda: _true(rec.count_from("A", t0) >= 5),
                FAILOVER_BOUND_S,
                period=0.1,
            )

            # (a) Maintenance on A: ServiceLevel 0, the client moves to B.
            async with connected_client(await secure_client(a.url, client_cert, user=ADMIN)) as admin:
                t_maint = time.monotonic()
                assert await request_state(admin, ua.ServerState.Suspended) == "Good"
                await eventually(
                    "HaClient receives values from B after A went into maintenance",
                    lambda: _true(rec.count_from("B", t_maint) >= 5),
                    FAILOVER_BOUND_S,
                    period=0.1,
                )
                gap_maint = rec.longest_gap(t_maint, time.monotonic())
                print(f"GAP maintenance {gap_maint:.2f}s")

                # A back to Running (255 over B's 230): the client returns to it.
                t_back = time.monotonic()
                assert await request_state(admin, ua.ServerState.Running) == "Good"
            await eventually(
                "HaClient receives values from A again after the maintenance",
                lambda: _true(rec.count_from("A", t_back) >= 5),
                FAILOVER_BOUND_S,
                period=0.1,
            )
            gap_back = rec.longest_gap(t_back, time.monotonic())
            print(f"GAP back to the primary {gap_back:.2f}s")

            # (b) A killed (SIGKILL): the client moves to B.
            t_kill = time.monotonic()
            await asyncio.to_thread(a.kill)
            await eventually(
                "HaClient receives values from B after A was killed",
                lambda: _true(rec.count_from("B", t_kill) >= 5),
                FAILOVER_BOUND_S,
                period=0.1,
            )
            gap_kill = rec.longest_gap(t_kill, time.monotonic())
            print(f"GAP kill {gap_kill:.2f}s")
            assert gap_maint < FAILOVER_BOUND_S and gap_kill < FAILOVER_BOUND_S
            assert all(field.is_own_value(v) for _, v, _ in rec.changes), "a value not from the field server"
            # No non-good value at all: an item the client just switched from Disabled to
            # Reporting (the gateway samples nothing for a disabled item) waits for its field
            # value and reports it first, not BadWaitingForInitialData before it.
            steps = {"start": t0, "maintenance": t_maint, "back": t_back, "kill": t_kill}
            bad = [(who, name, {k: round(t - v, 2) for k, v in steps.items()}) for t, who, name in rec.bad]
            print(f"non-good values (seconds after each step): {bad}")
            assert not bad, bad
        finally:
            try:
                await asyncio.wait_for(ha.stop(), 15.0)
            except Exception:  # noqa: BLE001 - the outcome is decided; do not mask it
                pass


# -- 5. Maintenance with a witness: the leadership moves first --------------------------------
@pytest.fixture
def witness(tmp_path) -> Iterator[ServerTarget]:
    """`uagate witness` on its own data directory (a ServerTarget for its CLI: `pair join`,
    `pair status`), listening on an ephemeral loopback port; stopped at teardown."""
    w = ServerTarget(tmp_path / "w")
    log = w.log_path.open("a")
    proc = subprocess.Popen(
        [str(UAGATE_BIN), "--data", str(w.data_dir), "witness", "--listen", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    log.close()
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        line = lines.get(timeout=READY_TIMEOUT_S).strip()
        assert PAIR_RE.match(line), f"unexpected first line of uagate witness: {line!r}\n{w.log_tail()}"
        yield w
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_maintenance_with_a_witness_moves_the_leadership_before_clients_move(
    appliances: tuple[ServerTarget, ServerTarget], witness: ServerTarget, client_cert: ClientCert
) -> None:
    """A primary, B standby and a witness W (three voters). An administrator calls
    RequestServerStateChange (Suspended) on A. A client polling A's ServiceLevel sees 0 only
    once B leads the configuration (B's `pair status` says primary at that moment); the Call
    returns with A a standby following B; configuration writes go to B and A refuses them
    naming B. Back to Running, A's ServiceLevel is restored and the leadership stays on B."""
    a, b = appliances
    a.user_add(ADMIN[0], "admin", ADMIN[1])
    a.trust_client(client_cert.cert_der)
    await start_pair(a, b)
    await asyncio.to_thread(witness.pair_join, a)

    async def three_voters() -> bool:
        sa, sb, sw = await pair_status(a), await pair_status(b), await pair_status(witness)
        return (
            sa.role == "primary"
            and all(s.fields.get("voters") == "3" for s in (sa, sb, sw))
            and sb.role == "standby"
            and sw.role == "witness"
            and sw.leader == a.pair_addr
        )

    await eventually("A leads three voters (A, B and the witness)", three_voters, PAIR_TIMEOUT_S, period=0.2)
    assert a.url is not None and b.url is not None

    async with connected(a.url) as watcher:
        level = watcher.get_node(SERVICE_LEVEL)
        assert await bounded(level.read_value(), REQUEST_TIMEOUT_S) == 255
        seen: dict[str, Any] = {}

        async def watch() -> None:
            """Reads A's ServiceLevel until it is 0, then asks B who leads."""
            deadline = time.monotonic() + FAILOVER_BOUND_S
            while time.monotonic() < deadline:
                if await bounded(level.read_value(), REQUEST_TIMEOUT_S) == 0:
                    seen["at"] = time.monotonic()
                    seen["b"] = await pair_status(b)
                    return
                await asyncio.sleep(0.01)

        watching = asyncio.create_task(watch())
        async with connected_client(await secure_client(a.url, client_cert, user=ADMIN)) as admin:
            t0 = time.monotonic()
            assert await request_state(admin, ua.ServerState.Suspended) == "Good"
            took = time.monotonic() - t0
            print(f"MAINTENANCE CALL (hand-over included) {took:.2f}s")
            await asyncio.wait_for(watching, FAILOVER_BOUND_S)
            assert "b" in seen, "A's ServiceLevel never read 0"
            assert seen["b"].role == "primary", f"A read ServiceLevel 0 while B was {seen['b'].fields}"
            assert seen["b"].leader == b.pair_addr

            sa, sw = await pair_status(a), await pair_status(witness)
            assert sa.role == "standby" and sa.leader == b.pair_addr, sa.fields
            assert sw.leader == b.pair_addr, sw.fields
            # Configuration writes now go to B; A names B when refusing one.
            await asyncio.to_thread(b.user_add, "after-handover", "viewer", "a long password 1")
            refused = await asyncio.to_thread(
                a.cli, "user", "add", "on-a", "--role", "viewer", stdin="a long password 1\n", check=False
            )
            assert refused.returncode != 0 and b.pair_addr in refused.stderr, refused.stderr

            # Back to Running: A serves with a standby's level, B keeps the leadership.
            assert await request_state(admin, ua.ServerState.Running) == "Good"
        await eventually(
            "A's ServiceLevel back above 0",
            lambda: _equals_above(level.read_value(), 0),
            FAILOVER_BOUND_S,
            period=0.1,
        )
        assert (await pair_status(b)).role == "primary"


async def _equals_above(value: Any, floor: int) -> bool:
    return (await value) > floor
