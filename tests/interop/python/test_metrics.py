"""Metrics of a real `uagate run` under load: the unauthenticated scrape address,
`promtool check metrics` (Debian package prometheus) on a scrape taken while asyncua
clients keep the gateway busy, and the labels staying bounded (no addresses, owner keys,
user names)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest
from asyncua import ua

from conftest import SELF_CHECK, ServerTarget
from test_asyncua_client import secure_client
from test_asyncua_server_state import connected

pytestmark = pytest.mark.skipif(SELF_CHECK, reason="uagate-only test")

METRICS_RE = re.compile(r"^METRICS (http://127\.0\.0\.1:\d+/metrics)$")
CONFIG = """\
[listen]
opc_tcp = "127.0.0.1:0"
metrics = "127.0.0.1:0"
[server]
application_name = "uagate-metrics"
"""
TIMEOUT_S = 10
CLIENTS = 4
READS_PER_CLIENT = 150


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return resp.read().decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample, or None."""
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


async def test_scrape_under_load_passes_promtool(target: ServerTarget, client_cert, tmp_path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing (scripts/test-setup.sh installs the Debian package prometheus)"
    config = tmp_path / "metrics.toml"
    config.write_text(CONFIG)
    target.cli("config", "import", str(config))
    target.trust_client(client_cert.cert_der)
    target.start()
    line = target.next_stdout_line()
    m = METRICS_RE.match(line or "")
    assert m, f"no METRICS line: {line!r}"
    url = m.group(1)

    stop = asyncio.Event()

    async def load(n: int) -> int:
        done = 0
        async with connected(await secure_client(target.url, client_cert)) as c:
            node = c.get_node(ua.NodeId(ua.ObjectIds.Server_ServerStatus_CurrentTime))
            for _ in range(READS_PER_CLIENT):
                await asyncio.wait_for(node.read_value(), TIMEOUT_S)
                done += 1
                if stop.is_set() and done > 10:
                    break
        return done

    tasks = [asyncio.create_task(load(i)) for i in range(CLIENTS)]
    try:
        # Scrape while the clients are connected and reading.
        deadline = asyncio.get_running_loop().time() + 30
        text = ""
        while asyncio.get_running_loop().time() < deadline:
            text = await asyncio.to_thread(scrape, url)
            if (sample(text, "uagate_sessions") or 0) >= CLIENTS and (
                sample(text, "uagate_requests_total", service="Read", status="Good") or 0
            ) > 0:
                break
            await asyncio.sleep(0.05)
        checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                                 text=True, timeout=30)
        assert checked.returncode == 0, f"promtool: {checked.stdout}{checked.stderr}"
        assert sample(text, "uagate_sessions") >= CLIENTS, text
        assert sample(text, "uagate_connections", transport="opc.tcp") >= CLIENTS
        assert sample(text, "uagate_secure_channels", transport="opc.tcp") >= CLIENTS
        assert sample(text, "uagate_requests_total", service="Read", status="Good") > 0
        assert sample(text, "uagate_request_duration_seconds_count", service="Read") > 0
        assert sample(text, "uagate_request_duration_seconds_bucket", service="Read", le="+Inf") > 0
        assert sample(text, "uagate_service_level") == 255
        assert sample(text, "uagate_server_state", state="running") == 1
        # Bounded labels: no addresses, owner keys or certificate names.
        assert "127.0.0.1" not in text
        assert "uagate-interop" not in text
    finally:
        stop.set()
        done = await asyncio.gather(*tasks)
    assert all(n > 0 for n in done)

    # Only /metrics on the scrape address; the console's /metrics still needs a token.
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/api/v1/status"), timeout=TIMEOUT_S)
    assert e.value.code == 404
    import ssl

    ctx = ssl.create_default_context(cafile=str(target.tls_cert_file))
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(target.console_url + "metrics", timeout=TIMEOUT_S, context=ctx)
    assert e.value.code == 401
