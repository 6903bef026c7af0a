// uagate as seen by an independent OPC UA stack: the node-opcua client (node:test).
// Each test starts its own server with its own data dir (harness.mjs); every wait is bounded.

import assert from "node:assert/strict";
import path from "node:path";
import { describe, test } from "node:test";

import opcua from "node-opcua";

import {
  SELF_CHECK,
  SKIP_UAGATE_ONLY,
  NODE_APP_URI,
  bounded,
  createClientCertificate,
  makeClient,
  statusNamesOf,
  thumbprintOfPem,
  withServer,
} from "./harness.mjs";

const { AttributeIds, MessageSecurityMode, NodeClass, SecurityPolicy, ServerState, UserTokenType, resolveNodeId } = opcua;

const TEST_TIMEOUT_MS = 180_000;
const CLOCK_TOLERANCE_MS = 30_000;

const P = {
  None: "http://opcfoundation.org/UA/SecurityPolicy#None",
  Basic256Sha256: "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256",
  Aes128_Sha256_RsaOaep: "http://opcfoundation.org/UA/SecurityPolicy#Aes128_Sha256_RsaOaep",
  Aes256_Sha256_RsaPss: "http://opcfoundation.org/UA/SecurityPolicy#Aes256_Sha256_RsaPss",
};
const M = MessageSecurityMode;
const TCP_PROFILE = "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary";
const WSS_PROFILE = "http://opcfoundation.org/UA-Profile/Transport/wss-uasc-uabinary";
const HTTPS_PROFILE = "http://opcfoundation.org/UA-Profile/Transport/https-uabinary";
const EXPECTED_ENDPOINTS = [
  [P.None, M.None],
  [P.Basic256Sha256, M.Sign],
  [P.Basic256Sha256, M.SignAndEncrypt],
  [P.Aes128_Sha256_RsaOaep, M.Sign],
  [P.Aes128_Sha256_RsaOaep, M.SignAndEncrypt],
  [P.Aes256_Sha256_RsaPss, M.Sign],
  [P.Aes256_Sha256_RsaPss, M.SignAndEncrypt],
];
const key = (policy, mode) => `${policy} ${M[mode]}`;

const SERVER = "ns=0;i=2253";
const SERVER_STATUS = "ns=0;i=2256";
const SERVER_STATUS_CURRENT_TIME = "ns=0;i=2258";

const pkiOf = (target) => path.join(target.tmp, "client-pki");

function assertCloseToNow(date, what) {
  assert.ok(date instanceof Date, `${what} is not a Date: ${date}`);
  const skew = Math.abs(date.getTime() - Date.now());
  assert.ok(skew < CLOCK_TOLERANCE_MS, `${what}=${date.toISOString()} is ${skew} ms away from now`);
}

/** Connect `client` to `url`, open a session with `identity`, run fn(session), always tear down. */
async function withSession(client, url, identity, fn) {
  await bounded(client.connect(url), "connect");
  try {
    const session = await bounded(client.createSession(identity), "createSession");
    try {
      return await fn(session);
    } finally {
      await bounded(session.close(), "session close");
    }
  } finally {
    await bounded(client.disconnect(), "disconnect");
  }
}

async function readServerStatus(session) {
  const dv = await bounded(session.read({ nodeId: SERVER_STATUS, attributeId: AttributeIds.Value }), "read ServerStatus");
  assert.equal(dv.statusCode.name, "Good");
  return dv.value.value;
}

async function assertServerAttributes(session) {
  const dvs = await bounded(
    session.read([
      { nodeId: SERVER, attributeId: AttributeIds.BrowseName },
      { nodeId: SERVER, attributeId: AttributeIds.DisplayName },
      { nodeId: SERVER, attributeId: AttributeIds.NodeClass },
    ]),
    "read Server attributes",
  );
  assert.deepEqual(
    dvs.map((dv) => dv.statusCode.name),
    ["Good", "Good", "Good"],
  );
  assert.equal(dvs[0].value.value.namespaceIndex, 0);
  assert.equal(dvs[0].value.value.name, "Server");
  assert.equal(dvs[1].value.value.text, "Server");
  assert.equal(dvs[2].value.value, NodeClass.Object);
}

/** Assert that `promise` rejects and that the rejection carries the OPC UA status `name`. */
async function assertRejectsWithStatus(promise, name, client) {
  let error = null;
  try {
    await promise;
  } catch (err) {
    error = err;
  }
  assert.ok(error, `expected ${name}, but the call succeeded`);
  const names = statusNamesOf(error, client);
  assert.ok(names.includes(name), `expected ${name}; error carried [${names}]: ${error.message}`);
}

describe("node-opcua client against the server under test", { timeout: TEST_TIMEOUT_MS }, () => {
  test("GetEndpoints lists every security policy and mode", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(async (target) => {
      const client = makeClient(pkiOf(target));
      await bounded(client.connect(target.url), "connect");
      let endpoints;
      try {
        endpoints = await bounded(client.getEndpoints(), "getEndpoints");
      } finally {
        await bounded(client.disconnect(), "disconnect");
      }
      // uagate lists its opc.wss and opc.https endpoints too; the policy
      // checks below are about opc.tcp.
      const all = endpoints;
      endpoints = all.filter((ep) => ep.transportProfileUri === TCP_PROFILE);
      if (!SELF_CHECK) {
        const profiles = new Set(all.map((ep) => ep.transportProfileUri));
        assert.deepEqual([...profiles].sort(), [HTTPS_PROFILE, TCP_PROFILE, WSS_PROFILE].sort());
        for (const ep of all.filter((e) => e.transportProfileUri === WSS_PROFILE)) assert.match(ep.endpointUrl, /^opc\.wss:\/\//);
        const https = all.filter((e) => e.transportProfileUri === HTTPS_PROFILE);
        assert.equal(https.length, 1);
        assert.match(https[0].endpointUrl, /^opc\.https:\/\//);
      }
      const offered = endpoints.map((ep) => key(ep.securityPolicyUri, ep.securityMode)).sort();
      assert.deepEqual(offered, EXPECTED_ENDPOINTS.map(([p, m]) => key(p, m)).sort());

      const tokenTypes = new Set();
      for (const ep of endpoints) {
        assert.match(ep.endpointUrl, /^opc\.tcp:\/\//);
        for (const tok of ep.userIdentityTokens ?? []) tokenTypes.add(tok.tokenType);
        if (ep.securityMode !== M.None) {
          assert.ok(ep.serverCertificate?.length > 0, `${key(ep.securityPolicyUri, ep.securityMode)} has no certificate`);
        }
      }
      for (const t of [UserTokenType.Anonymous, UserTokenType.UserName, UserTokenType.Certificate]) {
        assert.ok(tokenTypes.has(t), `no endpoint offers user token ${UserTokenType[t]}`);
      }
      const b256 = endpoints.find((ep) => ep.securityPolicyUri === P.Basic256Sha256 && ep.securityMode === M.SignAndEncrypt);
      assert.ok(b256.userIdentityTokens.some((tok) => tok.tokenType === UserTokenType.UserName));
      const none = endpoints.find((ep) => ep.securityMode === M.None);
      assert.ok(none.userIdentityTokens.some((tok) => tok.tokenType === UserTokenType.Anonymous));
    }));

  test("None/Anonymous: browse Objects finds Server, ServerStatus is Running and current", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(async (target) => {
      await withSession(makeClient(pkiOf(target)), target.url, { type: UserTokenType.Anonymous }, async (session) => {
        const browsed = await bounded(session.browse(resolveNodeId("ObjectsFolder").toString()), "browse Objects");
        assert.equal(browsed.statusCode.name, "Good");
        const server = browsed.references.find((r) => r.browseName.name === "Server");
        assert.ok(server, `Objects children: ${browsed.references.map((r) => r.browseName.toString())}`);
        assert.equal(server.browseName.namespaceIndex, 0);
        assert.equal(server.nodeId.toString(), SERVER);

        const status = await readServerStatus(session);
        assert.equal(status.state, ServerState.Running);
        assertCloseToNow(status.currentTime, "ServerStatus.CurrentTime");
        assertCloseToNow(status.startTime, "ServerStatus.StartTime");
        assert.ok(status.startTime <= status.currentTime);

        const dv = await bounded(
          session.read({ nodeId: SERVER_STATUS_CURRENT_TIME, attributeId: AttributeIds.Value }),
          "read CurrentTime",
        );
        assert.equal(dv.statusCode.name, "Good");
        assertCloseToNow(dv.value.value, "ServerStatus_CurrentTime");
      });
    }));

  test("None/Anonymous: BrowseName, DisplayName and NodeClass of Server", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(async (target) => {
      await withSession(makeClient(pkiOf(target)), target.url, { type: UserTokenType.Anonymous }, async (session) => {
        await assertServerAttributes(session);
        const [bad] = await bounded(session.read([{ nodeId: SERVER, attributeId: AttributeIds.Value }]), "read Value");
        assert.equal(bad.statusCode.name, "BadAttributeIdInvalid");
      });
    }));

  for (const [policyUri, mode] of EXPECTED_ENDPOINTS.filter(([, m]) => m !== M.None)) {
    const policyName = policyUri.split("#")[1];
    test(`secure channel ${policyName} ${M[mode]} with a trusted client certificate`, { timeout: TEST_TIMEOUT_MS }, () =>
      withServer(async (target) => {
        const certFile = await createClientCertificate(pkiOf(target));
        await target.trustClient(certFile);
        const client = makeClient(pkiOf(target), { securityMode: mode, securityPolicy: SecurityPolicy[policyName] });
        await withSession(client, target.url, { type: UserTokenType.Anonymous }, async (session) => {
          assert.equal((await readServerStatus(session)).state, ServerState.Running);
        });
      }));
  }

  test("UserName over Basic256Sha256 SignAndEncrypt (user and trust set up before run)", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(
      async (target) => {
        await target.userAdd("dave", "viewer", "dave-secret-2");
        const certFile = await createClientCertificate(pkiOf(target));
        await target.trustClient(certFile);
        await target.start();
        const client = makeClient(pkiOf(target), {
          securityMode: M.SignAndEncrypt,
          securityPolicy: SecurityPolicy.Basic256Sha256,
        });
        const identity = { type: UserTokenType.UserName, userName: "dave", password: "dave-secret-2" };
        await withSession(client, target.url, identity, async (session) => {
          assert.equal((await readServerStatus(session)).state, ServerState.Running);
        });
      },
      { start: false },
    ));

  test("unknown client certificate: BadCertificateUntrusted, listed as rejected, works after trust add", {
    timeout: TEST_TIMEOUT_MS,
    skip: SKIP_UAGATE_ONLY,
  }, () =>
    withServer(
      async (target) => {
        await target.userAdd("erin", "operator", "erin-pass-3");
        const certFile = await createClientCertificate(pkiOf(target));
        const thumbprint = thumbprintOfPem(certFile);
        await target.start();
        assert.ok(!(await target.trustList()).some((e) => e.thumbprint === thumbprint));

        const secure = { securityMode: M.SignAndEncrypt, securityPolicy: SecurityPolicy.Basic256Sha256 };
        const identity = { type: UserTokenType.UserName, userName: "erin", password: "erin-pass-3" };
        // The refusal may come on OpenSecureChannel or on CreateSession; either must carry the status.
        const refused = makeClient(pkiOf(target), secure);
        const attempt = async () => {
          await bounded(refused.connect(target.url), "connect (untrusted)");
          const session = await bounded(refused.createSession(identity), "createSession (untrusted)");
          await bounded(session.close(), "session close");
        };
        try {
          await assertRejectsWithStatus(attempt(), "BadCertificateUntrusted", refused);
        } finally {
          await bounded(refused.disconnect(), "disconnect");
        }

        const rejected = await target.trustRejected();
        const entry = rejected.find((e) => e.thumbprint === thumbprint);
        assert.ok(entry, `trust rejected does not list ${thumbprint}: ${JSON.stringify(rejected)}`);
        assert.equal(entry.applicationUri, NODE_APP_URI);

        // PEM file straight from node-opcua's PKI; the running server must pick it up without restart.
        await target.trustAdd(certFile);
        assert.ok((await target.trustList()).some((e) => e.thumbprint === thumbprint));
        await withSession(makeClient(pkiOf(target), secure), target.url, identity, async (session) => {
          assert.equal((await readServerStatus(session)).state, ServerState.Running);
          await assertServerAttributes(session);
        });
      },
      { start: false },
    ));

  test("wrong password: BadUserAccessDenied", { timeout: TEST_TIMEOUT_MS, skip: SKIP_UAGATE_ONLY }, () =>
    withServer(
      async (target) => {
        await target.userAdd("frank", "admin", "frank-right-pw");
        const certFile = await createClientCertificate(pkiOf(target));
        await target.trustAdd(certFile);
        await target.start();
        const secure = { securityMode: M.SignAndEncrypt, securityPolicy: SecurityPolicy.Basic256Sha256 };

        const client = makeClient(pkiOf(target), secure);
        await bounded(client.connect(target.url), "connect");
        try {
          const wrong = { type: UserTokenType.UserName, userName: "frank", password: "not-the-password" };
          await assertRejectsWithStatus(bounded(client.createSession(wrong), "createSession (wrong)"), "BadUserAccessDenied", client);
        } finally {
          await bounded(client.disconnect(), "disconnect");
        }

        const right = { type: UserTokenType.UserName, userName: "frank", password: "frank-right-pw" };
        await withSession(makeClient(pkiOf(target), secure), target.url, right, async (session) => {
          assert.equal((await readServerStatus(session)).state, ServerState.Running);
        });
      },
      { start: false },
    ));
});
