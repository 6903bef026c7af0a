"""`uagate demo`: a newcomer browses live data at once.

The demo runs two in-process simulated field servers as a hot redundant pair, mounted under
Objects/plant over SignAndEncrypt. An asyncua client checks that the pair is connected, that
the mount shows the simulator's objects and that values are live. The demo keeps its data in
DATA/demo, rebuilt at every start: a change made in its console reaches neither a later
`uagate run` on DATA nor the next demo.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
import urllib.error
import urllib.request

import pytest
from asyncua import Client, ua
from conftest import ServerTarget

pytestmark = pytest.mark.uagate_only

SIM_NS_URI = "urn:uagate:sim"
STATE = ua.NodeId("FieldStatus.plant.State", 2)
MOUNT = ua.NodeId("Field.plant", 2)
WAIT_S = 20.0


async def test_demo_mounts_a_live_hot_pair(target: ServerTarget) -> None:
    url = target.start("demo", "--listen", "127.0.0.1:0")
    client = Client(url, timeout=10)
    async with asyncio.timeout(60):
        await client.connect()
        try:
            deadline = time.monotonic() + WAIT_S
            state = None
            while time.monotonic() < deadline:
                state = await client.get_node(STATE).read_value()
                if state == "Connected":
                    break
                await asyncio.sleep(0.1)
            assert state == "Connected", f"demo field connection: {state}\n{target.log_tail()}"

            children = await client.get_node(MOUNT).get_children()
            names = [(await c.read_browse_name()).Name for c in children]
            assert "Simulation" in names, names
            assert "Server" not in names, names

            ns = await client.get_namespace_index(SIM_NS_URI)
            counter = client.get_node(ua.NodeId("Simulation.Counter", ns))
            first = await counter.read_value()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and await counter.read_value() == first:
                await asyncio.sleep(0.1)
            assert await counter.read_value() != first, "the demo's values are live"
        finally:
            await client.disconnect()
    # The demo's parts trust each other by construction: its start-up warns about nothing
    # (no unknown certificates stored, no missing endpoints, no redundancy mismatch).
    log = re.sub(r"\x1b\[[0-9;]*m", "", target.log_path.read_text(errors="replace"))
    warnings = [line for line in log.splitlines() if " WARN " in line or " ERROR " in line]
    assert warnings == [], "\n".join(warnings)


def demo_box(target: ServerTarget) -> str:
    """The start-up box the demo prints after its PAIR line (bounded wait per line)."""
    _ = target.pair_addr  # reads through the PAIR line
    lines: list[str] = []
    while sum(1 for line in lines if line.startswith("+--")) < 2:
        line = target.next_stdout_line()
        assert line is not None, f"the demo printed no box; so far {lines}\n{target.log_tail()}"
        lines.append(line.rstrip("\n"))
    return "\n".join(lines)


def demo_console(target: ServerTarget, method: str, path: str, body: dict) -> tuple[int, object]:
    """One REST call to the demo's console, verified against the demo's own TLS certificate
    (in DATA/demo)."""
    assert target.console_url
    context = ssl.create_default_context(cafile=str(target.data_dir / "demo" / "tls" / "cert.pem"))
    req = urllib.request.Request(
        target.console_url + path.lstrip("/"), data=json.dumps(body).encode(), method=method
    )
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_demo_leaves_nothing_a_later_run_or_demo_picks_up(target: ServerTarget) -> None:
    """The demo's box names the URLs, the setup code, what to watch and what may be written. An
    admin created in the demo's console exists neither for `uagate run` on the same data
    directory (`user list`) nor in the next demo, which asks for a new setup code."""
    url = target.start("demo", "--listen", "127.0.0.1:0")
    box = demo_box(target)
    assert url in box and str(target.console_url) in box, box
    assert "Simulation/Setpoint" in box and "operator" in box, box
    assert "rebuilt at every demo start" in box, box
    code = re.search(r"setup code ([0-9a-f]{16})", box)
    assert code, box
    status, answer = demo_console(
        target,
        "POST",
        "/api/v1/setup",
        {"code": code.group(1), "username": "demo-admin", "password": "demo admin pass 1"},
    )
    assert status in (200, 201), answer
    target.stop()

    # `uagate run` on the data directory: nothing of the demo.
    assert "demo-admin" not in target.cli("user", "list").stdout

    # The next demo: a clean directory again (no user: a new setup code).
    target.restart("demo", "--listen", "127.0.0.1:0")
    again = demo_box(target)
    second = re.search(r"setup code ([0-9a-f]{16})", again)
    assert second and second.group(1) != code.group(1), again
