"""Fixtures for the Python (asyncua) interop suite.

Every test gets its own temporary data directory and its own server process, started
from here and stopped at teardown. The server under test is chosen with
UAGATE_INTEROP_TARGET:

- `uagate` (default): the binary at $UAGATE_BIN (default target/debug/uagate of this
  repository). The tests never build it; scripts/test.sh does.
- `asyncua-server`: the asyncua package's example server (selfcheck_server.py), used to
  check the harness itself. Tests marked `uagate_only` are skipped in this mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]

TARGET = os.environ.get("UAGATE_INTEROP_TARGET", "uagate")
TARGETS = ("uagate", "asyncua-server")
SELF_CHECK = TARGET == "asyncua-server"
UAGATE_BIN = Path(os.environ.get("UAGATE_BIN", str(REPO_ROOT / "target" / "debug" / "uagate")))

READY_TIMEOUT_S = 60.0
CLI_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
CONSOLE_TIMEOUT_S = 10.0
READY_RE = re.compile(r"^READY opc\.tcp=(opc\.tcp://127\.0\.0\.1:(\d+)/)$")
# uagate's second stdout line: its TLS listener's opc.wss and opc.https URLs.
TLS_RE = re.compile(r"^TLS opc\.wss=(opc\.wss://127\.0\.0\.1:\d+/) opc\.https=(opc\.https://127\.0\.0\.1:\d+/)$")
# uagate's third stdout line: the console (HTTPS, REST API) URL.
CONSOLE_RE = re.compile(r"^CONSOLE (https://127\.0\.0\.1:\d+/)$")
# `run`'s line after CONSOLE (and METRICS, when configured): the pair listener.
PAIR_RE = re.compile(r"^PAIR (127\.0\.0\.1:\d+) FINGERPRINT ([0-9a-f]{64})$")
PAIRING_CODE_RE = re.compile(r"^PAIRING CODE (\S+) FINGERPRINT ([0-9a-f]{64})$")

MINIMAL_CONFIG = """\
[listen]
opc_tcp = "127.0.0.1:0"
[server]
application_name = "uagate-test"
demo_nodes = true
"""


def pytest_configure(config: pytest.Config) -> None:
    if TARGET not in TARGETS:
        raise pytest.UsageError(f"UAGATE_INTEROP_TARGET={TARGET!r}; expected one of {', '.join(TARGETS)}")
    config.addinivalue_line("markers", "uagate_only: needs the uagate CLI (trust/user); skipped in self-check mode")


def pytest_report_header(config: pytest.Config) -> str:
    where = UAGATE_BIN if TARGET == "uagate" else "asyncua example server"
    return f"interop target: {TARGET} ({where})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not SELF_CHECK:
        return
    skip = pytest.mark.skip(reason="uagate-only test (UAGATE_INTEROP_TARGET=asyncua-server)")
    for item in items:
        if "uagate_only" in item.keywords:
            item.add_marker(skip)


@dataclass(frozen=True)
class PairStatus:
    """`uagate pair status`: `role=... leader=... epoch=N applied=N` and more `key=value` fields."""

    fields: dict[str, str]

    @property
    def role(self) -> str:
        return self.fields.get("role", "")

    @property
    def leader(self) -> str:
        return self.fields.get("leader", "")

    @property
    def applied(self) -> int:
        return int(self.fields.get("applied", "0"))

    @classmethod
    def parse(cls, line: str) -> PairStatus:
        fields = dict(word.partition("=")[::2] for word in line.split() if "=" in word)
        assert "role" in fields and "applied" in fields, f"not a pair status line: {line!r}"
        return cls(fields)


@dataclass(frozen=True)
class TrustEntry:
    """One line of `uagate trust list` / `uagate trust rejected`."""

    thumbprint: str
    subject: str
    application_uri: str | None


def free_port() -> int:
    """An ephemeral loopback port free now, for a listener that must keep its port across a
    restart (bind port 0, read the port, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sha1_thumbprint(der: bytes) -> str:
    """The certificate thumbprint as uagate prints it: SHA-1 of the DER bytes, lower-case hex."""
    return hashlib.sha1(der).hexdigest()


def parse_trust_lines(text: str) -> list[TrustEntry]:
    """Parse `<sha1-hex> <subject> <application-uri-or-->` lines (the subject may contain spaces)."""
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        thumb, _, rest = line.partition(" ")
        subject, _, uri = rest.rpartition(" ")
        assert re.fullmatch(r"[0-9a-fA-F]{40}", thumb), f"bad thumbprint in trust line {line!r}"
        entries.append(TrustEntry(thumb.lower(), subject, None if uri == "-" else uri))
    return entries


class ServerTarget:
    """One server under test: a data directory plus (after `start`) a running process.

    The uagate CLI helpers (`user_add`, `trust_*`) work before and after `start`.
    `trust_client` and `user_add` are no-ops for the asyncua example server, which
    accepts every client certificate and every user name.
    """

    def __init__(self, tmp_path: Path) -> None:
        """`tmp_path` holds this server's data directory and log: give each server of a test
        its own (e.g. `tmp_path / "b"`, created here when missing)."""
        self.kind = TARGET
        self.tmp = tmp_path
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.data_dir = tmp_path / "data"
        self.data_dir.mkdir()
        self.log_path = tmp_path / "server.log"
        self.proc: subprocess.Popen[str] | None = None
        self.url: str | None = None
        self.wss_url: str | None = None
        self.https_url: str | None = None
        self.console_url: str | None = None
        self.pair_fingerprint: str | None = None
        self._pair_addr: str | None = None
        self._stdout_lines: queue.Queue[str | None] = queue.Queue()
        if self.kind == "uagate":
            if not UAGATE_BIN.is_file():
                pytest.fail(f"uagate binary not found at {UAGATE_BIN} (build it with `cargo build` or set UAGATE_BIN)")
            config = tmp_path / "uagate.toml"
            config.write_text(MINIMAL_CONFIG)
            self.cli("config", "import", str(config))

    # -- uagate CLI ---------------------------------------------------------------------
    def cli(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `uagate --data DIR ARGS...` with a bounded wait; fail the test on non-zero exit."""
        assert self.kind == "uagate", "the uagate CLI only exists for the uagate target"
        cmd = [str(UAGATE_BIN), "--data", str(self.data_dir), *args]
        done = subprocess.run(
            cmd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
        return done

    def user_add(self, name: str, role: str, password: str) -> None:
        if self.kind == "uagate":
            self.cli("user", "add", name, "--role", role, stdin=password + "\n")

    def trust_add(self, cert_file: Path) -> None:
        self.cli("trust", "add", str(cert_file))

    def trust_list(self) -> list[TrustEntry]:
        return parse_trust_lines(self.cli("trust", "list").stdout)

    def trust_rejected(self) -> list[TrustEntry]:
        return parse_trust_lines(self.cli("trust", "rejected").stdout)

    def trust_client(self, cert_file: Path) -> None:
        """Make the server accept this client certificate (uagate: `trust add`)."""
        if self.kind == "uagate":
            self.trust_add(cert_file)

    # -- uagate pair (needs `run` on the data directory) ---------------------------------
    @property
    def pair_addr(self) -> str:
        """HOST:PORT of the pair listener, from the PAIR line `run` prints after CONSOLE (and
        METRICS); read on first use."""
        assert self.proc is not None, "the pair listener runs with `run`: start the server first"
        while self._pair_addr is None:
            line = self.next_stdout_line()
            if line is None:
                pytest.fail(f"no PAIR line from uagate run\n{self.log_tail()}")
            match = PAIR_RE.match(line)
            if match:
                self._pair_addr, self.pair_fingerprint = match.group(1), match.group(2)
        return self._pair_addr

    def pair_invite(self) -> str:
        """`uagate pair invite`: the one-time pairing code."""
        out = self.cli("pair", "invite").stdout.strip()
        match = PAIRING_CODE_RE.match(out)
        assert match, f"unexpected `pair invite` output: {out!r}"
        return match.group(1)

    def pair_join(self, leader: ServerTarget) -> str:
        """Joins this appliance to `leader`'s pair with a fresh code from `leader`."""
        code = leader.pair_invite()
        out = self.cli("pair", "join", leader.pair_addr, code).stdout.strip()
        assert out.startswith("JOINED "), f"unexpected `pair join` output: {out!r}"
        return out

    def pair_status(self) -> PairStatus:
        return PairStatus.parse(self.cli("pair", "status").stdout.strip())

    # -- process ------------------------------------------------------------------------
    def start(self, *command: str) -> str:
        """Start the server, wait (bounded) for its READY line and return the endpoint URL.

        `command` is the uagate subcommand and its arguments (default `run`)."""
        assert self.proc is None, "already started"
        if self.kind == "uagate":
            cmd = [str(UAGATE_BIN), "--data", str(self.data_dir), *(command or ("run",))]
        else:
            cmd = [sys.executable, str(HERE / "selfcheck_server.py"), "--dir", str(self.data_dir)]
        log = self.log_path.open("a")  # a restart keeps the earlier run's log
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "RUST_BACKTRACE": "1"},
        )
        log.close()
        threading.Thread(target=self._pump_stdout, args=(self.proc, self._stdout_lines), daemon=True).start()
        try:
            line = self._stdout_lines.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            self.stop()
            pytest.fail(f"no READY line within {READY_TIMEOUT_S}s from {' '.join(cmd)}\n{self.log_tail()}")
        if line is None:
            self.stop()
            pytest.fail(f"server exited before READY: {' '.join(cmd)}\n{self.log_tail()}")
        match = READY_RE.match(line)
        if not match:
            self.stop()
            pytest.fail(f"first stdout line is not a READY line: {line!r}\n{self.log_tail()}")
        self.url = match.group(1)
        if self.kind == "uagate":
            try:
                tls_line = self._stdout_lines.get(timeout=READY_TIMEOUT_S)
            except queue.Empty:
                tls_line = None
            tls = TLS_RE.match(tls_line or "")
            if not tls:
                self.stop()
                pytest.fail(f"second stdout line is not the TLS line: {tls_line!r}\n{self.log_tail()}")
            self.wss_url, self.https_url = tls.group(1), tls.group(2)
            if command[:1] in ((), ("run",), ("demo",)):
                try:
                    console_line = self._stdout_lines.get(timeout=READY_TIMEOUT_S)
                except queue.Empty:
                    console_line = None
                console = CONSOLE_RE.match(console_line or "")
                if not console:
                    self.stop()
                    pytest.fail(f"third stdout line is not the CONSOLE line: {console_line!r}\n{self.log_tail()}")
                self.console_url = console.group(1)
        return self.url

    def restart(self, *command: str) -> str:
        """Stops the server (SIGTERM) and starts it again on the same data directory; returns
        the new endpoint URL. Listeners on port 0 get new ports."""
        self.stop()
        self.proc = None
        self.url = self.wss_url = self.https_url = self.console_url = None
        self.pair_fingerprint = self._pair_addr = None
        self._stdout_lines = queue.Queue()
        return self.start(*command)

    def next_stdout_line(self, timeout_s: float = READY_TIMEOUT_S) -> str | None:
        """The next line the server printed after the ones `start` read (e.g. METRICS)."""
        try:
            return self._stdout_lines.get(timeout=timeout_s)
        except queue.Empty:
            return None

    @property
    def tls_cert_file(self) -> Path:
        """The gateway's TLS certificate (self-signed on first start)."""
        return self.data_dir / "tls" / "cert.pem"

    @staticmethod
    def _pump_stdout(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        # Keeps draining stdout after READY so the server never blocks on a full pipe.
        # (The process and queue are this run's: a restart gets new ones.)
        assert proc.stdout is not None
        # The first lines (READY, then uagate's TLS, CONSOLE, when configured METRICS, and
        # PAIR lines, and the demo's start-up box) are handed over.
        handed = 0
        for raw in proc.stdout:
            if handed < 20:
                lines.put(raw.rstrip("\r\n"))
                handed += 1
        if handed < 2:
            lines.put(None)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; idempotent."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL (no shutdown at all), then reap the process; idempotent."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "server log (tail):\n" + "\n".join(text.splitlines()[-lines:])


def console_request(
    target: ServerTarget, method: str, path: str, body: dict | None = None, token: str | None = None
) -> tuple[int, dict | list | None]:
    """One REST call to `target`'s console over HTTPS, verified against the appliance's own
    TLS certificate (self-signed at first start, SAN 127.0.0.1). Returns (status, JSON body)."""
    assert target.console_url, "no CONSOLE line"
    context = ssl.create_default_context(cafile=str(target.tls_cert_file))
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(target.console_url + path.lstrip("/"), data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=CONSOLE_TIMEOUT_S, context=context) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def target(tmp_path: Path) -> Iterator[ServerTarget]:
    """A prepared but not yet started server (own data dir); stopped at teardown."""
    t = ServerTarget(tmp_path)
    try:
        yield t
    finally:
        t.stop()


@pytest.fixture
def server(target: ServerTarget) -> ServerTarget:
    """A started server; `server.url` is its opc.tcp endpoint URL."""
    target.start()
    return target


@dataclass(frozen=True)
class ClientCert:
    """A client application instance certificate generated for one test."""

    app_uri: str
    cert_der: Path
    key_pem: Path

    @property
    def thumbprint(self) -> str:
        return sha1_thumbprint(self.cert_der.read_bytes())


CLIENT_APP_URI = "urn:uagate-interop:python-client"


@pytest.fixture
async def client_cert(tmp_path: Path) -> ClientCert:
    """Self-signed RSA-2048 client certificate whose URI SAN is the client's ApplicationUri."""
    from asyncua.crypto.cert_gen import setup_self_signed_certificate
    from cryptography.x509.oid import ExtendedKeyUsageOID

    pki = tmp_path / "client-pki"
    pki.mkdir()
    cert = pki / "client-cert.der"
    key = pki / "client-key.pem"
    await setup_self_signed_certificate(
        key,
        cert,
        CLIENT_APP_URI,
        "localhost",
        [ExtendedKeyUsageOID.CLIENT_AUTH],
        {"commonName": "uagate-interop-python", "organizationName": "uagate tests"},
    )
    return ClientCert(CLIENT_APP_URI, cert, key)
