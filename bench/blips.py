#!/usr/bin/env python3
"""Network blips and field server restarts, seen by a northbound subscriber.

A measuring tool, not a test (it asserts nothing). Driven by
bench/run-blips.sh, which passes the binaries.

Starts `opcua-ref-server` (Bench.Counter +1 every COUNTER_MS), a TCP relay in
this process between the gateway and it, and `uagate run` with one field
connection through the relay. An asyncua client subscribes through the
gateway to the counter (sampling = publishing = COUNTER_MS, queue 100).

Scenario `blip`: BLIPS times, the relay cuts every connection and refuses new
ones for DOWN seconds, then forwards again; UP seconds between blips.
Scenario `restart`: the field server is killed and started again on the same
port after DOWN seconds (its counter starts over).
Scenario `expire`: like `blip`, but the field connection is signed and
encrypted with a session timeout of SESSION_TIMEOUT seconds, so an outage
longer than that ends the field session and its subscriptions must move to a
new one (TransferSubscriptions) to lose nothing.

Per event it records: values lost (counter steps missing between two
delivered values; blip only), duplicates (a value not larger than the one
before), gap markers (values with an Uncertain/Bad status) and the time from
the end of the outage (relay forwarding again / server READY) to the first
Good value delivered after it. Prints one JSON line per scenario and a
Markdown row.
"""

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from asyncua import Client, ua


class Relay:
    """Forwards 127.0.0.1:port to the target; `down()` cuts and refuses."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.up = True
        self.conns = set()
        self.server = None
        self.port = None

    async def start(self):
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _accept(self, reader, writer):
        if not self.up:
            writer.close()
            return
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        pair = (writer, uw)
        self.conns.add(pair)

        async def pump(r, w):
            try:
                while True:
                    data = await r.read(65536)
                    if not data:
                        break
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                w.close()

        await asyncio.gather(pump(reader, uw), pump(ur, writer), return_exceptions=True)
        self.conns.discard(pair)

    def down(self):
        self.up = False
        for a, b in list(self.conns):
            for w in (a, b):
                try:
                    w.transport.abort()
                except Exception:
                    pass
        self.conns.clear()


def start_process(cmd, env=None, ready=r"^READY opc.tcp=(\S+)"):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"{cmd[0]} exited before READY")
        m = re.match(ready, line.strip())
        if m:
            return p, m.group(1)
    raise RuntimeError(f"{cmd[0]} not ready in 60 s")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Recorder:
    def __init__(self):
        self.values = []  # (arrival, value or None, good)

    def datachange_notification(self, node, val, data):
        st = data.monitored_item.Value.StatusCode
        good = st is None or st.is_good()
        self.values.append((time.monotonic(), val if good else None, good))


async def run(args):
    tmp = tempfile.mkdtemp(prefix="uagate-blips-")
    ref_port = free_port()
    ref_cmd = [args.ref_server, "--listen", f"127.0.0.1:{ref_port}", "--pki", f"{tmp}/ref-pki",
               "--counter-ms", str(args.counter_ms)]
    env = dict(os.environ, RUST_LOG="warn")
    ref, _ = start_process(ref_cmd, env)
    relay = Relay(ref_port)
    await relay.start()
    relayed = args.scenario in ("blip", "expire")
    field_url = f"opc.tcp://127.0.0.1:{relay.port if relayed else ref_port}/"
    if args.scenario == "expire" and args.field_security == "none":
        # Without signing an anonymous session's subscriptions cannot move:
        # the behaviour of a gateway that does not transfer them.
        security = 'security_mode = "none"\nsecurity_policy = "None"'
        session_timeout = f"{args.session_timeout}s"
    elif args.scenario == "expire":
        security = 'security_mode = "sign_and_encrypt"\nsecurity_policy = "Basic256Sha256"'
        session_timeout = f"{args.session_timeout}s"
    else:
        security = 'security_mode = "none"\nsecurity_policy = "None"'
        session_timeout = "30s"
    conf = f"""[listen]
opc_tcp = "127.0.0.1:0"

[[field_servers]]
name = "line1"
endpoints = ["{field_url}"]
{security}
keep_alive_interval = "500ms"
request_timeout = "2s"
session_timeout = "{session_timeout}"
[field_servers.reconnect]
initial_delay = "100ms"
max_delay = "1s"
jitter = 0.0
"""
    with open(f"{tmp}/uagate.toml", "w") as f:
        f.write(conf)
    subprocess.run([args.uagate, "--data", f"{tmp}/data", "config", "import", f"{tmp}/uagate.toml"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    if args.scenario == "expire":
        # The field server's certificate, trusted by the operator.
        for _ in range(100):
            if os.path.exists(f"{tmp}/ref-pki/own/cert.der"):
                break
            time.sleep(0.05)
        subprocess.run([args.uagate, "--data", f"{tmp}/data", "trust", "add", f"{tmp}/ref-pki/own/cert.der"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    gw, gw_url = start_process([args.uagate, "--data", f"{tmp}/data", "run"], env)
    client = Client(gw_url, timeout=10)
    await client.connect()
    events = []
    try:
        ns = None
        for _ in range(300):
            uris = await client.get_namespace_array()
            if "urn:uagate:bench:ref-server" in uris:
                ns = uris.index("urn:uagate:bench:ref-server")
                break
            await asyncio.sleep(0.1)
        if ns is None:
            raise RuntimeError("the field connection did not come up in 30 s")
        node = client.get_node(ua.NodeId("Bench.Counter", ns))
        # Wait until the field connection serves the node.
        for _ in range(100):
            dv = await node.read_data_value(raise_on_bad_status=False)
            if dv.StatusCode.is_good():
                break
            await asyncio.sleep(0.1)
        rec = Recorder()
        sub = await client.create_subscription(args.counter_ms, rec)
        await sub.subscribe_data_change(node, queuesize=100, sampling_interval=args.counter_ms)
        await asyncio.sleep(args.up)
        for _ in range(args.events):
            start = len(rec.values)
            t_cut = time.monotonic()
            if relayed:
                relay.down()
                await asyncio.sleep(args.down)
                relay.up = True
                t_back = time.monotonic()
            else:
                ref.kill()
                ref.wait()
                await asyncio.sleep(args.down)
                ref, _ = start_process(ref_cmd, env)
                t_back = time.monotonic()
            await asyncio.sleep(args.up)
            window = rec.values[start:]
            first = next((t for (t, v, good) in window if good and t >= t_back), None)
            goods = [v for (_, v, good) in rec.values[max(0, start - 1):] if good]
            lost = dup = 0
            for a, b in zip(goods, goods[1:]):
                if b <= a:
                    dup += 1
                elif b > a + 1:
                    lost += b - a - 1
            events.append({
                "outage_s": round(t_back - t_cut, 3),
                "first_value_after_s": None if first is None else round(first - t_back, 3),
                "lost": lost if relayed else None,
                "duplicates": dup if relayed else None,
                "gap_markers": sum(1 for (_, _, good) in window if not good),
            })
    finally:
        try:
            await client.disconnect()
        except Exception:
            pass
        gw.terminate()
        ref.terminate()
        gw.wait(10)
        ref.wait(10)
    firsts = [e["first_value_after_s"] for e in events if e["first_value_after_s"] is not None]
    summary = {
        "label": args.label,
        "scenario": args.scenario,
        "events": len(events),
        "down_s": args.down,
        "counter_ms": args.counter_ms,
        "values_lost_total": sum(e["lost"] or 0 for e in events),
        "values_lost_per_event": round(sum(e["lost"] or 0 for e in events) / max(1, len(events)), 1),
        "duplicates": sum(e["duplicates"] or 0 for e in events),
        "gap_markers": sum(e["gap_markers"] for e in events),
        "first_value_median_s": round(statistics.median(firsts), 3) if firsts else None,
        "first_value_max_s": round(max(firsts), 3) if firsts else None,
        "no_value_after": len(events) - len(firsts),
        "detail": events,
    }
    print(json.dumps(summary), flush=True)
    print(f"| {args.label} | {args.scenario} | {len(events)} x {args.down} s | "
          f"{summary['values_lost_per_event'] if relayed else '-'} | "
          f"{summary['duplicates'] if relayed else '-'} | {summary['gap_markers']} | "
          f"{summary['first_value_median_s']} | {summary['first_value_max_s']} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--uagate", required=True)
    p.add_argument("--ref-server", required=True)
    p.add_argument("--scenario", choices=["blip", "restart", "expire"], default="blip")
    p.add_argument("--session-timeout", type=float, default=2.0)
    p.add_argument("--field-security", choices=["sign_and_encrypt", "none"], default="sign_and_encrypt")
    p.add_argument("--events", type=int, default=10)
    p.add_argument("--down", type=float, default=2.0)
    p.add_argument("--up", type=float, default=4.0)
    p.add_argument("--counter-ms", type=int, default=100)
    p.add_argument("--label", default="")
    args = p.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
