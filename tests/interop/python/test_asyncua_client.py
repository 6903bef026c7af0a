"""uagate as seen by an independent OPC UA stack: the Python asyncua client.

Each test starts its own server (see conftest.py); every network wait is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import datetime, timedelta, timezone
from typing import TypeVar

import pytest
from asyncua import Client, ua
from asyncua.crypto import security_policies as sp
from conftest import SELF_CHECK, ClientCert, ServerTarget

T = TypeVar("T")

STEP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0
CLOCK_TOLERANCE = timedelta(seconds=30)

NONE_URI = "http://opcfoundation.org/UA/SecurityPolicy#None"
BASIC256SHA256_URI = "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256"
AES128_URI = "http://opcfoundation.org/UA/SecurityPolicy#Aes128_Sha256_RsaOaep"
AES256_URI = "http://opcfoundation.org/UA/SecurityPolicy#Aes256_Sha256_RsaPss"

TCP_PROFILE = "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary"
WSS_PROFILE = "http://opcfoundation.org/UA-Profile/Transport/wss-uasc-uabinary"
HTTPS_PROFILE = "http://opcfoundation.org/UA-Profile/Transport/https-uabinary"

MODE = ua.MessageSecurityMode
EXPECTED_ENDPOINTS = {
    (NONE_URI, MODE.None_),
    (BASIC256SHA256_URI, MODE.Sign),
    (BASIC256SHA256_URI, MODE.SignAndEncrypt),
    (AES128_URI, MODE.Sign),
    (AES128_URI, MODE.SignAndEncrypt),
    (AES256_URI, MODE.Sign),
    (AES256_URI, MODE.SignAndEncrypt),
}
SECURE_POLICIES = {
    BASIC256SHA256_URI: sp.SecurityPolicyBasic256Sha256,
    AES128_URI: sp.SecurityPolicyAes128Sha256RsaOaep,
    AES256_URI: sp.SecurityPolicyAes256Sha256RsaPss,
}

SERVER = ua.NodeId(ua.ObjectIds.Server)
SERVER_STATUS = ua.NodeId(ua.ObjectIds.Server_ServerStatus)
SERVER_STATUS_CURRENT_TIME = ua.NodeId(ua.ObjectIds.Server_ServerStatus_CurrentTime)


async def bounded(aw: Awaitable[T], seconds: float = STEP_TIMEOUT_S) -> T:
    """Await with a hard upper bound so a silent server fails the test instead of hanging it."""
    return await asyncio.wait_for(aw, seconds)


def status_name(exc: BaseException) -> str:
    """Symbolic name of the OPC UA status carried by an asyncua exception."""
    assert isinstance(exc, ua.UaStatusCodeError), f"expected an OPC UA status error, got {exc!r}"
    return ua.status_codes.get_name_and_doc(exc.code)[0]


def as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def assert_close_to_now(value: datetime, what: str) -> None:
    now = datetime.now(timezone.utc)
    assert abs(as_utc(value) - now) < CLOCK_TOLERANCE, f"{what}={value!r} is not close to now ({now})"


async def secure_client(
    url: str,
    cert: ClientCert,
    policy_uri: str = BASIC256SHA256_URI,
    mode: ua.MessageSecurityMode = MODE.SignAndEncrypt,
    user: tuple[str, str] | None = None,
) -> Client:
    """A not-yet-connected client using `cert` on the given policy/mode (and optional UserName token)."""
    client = Client(url, timeout=REQUEST_TIMEOUT_S)
    client.application_uri = cert.app_uri
    client.name = "uagate interop (asyncua)"
    await bounded(client.set_security(SECURE_POLICIES[policy_uri], str(cert.cert_der), str(cert.key_pem), mode=mode))
    if user is not None:
        client.set_user(user[0])
        client.set_password(user[1])
    return client


async def read_status(client: Client) -> ua.ServerStatusDataType:
    status = await bounded(client.get_node(SERVER_STATUS).read_value())
    assert isinstance(status, ua.ServerStatusDataType), f"ServerStatus value has type {type(status)}"
    return status


async def test_get_endpoints_lists_every_policy(server: ServerTarget) -> None:
    client = Client(server.url, timeout=REQUEST_TIMEOUT_S)
    all_endpoints = await bounded(client.connect_and_get_server_endpoints())
    # uagate also lists its opc.wss and opc.https endpoints (discovery on any
    # transport shows all three); the policy checks below are about opc.tcp.
    endpoints = [ep for ep in all_endpoints if ep.TransportProfileUri == TCP_PROFILE]
    if not SELF_CHECK:
        by_profile = {}
        for ep in all_endpoints:
            by_profile.setdefault(ep.TransportProfileUri, []).append(ep)
        assert set(by_profile) == {TCP_PROFILE, WSS_PROFILE, HTTPS_PROFILE}, set(by_profile)
        assert {(ep.SecurityPolicyUri, ep.SecurityMode) for ep in by_profile[WSS_PROFILE]} == EXPECTED_ENDPOINTS
        assert all(ep.EndpointUrl.startswith("opc.wss://") for ep in by_profile[WSS_PROFILE])
        (https_ep,) = by_profile[HTTPS_PROFILE]
        assert https_ep.EndpointUrl.startswith("opc.https://"), https_ep.EndpointUrl
        assert (https_ep.SecurityPolicyUri, https_ep.SecurityMode) == (NONE_URI, MODE.None_)

    offered = {(ep.SecurityPolicyUri, ep.SecurityMode) for ep in endpoints}
    assert offered == EXPECTED_ENDPOINTS

    token_types = set()
    for ep in endpoints:
        assert ep.EndpointUrl.startswith("opc.tcp://"), ep.EndpointUrl
        token_types.update(tok.TokenType for tok in ep.UserIdentityTokens)
        if ep.SecurityMode != MODE.None_:
            assert ep.ServerCertificate, f"{ep.SecurityPolicyUri} {ep.SecurityMode} has no server certificate"
    assert {ua.UserTokenType.Anonymous, ua.UserTokenType.UserName, ua.UserTokenType.Certificate} <= token_types

    (b256_sae,) = [ep for ep in endpoints if (ep.SecurityPolicyUri, ep.SecurityMode) == (BASIC256SHA256_URI, MODE.SignAndEncrypt)]
    assert ua.UserTokenType.UserName in {tok.TokenType for tok in b256_sae.UserIdentityTokens}
    (none_ep,) = [ep for ep in endpoints if ep.SecurityMode == MODE.None_]
    assert ua.UserTokenType.Anonymous in {tok.TokenType for tok in none_ep.UserIdentityTokens}


async def test_anonymous_browse_and_read_server_status(server: ServerTarget) -> None:
    client = Client(server.url, timeout=REQUEST_TIMEOUT_S)
    await bounded(client.connect())
    try:
        children = await bounded(client.nodes.objects.get_children())
        named = [
            ((await bounded(child.read_browse_name())).to_string(), child.nodeid.NamespaceIndex, child.nodeid.Identifier)
            for child in children
        ]
        assert ("0:Server", 0, ua.ObjectIds.Server) in named, f"Objects children: {named}"

        status = await read_status(client)
        assert status.State == ua.ServerState.Running
        assert_close_to_now(status.CurrentTime, "ServerStatus.CurrentTime")
        assert_close_to_now(status.StartTime, "ServerStatus.StartTime")
        assert status.StartTime <= status.CurrentTime

        current_time = await bounded(client.get_node(SERVER_STATUS_CURRENT_TIME).read_value())
        assert isinstance(current_time, datetime)
        assert_close_to_now(current_time, "ServerStatus_CurrentTime")
    finally:
        await bounded(client.disconnect())


async def test_read_server_attributes(server: ServerTarget) -> None:
    client = Client(server.url, timeout=REQUEST_TIMEOUT_S)
    await bounded(client.connect())
    try:
        node = client.get_node(SERVER)
        assert await bounded(node.read_browse_name()) == ua.QualifiedName("Server", 0)
        assert (await bounded(node.read_display_name())).Text == "Server"
        assert await bounded(node.read_node_class()) == ua.NodeClass.Object
        # The same three attributes in one Read request, checking each result's status.
        results = await bounded(
            node.read_attributes([ua.AttributeIds.BrowseName, ua.AttributeIds.DisplayName, ua.AttributeIds.NodeClass])
        )
        assert all(dv.StatusCode.is_good() for dv in results), [dv.StatusCode for dv in results]
        assert results[0].Value.Value == ua.QualifiedName("Server", 0)
        assert results[1].Value.Value.Text == "Server"
        assert results[2].Value.Value == ua.NodeClass.Object
        # An attribute a Object node does not have is a per-attribute error, not a failed request.
        (bad,) = await bounded(node.read_attributes([ua.AttributeIds.Value]))
        assert ua.status_codes.get_name_and_doc(bad.StatusCode.value)[0] == "BadAttributeIdInvalid"
    finally:
        await bounded(client.disconnect())


@pytest.mark.parametrize(
    ("policy_uri", "mode"),
    sorted((p, m) for p, m in EXPECTED_ENDPOINTS if m != MODE.None_),
    ids=lambda v: v.rsplit("#", 1)[-1] if isinstance(v, str) else v.name,
)
async def test_secure_channel_with_trusted_cert(
    server: ServerTarget, client_cert: ClientCert, policy_uri: str, mode: ua.MessageSecurityMode
) -> None:
    server.trust_client(client_cert.cert_der)
    client = await secure_client(server.url, client_cert, policy_uri, mode)
    await bounded(client.connect())
    try:
        assert (await read_status(client)).State == ua.ServerState.Running
        assert await bounded(client.get_node(SERVER).read_node_class()) == ua.NodeClass.Object
    finally:
        await bounded(client.disconnect())


async def test_username_over_sign_and_encrypt(target: ServerTarget, client_cert: ClientCert) -> None:
    # Trusted and created while the server is stopped: both must survive into `run`.
    target.user_add("bob", "viewer", "bob-secret-1")
    target.trust_client(client_cert.cert_der)
    target.start()
    client = await secure_client(target.url, client_cert, user=("bob", "bob-secret-1"))
    await bounded(client.connect())
    try:
        assert (await read_status(client)).State == ua.ServerState.Running
    finally:
        await bounded(client.disconnect())


@pytest.mark.uagate_only
async def test_untrusted_cert_is_rejected_until_trusted(target: ServerTarget, client_cert: ClientCert) -> None:
    target.user_add("alice", "operator", "alice-pass-7")
    target.start()
    assert client_cert.thumbprint not in {e.thumbprint for e in target.trust_list()}

    client = await secure_client(target.url, client_cert, user=("alice", "alice-pass-7"))
    with pytest.raises(ua.UaStatusCodeError) as refused:
        await bounded(client.connect())
    assert status_name(refused.value) == "BadCertificateUntrusted"

    rejected = {e.thumbprint: e for e in target.trust_rejected()}
    assert client_cert.thumbprint in rejected, f"trust rejected: {list(rejected)}"
    assert rejected[client_cert.thumbprint].application_uri == client_cert.app_uri

    target.trust_add(client_cert.cert_der)
    assert client_cert.thumbprint in {e.thumbprint for e in target.trust_list()}

    # Same running process: the trust decision must apply without a restart.
    client = await secure_client(target.url, client_cert, user=("alice", "alice-pass-7"))
    await bounded(client.connect())
    try:
        assert (await read_status(client)).State == ua.ServerState.Running
        node = client.get_node(SERVER)
        assert await bounded(node.read_browse_name()) == ua.QualifiedName("Server", 0)
        assert (await bounded(node.read_display_name())).Text == "Server"
        assert await bounded(node.read_node_class()) == ua.NodeClass.Object
    finally:
        await bounded(client.disconnect())


@pytest.mark.uagate_only
async def test_wrong_password_is_denied(target: ServerTarget, client_cert: ClientCert) -> None:
    target.user_add("carol", "admin", "carol-right-pw")
    target.trust_add(client_cert.cert_der)
    target.start()

    client = await secure_client(target.url, client_cert, user=("carol", "not-the-password"))
    with pytest.raises(ua.UaStatusCodeError) as denied:
        await bounded(client.connect())
    assert status_name(denied.value) == "BadUserAccessDenied"

    client = await secure_client(target.url, client_cert, user=("nobody", "carol-right-pw"))
    with pytest.raises(ua.UaStatusCodeError) as unknown:
        await bounded(client.connect())
    assert status_name(unknown.value) == "BadUserAccessDenied"

    # The right password on the same channel set-up works, so the refusals were about the password.
    client = await secure_client(target.url, client_cert, user=("carol", "carol-right-pw"))
    await bounded(client.connect())
    try:
        assert (await read_status(client)).State == ua.ServerState.Running
    finally:
        await bounded(client.disconnect())
