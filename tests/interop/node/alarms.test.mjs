// Alarms survive (issue 17 item 5): uagate in front of a node-opcua FIELD server that has an
// AlarmConditionType instance. A northbound node-opcua client subscribes to events on the
// mounted notifier (the field's Tank object), calls ConditionRefresh and gets RefreshStart, the
// active condition and RefreshEnd; a second client sharing the southbound event item gets none
// of that refresh. Then the field server restarts (a new session: the old subscriptions are
// gone) and both clients get the condition state again, framed by RefreshStart/RefreshEnd,
// without calling anything: the gateway refreshed by itself.
//
// The field server runs in this process; every wait is bounded; the field server and the
// gateway are stopped at the end.

import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { test } from "node:test";

import opcua from "node-opcua";

import { SKIP_UAGATE_ONLY, bounded, makeClient, withServer } from "./harness.mjs";

const {
  AttributeIds,
  ClientMonitoredItem,
  DataType,
  MessageSecurityMode,
  OPCUACertificateManager,
  OPCUAServer,
  SecurityPolicy,
  StatusCodes,
  TimestampsToReturn,
  constructEventFilter,
} = opcua;

const TEST_TIMEOUT_MS = 240_000;
const WAIT_MS = 30_000;
const CONDITION_TYPE = "ns=0;i=2782";
const CONDITION_REFRESH = "ns=0;i=3875";
const CONDITION_REFRESH2 = "ns=0;i=12912";
const REFRESH_START = "ns=0;i=2787";
const REFRESH_END = "ns=0;i=2788";
const NAMESPACE_ARRAY = "ns=0;i=2255";
const FIELD_STATE = "ns=2;s=FieldStatus.line1.State";
const FIELD_APP_URI = "urn:uagate-interop:alarm-field";
const SELECT = ["EventId", "EventType", "SourceName", "Message", "Retain"];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A free TCP port on 127.0.0.1 (the field server restarts on the same one). */
async function freePort() {
  const srv = net.createServer();
  await new Promise((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/**
 * A node-opcua field server with Objects/Tank (an event notifier and event source of the Server object)
 * and Tank/TankAlarm, an AlarmConditionType instance whose source is Tank. With `active`
 * the alarm is active (and retained) before any client connects.
 */
async function startField(port, pkiDir, { active }) {
  const server = new OPCUAServer({
    port,
    hostname: "127.0.0.1",
    resourcePath: "",
    serverInfo: { applicationUri: FIELD_APP_URI, applicationName: { text: "alarm-field" } },
    securityModes: [MessageSecurityMode.None],
    securityPolicies: [SecurityPolicy.None],
    allowAnonymous: true,
    serverCertificateManager: new OPCUACertificateManager({
      rootFolder: pkiDir,
      automaticallyAcceptUnknownCertificate: true,
    }),
  });
  await bounded(server.initialize(), "field server initialize", WAIT_MS);
  const addressSpace = server.engine.addressSpace;
  // Binds ConditionRefresh/ConditionRefresh2 and the other A&C methods.
  addressSpace.installAlarmsAndConditionsService();
  const ns = addressSpace.getOwnNamespace();
  const tank = ns.addObject({
    browseName: "Tank",
    nodeId: "s=Tank",
    organizedBy: addressSpace.rootFolder.objects,
    eventNotifier: 1,
  });
  addressSpace.rootFolder.objects.server.addReference({ referenceType: "HasEventSource", nodeId: tank });
  const level = ns.addVariable({
    browseName: "Level",
    nodeId: "s=Tank.Level",
    componentOf: tank,
    dataType: "Double",
    value: { dataType: DataType.Double, value: 10 },
  });
  const alarm = ns.instantiateAlarmCondition("AlarmConditionType", {
    browseName: "TankAlarm",
    nodeId: "s=Tank.Alarm",
    componentOf: tank,
    conditionSource: tank,
    inputNode: level,
  });
  alarm.setEnabledState(true);
  const raise = (message) => {
    alarm.activateAlarm();
    alarm.raiseNewCondition({ message, severity: 800, retain: true, quality: StatusCodes.Good });
  };
  if (active) raise("tank level high (before start)");
  await bounded(server.start(), "field server start", WAIT_MS);
  return { server, raise, uri: ns.namespaceUri, url: `opc.tcp://127.0.0.1:${port}` };
}

function gatewayConfig(fieldUrl) {
  return `[listen]
opc_tcp = "127.0.0.1:0"
[server]
application_name = "uagate-test"

[[field_servers]]
name = "line1"
endpoints = ["${fieldUrl}"]
security_mode = "none"
security_policy = "None"
redundancy = "none"
keep_alive_interval = "200ms"
request_timeout = "3s"
[field_servers.reconnect]
initial_delay = "200ms"
max_delay = "1s"
`;
}

/** Poll `probe` (bounded) until it returns a truthy value; returns it. */
async function eventually(what, probe, ms = WAIT_MS) {
  const until = Date.now() + ms;
  let last;
  while (Date.now() < until) {
    try {
      last = await probe();
      if (last) return last;
    } catch (err) {
      last = err;
    }
    await sleep(200);
  }
  throw new Error(`${what}: not within ${ms} ms (last: ${last})`);
}

/** One northbound client with one subscription and one event item on `notifier`. */
async function eventWatcher(url, pkiDir, notifier) {
  const client = makeClient(pkiDir);
  await bounded(client.connect(url), "connect");
  const session = await bounded(client.createSession(), "create session");
  const subscription = await bounded(
    session.createSubscription2({
      requestedPublishingInterval: 100,
      requestedLifetimeCount: 600,
      requestedMaxKeepAliveCount: 20,
      publishingEnabled: true,
    }),
    "create subscription",
  );
  const events = [];
  const item = await bounded(
    ClientMonitoredItem.create(
      subscription,
      { nodeId: notifier, attributeId: AttributeIds.EventNotifier },
      { samplingInterval: 0, queueSize: 1000, discardOldest: true, filter: constructEventFilter(SELECT) },
      TimestampsToReturn.Neither,
    ),
    "create event item",
  );
  item.on("changed", (fields) => {
    events.push({
      eventType: fields[1].value?.toString(),
      sourceName: fields[2].value,
      message: fields[3].value?.text,
      retain: fields[4].value,
    });
  });
  const close = async () => {
    await bounded(session.close(), "close session").catch(() => {});
    await bounded(client.disconnect(), "disconnect").catch(() => {});
  };
  return { session, subscription, item, events, close };
}

/** The events of `watcher` from index `from` once one satisfies `pred` (bounded). */
async function waitFor(watcher, from, what, pred) {
  return eventually(what, () => {
    const seen = watcher.events.slice(from);
    return seen.some(pred) ? seen : null;
  });
}

const isStart = (e) => e.eventType === REFRESH_START;
const isEnd = (e) => e.eventType === REFRESH_END;
const isTankAlarm = (e) => String(e.sourceName).endsWith("Tank") && !isStart(e) && !isEnd(e);

/** Start, then at least one retained Tank condition, then End: a refresh as a client sees it. */
function assertRefreshSequence(seen, what) {
  const kinds = seen.map((e) => (isStart(e) ? "S" : isEnd(e) ? "E" : isTankAlarm(e) ? "A" : "?"));
  const s = kinds.indexOf("S");
  const e = kinds.indexOf("E", s);
  assert.ok(s >= 0 && e > s, `${what}: RefreshStart then RefreshEnd expected, got ${kinds.join("")}`);
  const inside = seen.slice(s + 1, e);
  assert.ok(inside.some(isTankAlarm), `${what}: the Tank condition between Start and End, got ${kinds.join("")}`);
  assert.ok(inside.filter(isTankAlarm).every((x) => x.retain === true), `${what}: refreshed conditions are retained`);
}

async function call(session, methodId, args) {
  const result = await bounded(
    session.call({
      objectId: CONDITION_TYPE,
      methodId,
      inputArguments: args.map((value) => ({ dataType: DataType.UInt32, value })),
    }),
    "call",
  );
  return result.statusCode.name;
}

test("alarms survive: ConditionRefresh through the gateway and after a field restart", { skip: SKIP_UAGATE_ONLY, timeout: TEST_TIMEOUT_MS }, async () => {
  await withServer(
    async (target) => {
      const pki = path.join(target.tmp, "client-pki");
      const fieldPki = path.join(target.tmp, "field-pki");
      fs.mkdirSync(fieldPki, { recursive: true });
      const port = await freePort();
      let field = await startField(port, fieldPki, { active: false });
      const watchers = [];
      try {
        const configFile = path.join(target.tmp, "uagate-field.toml");
        fs.writeFileSync(configFile, gatewayConfig(field.url));
        await target.cli(["config", "import", configFile]);
        const url = await target.start();

        // Wait for the field connection, then find the field's namespace in the gateway.
        const probe = await eventWatcher(url, pki, "ns=0;i=2253");
        watchers.push(probe);
        await eventually(
          "field connection Connected",
          async () => (await probe.session.read({ nodeId: FIELD_STATE, attributeId: AttributeIds.Value })).value.value === "Connected",
        );
        const nsArray = (await probe.session.read({ nodeId: NAMESPACE_ARRAY, attributeId: AttributeIds.Value })).value.value;
        const fieldNs = nsArray.indexOf(field.uri);
        assert.ok(fieldNs > 0, `field namespace ${field.uri} in ${nsArray}`);
        const tank = `ns=${fieldNs};s=Tank`;

        // Two clients watch Tank with the same filter: one shared southbound event item.
        const a = await eventWatcher(url, pki, tank);
        const b = await eventWatcher(url, pki, tank);
        watchers.push(a, b);

        // The alarm goes active; both see it (the southbound item exists once they do).
        await eventually("the alarm reaches both clients", () => {
          field.raise("tank level high");
          return sleep(300).then(() => a.events.some(isTankAlarm) && b.events.some(isTankAlarm));
        });

        // Argument and ownership checks.
        assert.equal(await call(a.session, CONDITION_REFRESH, [b.subscription.subscriptionId]), "BadSubscriptionIdInvalid");
        assert.equal(await call(a.session, CONDITION_REFRESH2, [a.subscription.subscriptionId, 999_999]), "BadMonitoredItemIdInvalid");
        assert.equal(await call(a.session, CONDITION_REFRESH, []), "BadArgumentsMissing");

        // ConditionRefresh: Start, the active condition, End, for A only.
        const aFrom = a.events.length;
        const bFrom = b.events.length;
        assert.equal(await call(a.session, CONDITION_REFRESH, [a.subscription.subscriptionId]), "Good");
        assertRefreshSequence(await waitFor(a, aFrom, "A's refresh ends", isEnd), "ConditionRefresh");

        // ConditionRefresh2 on A's one item: the same.
        const a2From = a.events.length;
        assert.equal(
          await call(a.session, CONDITION_REFRESH2, [a.subscription.subscriptionId, a.item.monitoredItemId]),
          "Good",
        );
        assertRefreshSequence(await waitFor(a, a2From, "A's refresh2 ends", isEnd), "ConditionRefresh2");

        // B got none of A's refreshes: a new alarm event marks the point both must have reached.
        field.raise("marker");
        await waitFor(a, a2From, "marker at A", (e) => e.message === "marker");
        const bSeen = await waitFor(b, bFrom, "marker at B", (e) => e.message === "marker");
        assert.deepEqual(
          bSeen.map((e) => e.message),
          ["marker"],
          `B sees only the marker, got ${JSON.stringify(bSeen)}`,
        );

        // The field server restarts with the alarm already active: no field event will say
        // so; the gateway's own refresh on the new session does, to both clients.
        const aRe = a.events.length;
        const bRe = b.events.length;
        await bounded(field.server.shutdown(0), "field server shutdown", WAIT_MS);
        field = await startField(port, fieldPki, { active: true });
        assertRefreshSequence(await waitFor(a, aRe, "A's state after the restart", isEnd), "after restart (A)");
        assertRefreshSequence(await waitFor(b, bRe, "B's state after the restart", isEnd), "after restart (B)");
        const restated = a.events.slice(aRe).filter(isTankAlarm);
        assert.ok(
          restated.some((e) => e.message === "tank level high (before start)"),
          `the restarted server's condition, got ${JSON.stringify(restated)}`,
        );
      } catch (err) {
        err.message += `\nevents: ${JSON.stringify(watchers.map((w) => w.events))}`;
        err.message += `\n${target.logTail(60)}`;
        throw err;
      } finally {
        for (const w of watchers) await w.close();
        await bounded(field.server.shutdown(0), "field server shutdown", WAIT_MS).catch(() => {});
      }
    },
    { start: false },
  );
});
