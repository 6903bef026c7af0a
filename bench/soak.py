#!/usr/bin/env python3
"""Soak: uagate under mixed load while a fault injector works on its field side.

Driven by bench/run-soak.sh (the one-hour run) and by
tests/soak/test_soak.py (the ten-minute run of CI). Starts
`opcua-ref-server` (Bench.Counter +1 every 100 ms) behind a TCP relay in
this process, and `uagate run` with one field connection ("line1") through
the relay, opc.tcp, the TLS listener (opc.wss + opc.https), the console and a
plain-HTTP metrics listener, all on 127.0.0.1.

Load, for the whole run:
- 2 subscribers, each with one subscription on the local demo counter and on
  the mounted field counter (sampling 50 ms, publishing 100 ms, queue 100);
- a worker session doing Read, Write and Browse every 50 ms;
- session churn: a new session created, used for one Read and closed every
  second;
- `uagate-bench-transports` for 5 s over opc.wss and 5 s over opc.https
  (4 sessions each) every 30 s;
- the console's login page (HTTPS) and /metrics scraped every 10 s.

Faults, one every FAULT_EVERY seconds in turn: the field server is killed and
started again 2 s later; the relay stalls for 10 s (accepts connections and
never answers, holds the ones it has without forwarding); the relay drops
every connection; the gateway's TLS certificate is replaced by a new one
(live reload), and the soak waits for the listener to serve it.

Every 10 s it samples the gateway's RSS, open file descriptors and threads,
and from /metrics the sessions, subscriptions and monitored items, the field
connection's state and shared (southbound) items, and the relay's open
southbound connections. It writes the samples as CSV and one JSON summary
line, and checks, after the warm-up (the first fifth of the run):
- RSS, file descriptors and threads do not grow: the last third's maximum
  stays within 10 % (+ 8 MiB, + 16 fds, + 4 threads) of the middle third's;
- at the end the field connection is connected, at most one southbound
  connection is open, the monitored items and shared items are what they
  were after set-up, and the sessions are the persistent ones (+ churn);
- no notification is lost unreported: the notification messages of each
  subscription carry consecutive sequence numbers, and every missing step
  of the field counter (whose every value reaches the northbound items) is
  preceded by a value with a Bad or Uncertain status (the gateway's gap
  marker). Steps of the local counter are sampled every 50 ms: a host
  stall longer than that may skip one; they are counted, not checked;
- every fault was followed by a Good field value within 30 s, and every new
  TLS certificate was served within 30 s.
Exits 1 when a check fails (the reason is in the summary's "failed").
"""

import argparse
import asyncio
import csv
import datetime
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

from asyncua import Client, ua
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blips import Relay, free_port, start_process  # noqa: E402

REF_NS = "urn:uagate:bench:ref-server"
GW_NS = "urn:uagate:gateway"


class StallingRelay(Relay):
    """A Relay that can also stall: accept and never answer."""

    def __init__(self, target_port):
        super().__init__(target_port)
        self.stalled = False
        self.held = set()

    async def _accept(self, reader, writer):
        if self.stalled:
            self.held.add(writer)
            try:
                while await reader.read(65536):
                    pass
            except (OSError, asyncio.CancelledError):
                pass
            self.held.discard(writer)
            writer.close()
            return
        try:
            await super()._accept(reader, writer)
        except asyncio.CancelledError:
            pass

    def stall(self):
        """Cut the forwarding connections; new ones are accepted and held."""
        self.down()
        self.stalled = True
        self.up = True

    def unstall(self):
        self.stalled = False
        for w in list(self.held):
            try:
                w.transport.abort()
            except Exception:
                pass
        self.held.clear()

    def open_connections(self):
        return len(self.conns) + len(self.held)


class Counter:
    """Values of one monitored counter: gaps, and whether each was marked."""

    def __init__(self, name):
        self.name = name
        self.last_good = None
        self.marked = False  # a Bad/Uncertain value since the last good one
        self.values = 0
        self.markers = 0
        self.gaps = 0
        self.unreported_gaps = 0
        self.restarts = 0
        self.last_good_at = 0.0

    def add(self, value, good):
        if not good:
            self.markers += 1
            self.marked = True
            return
        self.values += 1
        self.last_good_at = time.monotonic()
        if self.last_good is not None and isinstance(value, int):
            if value > self.last_good + 1:
                self.gaps += 1
                if not self.marked:
                    self.unreported_gaps += 1
            elif value <= self.last_good:
                # The field server restarted: its counter starts over.
                self.restarts += 1
        self.last_good = value
        self.marked = False


class Sequence:
    """Sequence numbers of one subscription's notification messages."""

    def __init__(self):
        self.expected = None
        self.messages = 0
        self.keep_alives = 0
        self.gaps = 0

    def add(self, msg):
        if not msg.NotificationData:
            # A keep-alive carries the next sequence number without using it.
            self.keep_alives += 1
            if self.expected is not None and msg.SequenceNumber != self.expected:
                self.gaps += 1
            self.expected = msg.SequenceNumber
            return
        self.messages += 1
        if self.expected is not None and msg.SequenceNumber != self.expected:
            self.gaps += 1
        self.expected = msg.SequenceNumber + 1


def track_sequence(sub):
    """Wraps the client's Publish callback of `sub` to see every
    NotificationMessage (asyncua keeps the callback per subscription id)."""
    seq = Sequence()
    callbacks = sub.server._subscription_callbacks
    orig = callbacks[sub.subscription_id]

    async def callback(result):
        seq.add(result.NotificationMessage)
        r = orig(result)
        if asyncio.iscoroutine(r):
            await r

    callbacks[sub.subscription_id] = callback
    return seq


class Handler:
    def __init__(self, counters):
        self.counters = counters  # node id string -> Counter

    def datachange_notification(self, node, val, data):
        st = data.monitored_item.Value.StatusCode
        good = st is None or st.is_good()
        c = self.counters.get(node.nodeid.to_string())
        if c is not None:
            c.add(val, good)

    def status_change_notification(self, status):
        for c in self.counters.values():
            c.marked = True


def new_tls_pair(data):
    """Writes a new self-signed P-256 certificate for 127.0.0.1 into
    <data>/tls (key first, each through a rename)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "uagate soak")])
    now = datetime.datetime.now(datetime.timezone.utc)
    import ipaddress
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .sign(key, hashes.SHA256()))
    d = os.path.join(data, "tls")
    for fname, blob in (
        ("key.pem", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())),
        ("cert.pem", cert.public_bytes(serialization.Encoding.PEM)),
    ):
        tmp = os.path.join(d, fname + ".new")
        with open(tmp, "wb") as f:
            f.write(blob)
        os.chmod(tmp, 0o600)
        os.replace(tmp, os.path.join(d, fname))
    return cert.fingerprint(hashes.SHA256()).hex()


def proc_sample(pid):
    with open(f"/proc/{pid}/status") as f:
        st = f.read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", st).group(1))
    threads = int(re.search(r"Threads:\s+(\d+)", st).group(1))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds, threads


def metric(text, name, labels=None):
    """Sum of the samples of `name` whose labels include `labels`."""
    total = None
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"^(\w+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        if labels and not all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            continue
        total = (total or 0) + float(m.group(3))
    return total


class Soak:
    def __init__(self, args):
        self.args = args
        self.stop = asyncio.Event()
        self.errors = []
        self.counts = {"reads": 0, "writes": 0, "browses": 0, "churned": 0, "scrapes": 0,
                       "console": 0, "transport_runs": 0, "transport_failures": 0}
        self.faults = []
        self.samples = []
        self.sequences = []

    def error(self, what):
        if len(self.errors) < 50:
            self.errors.append(f"{round(time.monotonic() - self.t0)} s: {what}")

    async def metrics_text(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        return await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())

    async def worker(self):
        c = Client(self.gw_url, timeout=10)
        await c.connect()
        try:
            setpoint = c.get_node(ua.NodeId("Gateway.Demo.Setpoint", self.gw_ns))
            objects = c.get_node(ua.ObjectIds.ObjectsFolder)
            now = c.get_node(ua.ObjectIds.Server_ServerStatus_CurrentTime)
            i = 0
            while not self.stop.is_set():
                i += 1
                try:
                    await now.read_value()
                    self.counts["reads"] += 1
                    await setpoint.write_value(ua.Variant(float(i % 100), ua.VariantType.Double))
                    self.counts["writes"] += 1
                    await objects.get_children()
                    self.counts["browses"] += 1
                except Exception as e:  # noqa: BLE001 - recorded, the run goes on
                    self.error(f"worker: {e!r}")
                await asyncio.sleep(0.05)
        finally:
            await c.disconnect()

    async def churn(self):
        while not self.stop.is_set():
            c = Client(self.gw_url, timeout=10)
            try:
                await c.connect()
                await c.get_node(ua.ObjectIds.Server_ServerStatus_State).read_value()
                await c.disconnect()
                self.counts["churned"] += 1
            except Exception as e:  # noqa: BLE001
                self.error(f"churn: {e!r}")
            await asyncio.sleep(1)

    async def transports(self):
        while not self.stop.is_set():
            for transport, url in (("wss", f"opc.wss://127.0.0.1:{self.tls_port}/"),
                                   ("https", f"opc.https://127.0.0.1:{self.tls_port}/")):
                cmd = [self.args.transports_bench, f"--{transport}-url", url, "--transports", transport,
                       "--sessions", "4", "--secs", "5", "--warmup", "0"]
                p = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.PIPE)
                out, err = await p.communicate()
                self.counts["transport_runs"] += 1
                if p.returncode != 0:
                    self.counts["transport_failures"] += 1
                    self.error(f"{transport} client: {err.decode()[-300:]}")
            try:
                await asyncio.wait_for(self.stop.wait(), 20)
            except asyncio.TimeoutError:
                pass

    async def scrape(self):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        url = f"https://127.0.0.1:{self.console_port}/login"
        while not self.stop.is_set():
            try:
                await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10, context=ctx).read())
                self.counts["console"] += 1
            except Exception as e:  # noqa: BLE001
                self.error(f"console: {e!r}")
            try:
                await asyncio.wait_for(self.stop.wait(), 10)
            except asyncio.TimeoutError:
                pass

    async def sampler(self):
        while not self.stop.is_set():
            await self.sample()
            try:
                await asyncio.wait_for(self.stop.wait(), 10)
            except asyncio.TimeoutError:
                pass

    async def sample(self):
        rss, fds, threads = proc_sample(self.gw.pid)
        try:
            text = await self.metrics_text()
            self.counts["scrapes"] += 1
        except Exception as e:  # noqa: BLE001
            self.error(f"metrics: {e!r}")
            text = ""
        row = {
            "t_s": round(time.monotonic() - self.t0, 1),
            "rss_kib": rss,
            "fds": fds,
            "threads": threads,
            "sessions": metric(text, "uagate_sessions"),
            "subscriptions": metric(text, "uagate_subscriptions"),
            "monitored_items": metric(text, "uagate_monitored_items"),
            "field_connected": metric(text, "uagate_field_connection_state", {"state": "connected"}),
            "field_items": metric(text, "uagate_field_items", {"connection": "line1"}),
            "southbound_connections": self.relay.open_connections(),
            "field_gaps_reported": metric(text, "uagate_field_notification_gaps_total"),
        }
        self.samples.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    async def faults_loop(self):
        kinds = ["restart", "stall", "drop", "tls"]
        n = 0
        while True:
            try:
                await asyncio.wait_for(self.stop.wait(), self.args.fault_every)
                return
            except asyncio.TimeoutError:
                pass
            kind = kinds[n % len(kinds)]
            n += 1
            t = time.monotonic()
            if kind == "restart":
                self.ref.kill()
                self.ref.wait()
                await asyncio.sleep(2)
                self.ref, _ = start_process(self.ref_cmd, self.env)
            elif kind == "stall":
                self.relay.stall()
                await asyncio.sleep(10)
                self.relay.unstall()
            elif kind == "drop":
                self.relay.down()
                self.relay.up = True
            else:
                fingerprint = new_tls_pair(self.data)
            back = time.monotonic()
            fault = {"kind": kind, "at_s": round(t - self.t0, 1), "back_s": round(back - self.t0, 1)}
            self.faults.append(fault)
            if kind == "tls":
                asyncio.ensure_future(self.watch_tls(fault, fingerprint))
            else:
                asyncio.ensure_future(self.watch_recovery(fault, back))

    async def watch_tls(self, record, fingerprint):
        """Records how long the gateway took to serve the new certificate."""
        fault, t = None, time.monotonic()
        while time.monotonic() < t + 30:
            try:
                pem = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", self.tls_port), timeout=5)
                der = ssl.PEM_cert_to_DER_cert(pem)
                if x509.load_der_x509_certificate(der).fingerprint(hashes.SHA256()).hex() == fingerprint:
                    fault = round(time.monotonic() - t, 2)
                    break
            except Exception:  # noqa: BLE001
                pass
            await asyncio.sleep(0.5)
        record["new_certificate_served_after_s"] = fault

    async def watch_recovery(self, fault, back):
        deadline = back + 30
        while time.monotonic() < deadline:
            if self.field.last_good_at > back:
                fault["first_good_after_s"] = round(self.field.last_good_at - back, 2)
                return
            await asyncio.sleep(0.1)
        fault["first_good_after_s"] = None

    async def run(self):
        a = self.args
        tmp = tempfile.mkdtemp(prefix="uagate-soak-")
        self.env = dict(os.environ, RUST_LOG="warn")
        ref_port = free_port()
        self.ref_cmd = [a.ref_server, "--listen", f"127.0.0.1:{ref_port}", "--pki", f"{tmp}/ref-pki",
                        "--counter-ms", "100"]
        self.ref, _ = start_process(self.ref_cmd, self.env)
        self.relay = StallingRelay(ref_port)
        await self.relay.start()
        self.tls_port, self.console_port, self.metrics_port = free_port(), free_port(), free_port()
        conf = f"""[listen]
opc_tcp = "127.0.0.1:0"
tls = "127.0.0.1:{self.tls_port}"
console = "127.0.0.1:{self.console_port}"
metrics = "127.0.0.1:{self.metrics_port}"

[server]
max_session_count = 100
max_channel_count = 103
demo_nodes = true
allow_anonymous_write = true

[[field_servers]]
name = "line1"
endpoints = ["opc.tcp://127.0.0.1:{self.relay.port}/"]
security_mode = "none"
security_policy = "None"
keep_alive_interval = "500ms"
request_timeout = "2s"
session_timeout = "30s"
[field_servers.reconnect]
initial_delay = "100ms"
max_delay = "1s"
jitter = 0.0
"""
        with open(f"{tmp}/uagate.toml", "w") as f:
            f.write(conf)
        self.data = f"{tmp}/data"
        subprocess.run([a.uagate, "--data", self.data, "config", "import", f"{tmp}/uagate.toml"],
                       check=True, stdout=subprocess.DEVNULL, env=self.env)
        self.gw, self.gw_url = start_process([a.uagate, "--data", self.data, "run"], self.env)
        self.t0 = time.monotonic()
        subscribers = []
        try:
            probe = Client(self.gw_url, timeout=10)
            await probe.connect()
            uris = []
            for _ in range(300):
                uris = await probe.get_namespace_array()
                if REF_NS in uris:
                    break
                await asyncio.sleep(0.1)
            if REF_NS not in uris:
                raise RuntimeError("the field connection did not come up in 30 s")
            self.gw_ns, ref_ns = uris.index(GW_NS), uris.index(REF_NS)
            await probe.disconnect()
            local_id = ua.NodeId("Gateway.Demo.Counter", self.gw_ns)
            field_id = ua.NodeId("Bench.Counter", ref_ns)
            self.local = Counter("local")
            self.field = Counter("field")
            self.counters = [self.local, self.field]
            for i in range(2):
                local = self.local if i == 0 else Counter("local2")
                field = self.field if i == 0 else Counter("field2")
                if i:
                    self.counters += [local, field]
                c = Client(self.gw_url, timeout=10)
                await c.connect()
                h = Handler({local_id.to_string(): local, field_id.to_string(): field})
                sub = await c.create_subscription(100, h)
                self.sequences.append(track_sequence(sub))
                # Sampling at twice the counters' rate: a sampled item
                # sees every step of a counter changing every 100 ms.
                await sub.subscribe_data_change([c.get_node(local_id), c.get_node(field_id)],
                                                queuesize=100, sampling_interval=50)
                subscribers.append(c)
            tasks = [asyncio.ensure_future(x) for x in
                     (self.worker(), self.churn(), self.transports(), self.scrape(), self.sampler(),
                      self.faults_loop())]
            await asyncio.sleep(5)
            await self.sample()
            baseline = self.samples[-1]
            await asyncio.sleep(max(0, a.minutes * 60 - (time.monotonic() - self.t0)))
            self.stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            # Let the last fault settle before the final sample.
            await asyncio.sleep(5)
            await self.sample()
        finally:
            for c in subscribers:
                try:
                    await c.disconnect()
                except Exception:  # noqa: BLE001
                    pass
            self.gw.terminate()
            self.ref.terminate()
            self.gw.wait(15)
            self.ref.wait(15)
        return self.summary(baseline)

    def summary(self, baseline):
        s = self.samples
        warm = s[len(s) // 5:]
        third = max(1, len(warm) // 3)
        middle, last = warm[third:2 * third] or warm, warm[-third:]
        failed = []

        def grows(key, slack):
            m, l = max(r[key] for r in middle), max(r[key] for r in last)
            if l > m * 1.10 + slack:
                failed.append(f"{key} grows: middle third max {m}, last third max {l}")

        grows("rss_kib", 8192)
        grows("fds", 16)
        grows("threads", 4)
        end = s[-1]
        if end["field_connected"] != 1:
            failed.append(f"field connection not connected at the end ({end['field_connected']})")
        if end["southbound_connections"] > 1:
            failed.append(f"{end['southbound_connections']} southbound connections open at the end")
        for key in ("monitored_items", "field_items", "subscriptions"):
            if end[key] != baseline[key]:
                failed.append(f"{key}: {baseline[key]} after set-up, {end[key]} at the end")
        # 2 subscribers + the worker (its session ends with the load; + churn in flight).
        if end["sessions"] is None or end["sessions"] > 3:
            failed.append(f"{end['sessions']} sessions at the end, 2 subscribers expected")
        seq_gaps = sum(q.gaps for q in self.sequences)
        if seq_gaps:
            failed.append(f"{seq_gaps} notification sequence number gaps")
        if sum(q.messages for q in self.sequences) == 0:
            failed.append("no notification message arrived")
        # Every field value reaches the northbound items (their samples take
        # all values since the last one), so a step missing there is lost
        # data unless the gateway marked it.
        unreported = sum(c.unreported_gaps for c in self.counters if c.name.startswith("field"))
        if unreported:
            failed.append(f"{unreported} field counter gaps without a gap marker")
        unrecovered = [f for f in self.faults if f["kind"] != "tls" and f.get("first_good_after_s") is None]
        unrecovered += [f for f in self.faults if f["kind"] == "tls" and f.get("new_certificate_served_after_s") is None]
        if unrecovered:
            failed.append(f"no Good field value within 30 s after {unrecovered}")
        if self.counts["transport_failures"]:
            failed.append(f"{self.counts['transport_failures']} wss/https client runs failed")
        return {
            "minutes": self.args.minutes,
            "samples": len(s),
            "baseline": baseline,
            "end": end,
            "rss_kib_min_max_after_warmup": [min(r["rss_kib"] for r in warm), max(r["rss_kib"] for r in warm)],
            "fds_min_max_after_warmup": [min(r["fds"] for r in warm), max(r["fds"] for r in warm)],
            "threads_min_max_after_warmup": [min(r["threads"] for r in warm), max(r["threads"] for r in warm)],
            "counts": self.counts,
            "sequences": [{"messages": q.messages, "keep_alives": q.keep_alives, "gaps": q.gaps}
                          for q in self.sequences],
            "counters": {c.name: {"values": c.values, "gaps": c.gaps, "markers": c.markers,
                                  "unreported_gaps": c.unreported_gaps, "restarts_seen": c.restarts}
                         for c in self.counters},
            "faults": self.faults,
            "errors": self.errors,
            "failed": failed,
        }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--uagate", required=True)
    p.add_argument("--ref-server", required=True)
    p.add_argument("--transports-bench", required=True)
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--fault-every", type=float, default=60, help="seconds between faults")
    p.add_argument("--csv", help="write the samples here")
    args = p.parse_args()
    soak = Soak(args)
    result = asyncio.run(soak.run())
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(soak.samples[0].keys()))
            w.writeheader()
            w.writerows(soak.samples)
    print(json.dumps(result), flush=True)
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
