// Subscriptions, monitored items, Write, Call, TransferSubscriptions and server state changes,
// as seen by node-opcua (node:test). Each test starts its own server (harness.mjs); every wait
// is bounded. Tests with `skip: SKIP_UAGATE_ONLY` need uagate (the self-check server lacks them).

import assert from "node:assert/strict";
import path from "node:path";
import { describe, test } from "node:test";

import opcua from "node-opcua";

import { SKIP_UAGATE_ONLY, bounded, createClientCertificate, makeClient, withServer } from "./harness.mjs";

const {
  AttributeIds,
  DataChangeFilter,
  DataChangeTrigger,
  DataType,
  DeadbandType,
  MessageSecurityMode,
  PublishRequest,
  SecurityPolicy,
  ServerState,
  TimestampsToReturn,
  UserTokenType,
} = opcua;

const TEST_TIMEOUT_MS = 180_000;
const ANONYMOUS = { type: UserTokenType.Anonymous };
const SECURE = { securityMode: MessageSecurityMode.SignAndEncrypt, securityPolicy: SecurityPolicy.Basic256Sha256 };

const SERVER = "ns=0;i=2253";
const CURRENT_TIME = "ns=0;i=2258";
const NAMESPACE_ARRAY = "ns=0;i=2255";
const SERVER_STATE = "ns=0;i=2259";
const SERVICE_LEVEL = "ns=0;i=2267";
const REDUNDANCY_SUPPORT = "ns=0;i=3709";
const REQUEST_SERVER_STATE_CHANGE = "ns=0;i=12886";
const DEMO = "ns=2;s=Gateway.Demo";
const DEMO_LEVEL = "ns=2;s=Gateway.Demo.Level";
const DEMO_SETPOINT = "ns=2;s=Gateway.Demo.Setpoint";
const DEMO_ADD = "ns=2;s=Gateway.Demo.Add";

const pkiOf = (target) => path.join(target.tmp, "client-pki");
// Writes need a user with the operator role (uagate refuses anonymous writes: BadUserAccessDenied).
const OPERATOR = { type: UserTokenType.UserName, userName: "opal", password: "opal-pass-2" };

/** Like withServer, but with the OPERATOR user and a trusted client certificate; fn(target, client). */
function withWriter(fn) {
  return withServer(
    async (target) => {
      await target.userAdd(OPERATOR.userName, "operator", OPERATOR.password);
      await target.trustClient(await createClientCertificate(pkiOf(target)));
      await target.start();
      return fn(target, makeClient(pkiOf(target), SECURE));
    },
    { start: false },
  );
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

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

/** A started ClientSubscription (node-opcua runs the Publish loop). */
async function subscribe(session, intervalMs, keepAliveCount = 10) {
  return bounded(
    session.createSubscription2({
      requestedPublishingInterval: intervalMs,
      requestedMaxKeepAliveCount: keepAliveCount,
      requestedLifetimeCount: keepAliveCount * 10,
      maxNotificationsPerPublish: 0,
      publishingEnabled: true,
      priority: 0,
    }),
    "createSubscription",
  );
}

/** Monitor the Value of `nodeId`; returns the item and an array that collects every changed value. */
async function monitor(subscription, nodeId, samplingInterval, filter = null) {
  const item = await bounded(
    subscription.monitor(
      { nodeId, attributeId: AttributeIds.Value },
      { samplingInterval, queueSize: 1, discardOldest: true, filter },
      TimestampsToReturn.Both,
    ),
    `monitor ${nodeId}`,
  );
  assert.equal(item.statusCode.name, "Good", `monitor ${nodeId}: ${item.statusCode.name}`);
  const values = [];
  item.on("changed", (dv) => values.push(dv.value.value));
  return { item, values };
}

/** Poll (bounded) until predicate() holds. */
async function until(predicate, what, ms) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(20);
  }
}

async function writeDouble(session, nodeId, value) {
  const sc = await bounded(
    session.write({ nodeId, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Double, value } } }),
    `write ${nodeId}`,
  );
  assert.equal(sc.name, "Good", `write ${nodeId}=${value}: ${sc.name}`);
}

async function readValue(session, nodeId) {
  const dv = await bounded(session.read({ nodeId, attributeId: AttributeIds.Value }), `read ${nodeId}`);
  assert.equal(dv.statusCode.name, "Good", `read ${nodeId}: ${dv.statusCode.name}`);
  return dv.value;
}

const double = (value) => ({ dataType: DataType.Double, value });

describe("node-opcua: subscriptions, Write and Call", { timeout: TEST_TIMEOUT_MS }, () => {
  test("CurrentTime notifications follow the revised publishing interval", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(async (target) => {
      await withSession(makeClient(pkiOf(target)), target.url, ANONYMOUS, async (session) => {
        const subscription = await subscribe(session, 200);
        const interval = subscription.publishingInterval;
        assert.ok(interval > 0 && interval <= 1000, `revised publishing interval ${interval}`);
        const arrivals = [];
        const { item } = await monitor(subscription, CURRENT_TIME, 100);
        item.on("changed", () => arrivals.push(Date.now()));
        await until(() => arrivals.length > 0, "first CurrentTime notification", 10_000);
        const start = arrivals[0];
        await sleep(3_100);
        const inWindow = arrivals.filter((t) => t - start < 3_000);
        await bounded(subscription.terminate(), "terminate");
        const expected = 3_000 / interval;
        assert.ok(
          inWindow.length >= 0.5 * expected && inWindow.length <= 1.5 * expected + 2,
          `${inWindow.length} notifications in 3 s at ${interval} ms (expected about ${expected})`,
        );
      });
    }));

  test("keep-alives on a subscription whose only item never changes", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(async (target) => {
      await withSession(makeClient(pkiOf(target)), target.url, ANONYMOUS, async (session) => {
        const subscription = await subscribe(session, 100, 3);
        const keepAliveMs = subscription.publishingInterval * subscription.maxKeepAliveCount;
        const keepalives = [];
        subscription.on("keepalive", () => keepalives.push(Date.now()));
        const { values } = await monitor(subscription, NAMESPACE_ARRAY, 100);
        await until(() => values.length > 0, "initial NamespaceArray value", 10_000);
        assert.equal(values[0][0], "http://opcfoundation.org/UA/");
        const since = Date.now();
        await until(() => keepalives.filter((t) => t >= since).length >= 3, "three keep-alives", 6 * keepAliveMs + 3_000);
        assert.equal(values.length, 1, "NamespaceArray did not change, yet it was reported again");
        await bounded(subscription.terminate(), "terminate");
      });
    }));

  for (const [name, deadbandType, deadbandValue, bigStep] of [
    ["absolute 5", DeadbandType.Absolute, 5, 10],
    ["percent 10 of EURange 0..100", DeadbandType.Percent, 10, 15],
  ]) {
    test(`deadband ${name}: small changes are not reported, a large one is`, { timeout: TEST_TIMEOUT_MS }, () =>
      withWriter(async (target, client) => {
        await withSession(client, target.url, OPERATOR, async (session) => {
          await writeDouble(session, DEMO_LEVEL, 50);
          const subscription = await subscribe(session, 100, 5);
          const filter = new DataChangeFilter({ trigger: DataChangeTrigger.StatusValue, deadbandType, deadbandValue });
          const { values } = await monitor(subscription, DEMO_LEVEL, 50, filter);
          await until(() => values.length > 0, "initial Level value", 5_000);
          assert.deepEqual(values, [50]);
          for (const v of [51, 52, 53]) {
            await writeDouble(session, DEMO_LEVEL, v);
            await sleep(200);
          }
          await sleep(1_000);
          assert.deepEqual(values, [50], "changes inside the deadband were reported");
          await writeDouble(session, DEMO_LEVEL, 53 + bigStep);
          await until(() => values.length > 1, "change past the deadband", 5_000);
          assert.deepEqual(values, [50, 53 + bigStep]);
          await bounded(subscription.terminate(), "terminate");
        });
      }));
  }

  test("write Setpoint and read it back", { timeout: TEST_TIMEOUT_MS }, () =>
    withWriter(async (target, client) => {
      await withSession(client, target.url, OPERATOR, async (session) => {
        const before = await readValue(session, DEMO_SETPOINT);
        const value = [DataType.Double, DataType.Float].includes(before.dataType) ? 42.5 : 42;
        const sc = await bounded(
          session.write({
            nodeId: DEMO_SETPOINT,
            attributeId: AttributeIds.Value,
            value: { value: { dataType: before.dataType, value } },
          }),
          "write Setpoint",
        );
        assert.equal(sc.name, "Good");
        const after = await readValue(session, DEMO_SETPOINT);
        assert.equal(after.dataType, before.dataType);
        assert.equal(after.value, value);
      });
    }));

  test("call Gateway.Demo.Add: result, missing argument, wrong type", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(async (target) => {
      await withSession(makeClient(pkiOf(target)), target.url, ANONYMOUS, async (session) => {
        const ok = await bounded(
          session.call({ objectId: DEMO, methodId: DEMO_ADD, inputArguments: [double(2), double(3)] }),
          "call Add",
        );
        assert.equal(ok.statusCode.name, "Good");
        assert.equal(ok.outputArguments.length, 1);
        assert.equal(ok.outputArguments[0].dataType, DataType.Double);
        assert.equal(ok.outputArguments[0].value, 5);

        const missing = await bounded(
          session.call({ objectId: DEMO, methodId: DEMO_ADD, inputArguments: [double(2)] }),
          "call Add (one argument)",
        );
        assert.equal(missing.statusCode.name, "BadArgumentsMissing");

        const wrong = await bounded(
          session.call({
            objectId: DEMO,
            methodId: DEMO_ADD,
            inputArguments: [double(2), { dataType: DataType.String, value: "three" }],
          }),
          "call Add (string argument)",
        );
        assert.ok(["BadInvalidArgument", "BadTypeMismatch"].includes(wrong.statusCode.name), wrong.statusCode.name);
        if (wrong.inputArgumentResults?.length) {
          assert.deepEqual(
            wrong.inputArgumentResults.map((sc) => sc.name),
            ["Good", "BadTypeMismatch"],
          );
        }
      });
    }));

  test("GetMonitoredItems returns the server and client handles", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(async (target) => {
      await withSession(makeClient(pkiOf(target)), target.url, ANONYMOUS, async (session) => {
        const subscription = await subscribe(session, 500);
        const a = await monitor(subscription, CURRENT_TIME, 500);
        const b = await monitor(subscription, NAMESPACE_ARRAY, 500);
        const got = await bounded(session.getMonitoredItems(subscription.subscriptionId), "GetMonitoredItems");
        const pairs = (s, c) => [...s].map((h, i) => `${h}/${c[i]}`).sort();
        assert.deepEqual(
          pairs(got.serverHandles, got.clientHandles),
          pairs(
            [a.item.monitoredItemId, b.item.monitoredItemId],
            [a.item.monitoringParameters.clientHandle, b.item.monitoringParameters.clientHandle],
          ),
        );
        await bounded(subscription.terminate(), "terminate");
      });
    }));

  test("TransferSubscriptions to a second session of the same user", { timeout: TEST_TIMEOUT_MS }, () =>
    withServer(
      async (target) => {
        await target.userAdd("tom", "operator", "tom-pass-6");
        const certFile = await createClientCertificate(pkiOf(target));
        await target.trustClient(certFile);
        await target.start();
        const identity = { type: UserTokenType.UserName, userName: "tom", password: "tom-pass-6" };
        // Created with raw service calls, so that node-opcua's own Publish loop of the first
        // session does not own (and later try to delete) the subscription.
        await withSession(makeClient(pkiOf(target), SECURE), target.url, identity, async (first) => {
          const created = await bounded(
            first.createSubscription({
              requestedPublishingInterval: 100,
              requestedLifetimeCount: 100,
              requestedMaxKeepAliveCount: 10,
              maxNotificationsPerPublish: 0,
              publishingEnabled: true,
              priority: 0,
            }),
            "CreateSubscription",
          );
          const subscriptionId = created.subscriptionId;
          const items = await bounded(
            first.createMonitoredItems({
              subscriptionId,
              timestampsToReturn: TimestampsToReturn.Both,
              itemsToCreate: [
                {
                  itemToMonitor: { nodeId: CURRENT_TIME, attributeId: AttributeIds.Value },
                  monitoringMode: opcua.MonitoringMode.Reporting,
                  requestedParameters: { clientHandle: 77, samplingInterval: 100, queueSize: 1, discardOldest: true },
                },
              ],
            }),
            "CreateMonitoredItems",
          );
          assert.equal(items.results[0].statusCode.name, "Good");

          await withSession(makeClient(pkiOf(target), SECURE), target.url, identity, async (second) => {
            const transfer = await bounded(
              second.transferSubscriptions({ subscriptionIds: [subscriptionId], sendInitialValues: true }),
              "TransferSubscriptions",
            );
            assert.equal(transfer.results.length, 1);
            assert.equal(transfer.results[0].statusCode.name, "Good");

            // Data continues on the second session: raw Publish requests there.
            const publish = (acks) =>
              new Promise((resolve, reject) =>
                second.publish(new PublishRequest({ subscriptionAcknowledgements: acks }), (err, res) =>
                  err ? reject(err) : resolve(res),
                ),
              );
            const times = [];
            let acks = [];
            const deadline = Date.now() + 10_000;
            while (times.length < 3 && Date.now() < deadline) {
              const res = await bounded(publish(acks), "Publish on the second session", 10_000);
              acks = [];
              if (res.subscriptionId !== subscriptionId) continue;
              const msg = res.notificationMessage;
              if (msg.notificationData?.length) {
                acks = [{ subscriptionId, sequenceNumber: msg.sequenceNumber }];
                for (const n of msg.notificationData) {
                  for (const mi of n.monitoredItems ?? []) if (mi.clientHandle === 77) times.push(mi.value.value.value);
                }
              }
            }
            assert.ok(times.length >= 3, `only ${times.length} CurrentTime notifications on the second session`);
          });
        });
      },
      { start: false },
    ));
});

describe("node-opcua: server state and redundancy (uagate)", { timeout: TEST_TIMEOUT_MS }, () => {
  const stateArgs = (state) => [
    { dataType: DataType.Int32, value: state },
    { dataType: DataType.DateTime, value: new Date(Date.now() + 10 * 60_000) },
    { dataType: DataType.UInt32, value: 0 },
    { dataType: DataType.LocalizedText, value: { locale: "en", text: "maintenance" } },
    { dataType: DataType.Boolean, value: false },
  ];
  const requestState = async (session, state) =>
    (
      await bounded(
        session.call({ objectId: SERVER, methodId: REQUEST_SERVER_STATE_CHANGE, inputArguments: stateArgs(state) }),
        "RequestServerStateChange",
      )
    ).statusCode.name;

  test("RequestServerStateChange: admin suspends and resumes, observer sees ServiceLevel and State", {
    timeout: TEST_TIMEOUT_MS,
    skip: SKIP_UAGATE_ONLY,
  }, () =>
    withServer(
      async (target) => {
        await target.userAdd("ada", "admin", "ada-pass-8");
        await target.userAdd("otto", "operator", "otto-pass-8");
        const certFile = await createClientCertificate(pkiOf(target));
        await target.trustClient(certFile);
        await target.start();
        await withSession(makeClient(pkiOf(target)), target.url, ANONYMOUS, async (watcher) => {
          const subscription = await subscribe(watcher, 100, 5);
          const level = await monitor(subscription, SERVICE_LEVEL, 50);
          const state = await monitor(subscription, SERVER_STATE, 50);
          const latest = () => [level.values.at(-1), state.values.at(-1)];
          const within = subscription.publishingInterval + 2_000;
          await until(() => latest()[0] === 255 && latest()[1] === ServerState.Running, "initial 255/Running", 5_000);

          const operator = { type: UserTokenType.UserName, userName: "otto", password: "otto-pass-8" };
          await withSession(makeClient(pkiOf(target), SECURE), target.url, operator, async (session) => {
            assert.equal(await requestState(session, ServerState.Suspended), "BadUserAccessDenied");
          });

          const admin = { type: UserTokenType.UserName, userName: "ada", password: "ada-pass-8" };
          await withSession(makeClient(pkiOf(target), SECURE), target.url, admin, async (session) => {
            assert.equal(await requestState(session, ServerState.Suspended), "Good");
            await until(() => latest()[0] === 0 && latest()[1] === ServerState.Suspended, "0/Suspended", within);
            assert.equal(await requestState(session, ServerState.Running), "Good");
            await until(() => latest()[0] === 255 && latest()[1] === ServerState.Running, "255/Running", within);
          });

          // Admin, but on a channel without encryption.
          await withSession(makeClient(pkiOf(target)), target.url, admin, async (session) => {
            const status = await requestState(session, ServerState.Suspended);
            assert.ok(["BadUserAccessDenied", "BadSecurityModeInsufficient"].includes(status), status);
          });
          assert.deepEqual(latest(), [255, ServerState.Running]);
          await bounded(subscription.terminate(), "terminate");
        });
      },
      { start: false },
    ));

  test("ServerRedundancy.RedundancySupport is None by default", { timeout: TEST_TIMEOUT_MS, skip: SKIP_UAGATE_ONLY }, () =>
    withServer(async (target) => {
      await withSession(makeClient(pkiOf(target)), target.url, ANONYMOUS, async (session) => {
        const v = await readValue(session, REDUNDANCY_SUPPORT);
        assert.equal(v.value, 0); // RedundancySupport.None
      });
    }));
});

describe("node-opcua: session diagnostics", { timeout: TEST_TIMEOUT_MS }, () => {
  // Part 5 6.3.4 and 12.11: one SessionSecurityDiagnosticsDataType per session, readable by an
  // administrator on an encrypted channel only (asyncua cannot decode these entries: it declares
  // the Encoding field a Byte where the standard says String).
  const ADMIN = { type: UserTokenType.UserName, userName: "ada", password: "ada-pass-55" };
  const SESSION_SECURITY_DIAGNOSTICS = "ns=0;i=3708";
  test(
    "SessionSecurityDiagnosticsArray names each session's user, login and security",
    { timeout: TEST_TIMEOUT_MS, skip: SKIP_UAGATE_ONLY },
    () =>
      withServer(
        async (target) => {
          await target.userAdd(ADMIN.userName, "admin", ADMIN.password);
          await target.trustClient(await createClientCertificate(pkiOf(target)));
          await target.start();
          await withSession(makeClient(pkiOf(target)), target.url, ANONYMOUS, async (anonymous) => {
            const refused = await bounded(
              anonymous.read({ nodeId: SESSION_SECURITY_DIAGNOSTICS, attributeId: AttributeIds.Value }),
              "read as anonymous",
            );
            assert.equal(refused.statusCode.name, "BadUserAccessDenied");
            await withSession(makeClient(pkiOf(target), SECURE), target.url, ADMIN, async (admin) => {
              // Refreshed once a second.
              let entries = [];
              const deadline = Date.now() + 5_000;
              while (entries.length !== 2 && Date.now() < deadline) {
                entries = (await readValue(admin, SESSION_SECURITY_DIAGNOSTICS)).value;
                if (entries.length !== 2) await sleep(250);
              }
              assert.equal(entries.length, 2, "two sessions listed");
              const byUser = Object.fromEntries(entries.map((e) => [e.clientUserIdOfSession ?? "", e]));
              assert.deepEqual(Object.keys(byUser).sort(), ["", "ada"]);
              assert.equal(byUser.ada.authenticationMechanism, "UserName");
              assert.equal(byUser.ada.securityMode, MessageSecurityMode.SignAndEncrypt);
              assert.equal(byUser.ada.securityPolicyUri, SecurityPolicy.Basic256Sha256);
              assert.equal(byUser.ada.encoding, "UA Binary");
              assert.ok(byUser.ada.clientCertificate && byUser.ada.clientCertificate.length > 100);
              assert.equal(byUser[""].authenticationMechanism, "Anonymous");
              assert.equal(byUser[""].securityMode, MessageSecurityMode.None);
              assert.match(byUser[""].transportProtocol, /uatcp-uasc-uabinary$/);
            });
          });
        },
        { start: false },
      ),
  );
});
