"""OPC UA side of the console browser test, with Python asyncua.

    uaclient.py gen DIR         make a client certificate (cert.der, key.pem) in DIR
    uaclient.py read URL DIR    connect (Basic256Sha256, SignAndEncrypt) with that
                                certificate, print {"service_level", "state"} as JSON;
                                on failure print {"error"} and exit 1
    uaclient.py hold URL DIR S  connect the same way under a long client name, print
                                {"connected": true}, keep the session S seconds (or until
                                stdin closes or the process is ended), then disconnect

Every network step is bounded, so the calling test never hangs."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256

APP_URI = "urn:uagate-browser-test:asyncua"
TIMEOUT_S = 10


async def gen(directory: Path) -> None:
    from asyncua.crypto.cert_gen import setup_self_signed_certificate
    from cryptography.x509.oid import ExtendedKeyUsageOID

    directory.mkdir(parents=True, exist_ok=True)
    await setup_self_signed_certificate(
        directory / "key.pem",
        directory / "cert.der",
        APP_URI,
        "localhost",
        [ExtendedKeyUsageOID.CLIENT_AUTH],
        {"commonName": "uagate-browser-test", "organizationName": "uagate tests"},
    )
    print(json.dumps({"cert": str(directory / "cert.der")}))


async def connect(url: str, directory: Path, name: str) -> Client:
    """A session with the client certificate of DIR; raises on failure."""
    client = Client(url, timeout=TIMEOUT_S)
    client.application_uri = APP_URI
    client.name = name
    # The session's name (what the Sessions page shows) is made from the description.
    client.description = name
    await asyncio.wait_for(
        client.set_security(
            SecurityPolicyBasic256Sha256,
            str(directory / "cert.der"),
            str(directory / "key.pem"),
            mode=ua.MessageSecurityMode.SignAndEncrypt,
        ),
        TIMEOUT_S,
    )
    await asyncio.wait_for(client.connect(), TIMEOUT_S)
    return client


async def hold(url: str, directory: Path, seconds: float) -> int:
    try:
        client = await connect(
            url, directory, "Line 3 packaging hall north, operator station HMI-07 (asyncua)"
        )
    except Exception as e:  # noqa: BLE001 - reported to the test as data
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    print(json.dumps({"connected": True}), flush=True)
    try:
        await asyncio.sleep(seconds)
    finally:
        await asyncio.wait_for(client.disconnect(), TIMEOUT_S)
    return 0


async def read(url: str, directory: Path) -> int:
    client = Client(url, timeout=TIMEOUT_S)
    client.application_uri = APP_URI
    client.name = "uagate browser test (asyncua)"
    try:
        await asyncio.wait_for(
            client.set_security(
                SecurityPolicyBasic256Sha256,
                str(directory / "cert.der"),
                str(directory / "key.pem"),
                mode=ua.MessageSecurityMode.SignAndEncrypt,
            ),
            TIMEOUT_S,
        )
        await asyncio.wait_for(client.connect(), TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - reported to the test as data
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    try:
        level = await asyncio.wait_for(
            client.get_node(ua.NodeId(ua.ObjectIds.Server_ServiceLevel)).read_value(), TIMEOUT_S
        )
        state = await asyncio.wait_for(
            client.get_node(ua.NodeId(ua.ObjectIds.Server_ServerStatus_State)).read_value(), TIMEOUT_S
        )
        print(json.dumps({"service_level": int(level), "state": int(state)}))
        return 0
    finally:
        await asyncio.wait_for(client.disconnect(), TIMEOUT_S)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "gen":
        asyncio.run(gen(Path(sys.argv[2])))
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "read":
        return asyncio.run(read(sys.argv[2], Path(sys.argv[3])))
    if len(sys.argv) == 5 and sys.argv[1] == "hold":
        return asyncio.run(hold(sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
