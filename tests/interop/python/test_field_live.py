"""Field connections changed while uagate runs, through its REST API, seen by an asyncua client.

An asyncua client is subscribed to a value on each of two mounts. Through REST the second
mount is removed, added again on another field server, and turned into a hot redundant pair;
the client keeps receiving from the first mount throughout, on the same southbound session
(no new session on the untouched field server), and the second mount's item says what
happened: BadNodeIdUnknown once while it is gone, then values from the new server, with no
bad value when its settings change. The field servers are asyncua Servers in this test's
event loop (field_server.py), so the test can see their sessions.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from asyncua import ua
from conftest import ServerTarget, console_request
from field_server import FIELD_NS_URI
from test_asyncua_field import (
    Recorder,
    connected,
    eventually,
    field_servers,
    field_toml,
    gateway_config,
    read,
    start_gateway,
    subscribe,
    wait_connected,
    NAMESPACE_ARRAY,
    mount,
)

pytestmark = pytest.mark.uagate_only

OPERATOR = ("olga", "olga-operator-pass-3")


def entry(name: str, urls: list[str], redundancy: str = "none") -> dict:
    """One `[[field_servers]]` entry as REST takes it (like field_toml)."""
    return {
        "name": name,
        "endpoints": urls,
        "security_mode": "none",
        "security_policy": "None",
        "redundancy": redundancy,
        "keep_alive_interval": "200ms",
        "request_timeout": "3s",
        "reconnect": {"initial_delay": "200ms", "max_delay": "1s"},
    }


async def rest(target: ServerTarget, method: str, path: str, body: dict | None, token: str) -> dict:
    """One REST call (in a thread: the field servers run in this event loop); must answer 200."""
    status, answer = await asyncio.to_thread(console_request, target, method, path, body, token)
    assert status == 200, f"{method} {path}: {status} {answer}"
    return answer


def ns_of_mount(namespaces: list[str], name: str) -> int:
    """The gateway namespace of the field namespace of mount `name`: the mount-qualified URI
    when another mount published the field URI first, else the field URI itself."""
    qualified = f"urn:uagate:field:{name}:{FIELD_NS_URI}"
    return namespaces.index(qualified) if qualified in namespaces else namespaces.index(FIELD_NS_URI)


def sessions_of(fs) -> set:
    """The sessions a field server holds now (asyncua keeps them by authentication token)."""
    return set(fs.server.iserver._external_sessions.keys())


async def test_mounts_change_live_through_rest_without_touching_the_other_field_server(
    target: ServerTarget,
) -> None:
    async with field_servers(("a", 100.0), ("b", 1000.0), ("c", 5000.0)) as (fa, fb, fc):
        url = await start_gateway(
            target, gateway_config(field_toml("line1", [fa.url]) + field_toml("line2", [fb.url]))
        )
        target.user_add(OPERATOR[0], "operator", OPERATOR[1])
        status, login = await asyncio.to_thread(
            console_request, target, "POST", "/api/v1/login", {"username": OPERATOR[0], "password": OPERATOR[1]}
        )
        assert status == 200, login
        token = login["token"]
        async with connected(url) as client:
            await wait_connected(client, "line1", target)
            await wait_connected(client, "line2", target)
            namespaces = await read(client, NAMESPACE_ARRAY)
            ns1, ns2 = (ns_of_mount(namespaces, m) for m in ("line1", "line2"))
            one, two = Recorder(), Recorder()
            await subscribe(client, ua.NodeId("Plant.Temperature", ns1), one)
            await subscribe(client, ua.NodeId("Plant.Temperature", ns2), two)
            t0 = time.monotonic()
            await eventually("line1 delivers", lambda: asyncio.sleep(0, one.good_since(t0)), 10)
            await eventually("line2 delivers from b", lambda: asyncio.sleep(0, two.good_since(t0, lambda v: 1000 <= v < 5000)), 10)
            a_sessions = sessions_of(fa)
            assert len(a_sessions) >= 1, "the gateway holds a session on a"

            # 1. line2 removed: its item gets BadNodeIdUnknown once, then nothing.
            change = await rest(target, "DELETE", "/api/v1/fields/line2", None, token)
            assert any(s.startswith("field_servers") for s in change["live"]), change
            assert change["restart"] == [], change
            t1 = time.monotonic()

            async def unknown_seen():
                return [s for t, _, s in two.changes if t >= t1 and s.value == ua.StatusCodes.BadNodeIdUnknown]

            await eventually("BadNodeIdUnknown on the removed mount", unknown_seen, 10)
            await asyncio.sleep(1.5)
            after = [s.value for t, _, s in two.changes if t >= t1]
            # (A value already on its way when the change was made may come first.)
            first = after.index(ua.StatusCodes.BadNodeIdUnknown)
            assert after[first:] == [ua.StatusCodes.BadNodeIdUnknown], after
            refs = await client.get_node(ua.NodeId(ua.ObjectIds.ObjectsFolder)).get_children()
            assert mount("line2") not in [r.nodeid for r in refs]

            # 2. line2 added again on server c: the same northbound item receives c's values.
            change = await rest(target, "POST", "/api/v1/fields", entry("line2", [fc.url]), token)
            assert change["live"] and change["restart"] == [], change
            t2 = time.monotonic()
            await eventually("line2 delivers from c", lambda: asyncio.sleep(0, two.good_since(t2, lambda v: v >= 5000)), 15)
            refs = await client.get_node(ua.NodeId(ua.ObjectIds.ObjectsFolder)).get_children()
            assert mount("line2") in [r.nodeid for r in refs]

            # 3. line2 turned into a hot pair (c, then b): the item carries over, no bad value.
            change = await rest(target, "POST", "/api/v1/fields", entry("line2", [fc.url, fb.url], "hot"), token)
            assert change["live"] and change["restart"] == [], change
            t3 = time.monotonic()
            fields = await rest(target, "GET", "/api/v1/fields", None, token)
            line2 = next(f for f in fields if f["config"]["name"] == "line2")
            assert line2["config"]["redundancy"] == "hot"
            await asyncio.sleep(2.0)
            since = [(v, s) for t, v, s in two.changes if t >= t3]
            assert since and all(s.is_good() for _, s in since), since
            assert any(v >= 5000 for v, _ in since), since

            # line1 was never touched: the same session on a, and its values kept coming.
            assert sessions_of(fa) == a_sessions, "no new session on the untouched field server"
            arrivals = [t for t, _, s in one.changes if t >= t0 and s.is_good()]
            gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
            assert arrivals and arrivals[-1] > t3, "line1 still delivers"
            assert max(gaps) < 2.0, f"line1 paused {max(gaps):.1f}s during the changes"
