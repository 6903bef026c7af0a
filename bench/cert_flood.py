"""A flood of new client certificates against one uagate: how many reach the rejected list and
the change log, and how much the configuration database grows.

Anyone who can reach an OPC UA port can present a new certificate on every connection; the
gateway refuses it as unknown (BadCertificateUntrusted) before any other check. This opens
Basic256Sha256 channels, each with its own self-signed certificate (one RSA key, a new serial
and name each), for `--seconds`, from `--clients` concurrent connectors, then prints:

    FLOOD presented=N listed=L log_entries=E db_growth_bytes=B unlisted_warnings=W seconds=S

Usage: .venv/bin/python bench/cert_flood.py --uagate target/release/uagate [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from asyncua import Client
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

CONFIG = """\
[listen]
opc_tcp = "127.0.0.1:0"
[server]
application_name = "uagate-flood"
"""
READY_RE = re.compile(r"^READY opc\.tcp=(\S+)$")


def certificate(key: rsa.RSAPrivateKey, n: int) -> bytes:
    """A self-signed client certificate of its own (name, serial), DER."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"flood {n}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"urn:flood:{n}")]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def db_bytes(data: Path) -> int:
    total = 0
    for suffix in ("", "-wal"):
        p = data / f"uagate.db{suffix}"
        if p.exists():
            total += p.stat().st_size
    return total


async def flood(url: str, key_pem: Path, key: rsa.RSAPrivateKey, work: Path, seconds: float, clients: int) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    counter = 0

    async def one(worker: int) -> int:
        nonlocal counter
        done = 0
        while loop.time() < deadline:
            counter += 1
            n = counter
            cert = work / f"c{worker}.der"
            cert.write_bytes(certificate(key, n))
            client = Client(url, timeout=5)
            client.application_uri = f"urn:flood:{n}"
            await client.set_security(SecurityPolicyBasic256Sha256, str(cert), str(key_pem))
            try:
                await client.connect()
                await client.disconnect()
            except Exception:  # refused as untrusted: the point
                pass
            done += 1
        return done

    return sum(await asyncio.gather(*(one(i) for i in range(clients))))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--uagate", required=True)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=8)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="uagate-flood."))
    data = work / "data"
    data.mkdir()
    proc = None
    try:
        (work / "uagate.toml").write_text(CONFIG)
        subprocess.run([args.uagate, "--data", str(data), "config", "import", str(work / "uagate.toml")],
                       check=True, capture_output=True, timeout=60)
        log = (work / "uagate.log").open("w")
        proc = subprocess.Popen([args.uagate, "--data", str(data), "run"], stdout=subprocess.PIPE,
                                stderr=log, stdin=subprocess.DEVNULL, text=True)
        lines: list[str] = []
        ready = threading.Event()

        def pump() -> None:
            assert proc is not None and proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.strip())
                if READY_RE.match(line.strip()):
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        ready.wait(30)
        url = next(READY_RE.match(l).group(1) for l in lines if READY_RE.match(l))
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_pem = work / "key.pem"
        key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        before = db_bytes(data)
        presented = asyncio.run(flood(url, key_pem, key, work, args.seconds, args.clients))
        after = db_bytes(data)
        rejected = subprocess.run([args.uagate, "--data", str(data), "trust", "rejected"], check=True,
                                  capture_output=True, text=True, timeout=60).stdout.splitlines()
        proc.terminate()
        proc.wait(timeout=30)
        proc = None
        # The change log's trust.reject entries, from the store itself.
        db = sqlite3.connect(data / "uagate.db")
        entries = db.execute("SELECT COUNT(*) FROM change_log WHERE kind = 'trust.reject'").fetchone()[0]
        db.close()
        unlisted = sum(1 for l in (work / "uagate.log").read_text().splitlines() if "refused without being listed" in l)
        print(f"FLOOD presented={presented} listed={len(rejected)} log_entries={entries} "
              f"db_growth_bytes={after - before} unlisted_warnings={unlisted} seconds={args.seconds:.0f}")
        return 0
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
