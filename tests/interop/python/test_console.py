"""The console listener of a real `uagate run`: HTTPS with the appliance's
own TLS certificate (verified, not ignored), the REST fixed points and
their authentication."""

from __future__ import annotations

import asyncio
import http.client
import urllib.error
import urllib.request

import pytest

from conftest import ServerTarget, console_request

TIMEOUT_S = 10


# The REST helper is shared with the pair tests (conftest.console_request).
_call = console_request


def test_console_serves_the_rest_api_over_verified_tls(server: ServerTarget) -> None:
    status, body = _call(server, "GET", "/api/v1/status")
    assert status == 401, body
    assert body["code"] == "unauthenticated"

    server.user_add("ops", "admin", "correct horse battery")
    status, body = _call(server, "POST", "/api/v1/login", {"username": "ops", "password": "nope nope"})
    assert status == 401 and body["code"] == "bad_credentials", body
    status, body = _call(server, "POST", "/api/v1/login",
                         {"username": "ops", "password": "correct horse battery"})
    assert status == 200, body
    token = body["token"]

    status, body = _call(server, "GET", "/api/v1/status", token=token)
    assert status == 200, body
    assert body["state"] == "running"
    assert 0 <= body["service_level"] <= 255
    assert isinstance(body["sessions"], int)

    # The plan as JSON says what `uagate plan` prints.
    status, stages = _call(server, "GET", "/api/v1/plan", token=token)
    assert status == 200, stages
    printed = server.cli("plan").stdout.splitlines()
    assert [s["line"] for s in stages] == printed


def test_console_refuses_plain_http(server: ServerTarget) -> None:
    assert server.console_url
    plain = server.console_url.replace("https://", "http://") + "api/v1/status"
    # The listener speaks only TLS: a plain request gets no HTTP answer.
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, OSError)):
        urllib.request.urlopen(plain, timeout=TIMEOUT_S)


async def test_console_maintenance_is_seen_by_an_opcua_client(target: ServerTarget, client_cert) -> None:
    """REST maintenance and the OPC UA method share one code path: an asyncua client
    sees ServiceLevel 0 and State Suspended, then Running again."""
    from test_asyncua_client import secure_client
    from test_asyncua_server_state import connected, read_state

    from asyncua import ua

    target.user_add("olivia", "operator", "olivia-pass-4")
    target.trust_client(client_cert.cert_der)
    target.start()
    status, body = _call(target, "POST", "/api/v1/login", {"username": "olivia", "password": "olivia-pass-4"})
    assert status == 200, body
    token = body["token"]
    async with connected(await secure_client(target.url, client_cert)) as client:
        assert await read_state(client) == (255, int(ua.ServerState.Running))
        status, body = _call(target, "POST", "/api/v1/maintenance",
                             {"state": "suspended", "estimated_return_time": "2030-01-01T00:00:00Z",
                              "reason": "firmware"}, token=token)
        assert status == 200, body
        assert await read_state(client) == (0, int(ua.ServerState.Suspended))
        status, body = _call(target, "POST", "/api/v1/maintenance", {"state": "running"}, token=token)
        assert status == 200, body
        assert await read_state(client) == (255, int(ua.ServerState.Running))


async def test_console_lists_and_closes_an_opcua_session(target: ServerTarget, client_cert) -> None:
    """GET /api/v1/sessions shows an asyncua session with its transport, security and user;
    DELETE closes it: the client's next request gets BadSessionIdInvalid."""
    from test_asyncua_client import secure_client
    from test_asyncua_server_state import read_state

    from asyncua import ua

    target.user_add("otto", "operator", "otto-pass-77")
    target.trust_client(client_cert.cert_der)
    target.start()
    status, body = _call(target, "POST", "/api/v1/login", {"username": "otto", "password": "otto-pass-77"})
    assert status == 200, body
    token = body["token"]
    client = await secure_client(target.url, client_cert)
    await asyncio.wait_for(client.connect(), TIMEOUT_S)
    try:
        await read_state(client)
        status, sessions = _call(target, "GET", "/api/v1/sessions", token=token)
        assert status == 200, sessions
        assert len(sessions) == 1, sessions
        s = sessions[0]
        assert s["transport"] == "opc.tcp"
        assert s["security_policy"] == "Basic256Sha256"
        assert s["security_mode"] == "SignAndEncrypt"
        assert s["user"] == "anonymous"
        assert s["owner"], s
        from urllib.parse import quote

        status, body = _call(target, "DELETE", "/api/v1/sessions/" + quote(s["id"], safe=""), token=token)
        assert status == 204 or status == 200, body
        with pytest.raises(ua.UaStatusCodeError) as err:
            await read_state(client)
        assert err.value.code == ua.StatusCodes.BadSessionIdInvalid
        status, sessions = _call(target, "GET", "/api/v1/sessions", token=token)
        assert sessions == []
    finally:
        # The session is gone; closing the channel is all that is left.
        try:
            await asyncio.wait_for(client.disconnect(), TIMEOUT_S)
        except Exception:  # noqa: BLE001 - CloseSession of a closed session may fail
            pass
