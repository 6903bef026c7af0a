"""Self-check target for the interop harness: the asyncua package's own example server.

Used only when UAGATE_INTEROP_TARGET=asyncua-server, to prove that the interop tests
(Python and Node) work against an independent, known-good OPC UA server while uagate
itself is not ready. It speaks the same start-up contract as `uagate run`:

    python selfcheck_server.py --dir DIR

generates a server certificate in DIR (so the secure endpoints are offered), picks a
free ephemeral port on 127.0.0.1, runs `asyncua.tools.uaserver` (the example server
shipped with asyncua) in-process, and once the port accepts connections prints exactly
one line `READY opc.tcp=opc.tcp://127.0.0.1:<port>/` on stdout. SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from pathlib import Path

from asyncua.crypto.cert_gen import setup_self_signed_certificate
from asyncua.tools import _uaserver
from cryptography.x509.oid import ExtendedKeyUsageOID

# asyncua's example server always announces this application URI.
SERVER_APP_URI = "urn:freeopcua:python:server"
READY_TIMEOUT_S = 60.0


def free_port() -> int:
    """Ask the kernel for a free ephemeral port on loopback (bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_listening(port: int, server_task: asyncio.Task[None]) -> None:
    """Poll until 127.0.0.1:port accepts a TCP connection (bounded by READY_TIMEOUT_S)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    while loop.time() < deadline:
        if server_task.done():
            raise RuntimeError("example server exited before listening")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2.0)
        except (OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise TimeoutError(f"example server not listening on port {port} after {READY_TIMEOUT_S}s")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True, type=Path, help="directory for the server certificate")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    cert = args.dir / "server-cert.der"
    key = args.dir / "server-key.pem"
    await setup_self_signed_certificate(
        key,
        cert,
        SERVER_APP_URI,
        "localhost",
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        {"commonName": "asyncua example server (uagate self-check)"},
    )
    port = free_port()
    url = f"opc.tcp://127.0.0.1:{port}/"
    sys.argv = ["uaserver", "-u", url, "--certificate", str(cert), "--private_key", str(key), "-v", "ERROR"]
    server_task = asyncio.ensure_future(_uaserver())
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, server_task.cancel)
    await wait_listening(port, server_task)
    print(f"READY opc.tcp={url}", flush=True)
    try:
        await server_task
    except (asyncio.CancelledError, SystemExit):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
