// The Field connections page in headless Chromium against a real `uagate run` and a real
// `uagate sim` (a secured simulated PLC): an operator fills the structured form, tests the
// connection before saving, trusts the PLC's certificate shown by the test, adds the connection
// and sees it connect without a restart; then edits and disables it. Screenshots of the page at
// 1366x768 and 390 px wide go to $UAGATE_TEST_OUTPUT (default target/test-output/browser).

import { execFile, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { chromium } from "playwright-core";

import { CHROMIUM, OUT, UAGATE_BIN, firstAdmin, narrowLike, overflow, shot, stop, timeout as within } from "./common.mjs";
const STEP_MS = 15_000;
const ADMIN = ["flo", "flo-console-pass-1"];

let tmp;
let gateway;
let sim;
let sim_url;
let console_url;
let setup_code;
let browser;
let log = "";

function run(cmd, args) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: 60_000, killSignal: "SIGKILL" }, (err, stdout, stderr) => {
      if (err && typeof err.code !== "number") reject(new Error(`${cmd}: ${err.message}\n${stderr}`));
      else resolve({ code: err ? err.code : 0, stdout, stderr });
    });
  });
}

const timeout = (ms, what) => within(ms, what, () => log);

/** The first `n` stdout lines of `proc`. */
function firstLines(proc, n, what) {
  const lines = readline.createInterface({ input: proc.stdout });
  const got = [];
  const seen = new Promise((resolve, reject) => {
    lines.on("line", (l) => {
      got.push(l);
      if (got.length === n) resolve(got);
    });
    proc.on("exit", (c) => reject(new Error(`${what} exited (${c}):\n${log}`)));
  });
  return Promise.race([seen, timeout(60_000, `${what}: no ${n} lines`)]);
}

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "uagate-fields-"));
  fs.mkdirSync(OUT, { recursive: true });
  sim = spawn(UAGATE_BIN, ["sim", "--listen", "127.0.0.1:0", "--pki", path.join(tmp, "sim-pki")], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  sim.stderr.on("data", (c) => (log += c.toString()));
  const [simReady] = await firstLines(sim, 1, "uagate sim");
  sim_url = simReady.match(/^READY opc\.tcp=(\S+)$/)[1];

  const data = path.join(tmp, "data");
  const cfg = path.join(tmp, "uagate.toml");
  fs.writeFileSync(cfg, `[listen]\nopc_tcp = "127.0.0.1:0"\n[server]\napplication_name = "uagate-fields"\n`);
  const r = await run(UAGATE_BIN, ["--data", data, "config", "import", cfg]);
  assert.equal(r.code, 0, r.stderr);
  gateway = spawn(UAGATE_BIN, ["--data", data, "run"], { stdio: ["ignore", "pipe", "pipe"] });
  const codeSeen = new Promise((resolve) => {
    gateway.stderr.on("data", (chunk) => {
      log += chunk.toString();
      const m = log.match(/setup code ([0-9a-f]{16})/);
      if (m) resolve(m[1]);
    });
  });
  const [, , consoleLine] = await firstLines(gateway, 3, "uagate run");
  console_url = consoleLine.match(/^CONSOLE (https:\/\/127\.0\.0\.1:\d+\/)$/)[1];
  setup_code = await Promise.race([codeSeen, timeout(10_000, "no setup code in the log")]);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await stop(gateway);
  await stop(sim);
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

async function notice(page) {
  await page.waitForSelector("#notice, #error");
  const error = await page.$("#error");
  if (error) assert.fail(`the console refused: ${await error.textContent()}`);
  return page.textContent("#notice");
}

test("field connections: a structured form, tested, trusted and applied live", async (t) => {
  const { context, page } = await firstAdmin(browser, console_url, setup_code, ADMIN, STEP_MS);

  await t.test("test before saving shows the PLC's unknown certificate; one click trusts it", async () => {
    await page.goto("/fields");
    assert.match(await page.textContent("main"), /No field connections are configured/);
    await page.click("#field-editor > summary");
    await page.fill("#f-name", "press1");
    await page.fill("#f-url0", sim_url);
    assert.equal(await page.inputValue("#f-mode"), "sign_and_encrypt", "secure by default");
    assert.equal(await page.inputValue("#f-policy"), "Basic256Sha256");
    await page.selectOption("#f-redundancy", "none");
    await page.click("#f-test");
    await page.waitForSelector("#form-probe");
    const probe = await page.textContent("#form-probe");
    assert.match(probe, /answers, offers the chosen security/);
    assert.match(probe, /not trusted yet/);
    assert.match(await page.textContent(".fingerprint"), /^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
    // The form kept what was typed.
    assert.equal(await page.inputValue("#f-name"), "press1");
    assert.equal(await page.inputValue("#f-url0"), sim_url);
    await shot(page, "20-fields-test-untrusted");
    // Enter in a field (here after correcting the name) never trusts the certificate: it
    // presses the form's first submit button, which tests again.
    await page.fill("#f-name", "press1a");
    await Promise.all([page.waitForNavigation(), page.press("#f-name", "Enter")]);
    await page.waitForSelector("#form-probe");
    assert.equal(await page.$("#notice"), null, `Enter made a change: ${await page.$eval("#notice", (n) => n.textContent).catch(() => "")}`);
    assert.match(await page.textContent("#form-probe"), /not trusted yet/, "Enter did not trust the certificate");
    assert.equal(await page.inputValue("#f-name"), "press1a");
    await page.fill("#f-name", "press1");
    await page.click("button.trust");
    assert.match(await notice(page), /^Trusted /);
    await page.waitForSelector("#form-probe");
    assert.match(await page.textContent("#form-probe"), /certificate trusted/);
    // The test also logs in with the chosen identity (the simulator takes anonymous only).
    assert.match(await page.textContent("#form-probe"), /login accepted/);
    assert.equal(await page.$("button.trust"), null);
    assert.equal(await page.inputValue("#f-url0"), sim_url);
    // A user name the PLC does not take is found before saving, not after.
    await page.selectOption("#f-identity", "username");
    await page.fill("#f-username", "otto");
    await page.fill("#f-password", "not-the-password");
    await page.click("#f-test");
    await page.waitForSelector("#form-probe");
    assert.match(await page.textContent("#form-probe"), /login refused: the server takes no user name and password login on this endpoint \(it takes: anonymous\)/);
    await shot(page, "20b-fields-test-login-refused");
    await page.selectOption("#f-identity", "anonymous");
  });

  await t.test("added and live without a restart", async () => {
    await page.click("#f-save");
    assert.match(await notice(page), /press1 saved and applied; it is live now/);
    await page.waitForFunction(
      () => document.querySelector("#fields tr[data-connection=press1] td.state-connected") !== null,
      null,
      { timeout: 20_000 },
    );
    assert.match(await page.textContent("#entries"), /press1/);
    await shot(page, "21-fields-live");
    // Its recent events give their times as a date and a time of day in the browser's zone
    // (UTC on hover), not as RFC 3339.
    await page.reload();
    await page.waitForSelector("table.history[data-connection=press1] time", { state: "attached" });
    const when = await page.$eval("table.history[data-connection=press1] time", (e) => ({
      text: e.textContent,
      title: e.getAttribute("title"),
      same: new Date(e.textContent.replace(" ", "T")).getTime() === new Date(e.getAttribute("datetime")).getTime(),
    }));
    assert.match(when.text, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/, JSON.stringify(when));
    assert.match(when.title, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$/, JSON.stringify(when));
    assert.ok(when.same, `the local time shown is the event's time: ${JSON.stringify(when)}`);
  });

  await t.test("a 32-character name and a long URL: no sideways scrolling at 1366 and 390 px", async () => {
    const long = "Linie_12_Abfuellung_Kessel_Nord_";
    assert.equal(long.length, 32);
    await page.goto("/fields");
    await page.click("#field-editor > summary");
    await page.fill("#f-name", long);
    await page.fill("#f-url0", "opc.tcp://very-long-hostname-of-a-plc-in-the-north-hall.plant.invalid:4840/UA/Server/Endpoint");
    await page.selectOption("#f-mode", "none");
    await page.selectOption("#f-policy", "None");
    await page.click("#f-save");
    assert.match(await notice(page), /saved and applied/);
    // Its failed attempts fill "Last error", the widest cell of the live table.
    await page.waitForFunction(
      (name) => {
        const row = document.querySelector(`#fields tr[data-connection="${name}"]`);
        return row && !/—\s*$/.test(row.querySelector("td[data-label='Last error']").textContent);
      },
      long,
      { timeout: 20_000 },
    );
    await shot(page, "21b-fields-long-1366");
    assert.deepEqual(await overflow(page), [], "no horizontal overflow at 1366 px");
    const narrow = await narrowLike(browser, context, console_url, STEP_MS);
    const p = await narrow.newPage();
    await p.goto("/fields");
    await shot(p, "21c-fields-long-390");
    assert.deepEqual(await overflow(p), [], "no horizontal overflow at 390 px");
    // The test of a running connection, a table of what each URL answered.
    await p.click("#fields tr[data-connection=press1] td.actions button:text('Test connection')");
    await p.waitForSelector("#probe");
    await shot(p, "21d-fields-probe-390");
    assert.deepEqual(await overflow(p), [], "no horizontal overflow of the test result at 390 px");
    await narrow.close();
    await page.goto("/fields");
    page.once("dialog", (d) => d.accept());
    await page.click(`#entries tr[data-entry="${long}"] button.danger`);
    assert.match(await notice(page), /removed/);
  });

  await t.test("an invalid value is refused next to its input and nothing is saved", async () => {
    await page.goto("/fields?edit=press1#field-editor");
    assert.equal(await page.inputValue("#f-name"), "press1");
    assert.equal(await page.inputValue("#f-url0"), sim_url);
    await page.click("details.advanced > summary");
    await page.fill("#f-max-delay", "soon");
    await page.click("#f-save");
    await page.waitForSelector("#error");
    assert.match(await page.textContent("#f-max-delay + .field-error, label:has(#f-max-delay) .field-error"), /soon/);
    assert.equal(await page.inputValue("#f-max-delay"), "soon", "the form keeps the input");
    await shot(page, "22-fields-error");
  });

  await t.test("disabled from the form: applied at once", async () => {
    await page.goto("/fields?edit=press1#field-editor");
    await page.uncheck("#f-enabled");
    await page.click("#f-save");
    assert.match(await notice(page), /press1 saved and applied/);
    await page.waitForFunction(
      () => document.querySelector("#fields tr[data-connection=press1] td.state-disabled") !== null,
      null,
      { timeout: 20_000 },
    );
    assert.match(await page.textContent("#entries"), /disabled/);
    assert.equal(await page.$("#fields tr[data-connection=press1] button.reconnect"), null, "nothing to reconnect");
    await shot(page, "24-fields-disabled");
    // The dashboard says the same: switched off on purpose, not broken.
    await page.goto("/");
    assert.equal(
      (await page.textContent("#dashboard-fields tr[data-connection=press1] td[data-label=State]")).trim(),
      "disabled",
    );
    assert.notEqual(await page.$("#dashboard-fields tr[data-connection=press1] td.state-disabled"), null);
    assert.match(await page.textContent("#fields-up"), /1 disabled/);
    await shot(page, "24b-dashboard-disabled");
  });

  await t.test("the page at 390 px: no horizontal scrolling, the form usable", async () => {
    const narrow = await narrowLike(browser, context, console_url, STEP_MS);
    const p = await narrow.newPage();
    await p.goto("/fields?edit=press1#field-editor");
    await shot(p, "23-fields-390");
    assert.deepEqual(await overflow(p), [], "no horizontal overflow at 390 px");
    const box = await p.locator("#f-url0").boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= 390, `URL input inside the screen: ${JSON.stringify(box)}`);
    await shot(p, "23-fields-390");
    await narrow.close();
  });

  await t.test("a connection that keeps failing: not connected, in plain words, at 1366 and 390 px", async () => {
    const add = async (name, url) => {
      await page.goto("/fields");
      await page.click("#field-editor > summary");
      await page.fill("#f-name", name);
      await page.fill("#f-url0", url);
      await page.selectOption("#f-mode", "none");
      await page.selectOption("#f-policy", "None");
      await page.click("details.advanced > summary");
      await page.fill("#f-initial-delay", "100ms");
      await page.fill("#f-max-delay", "200ms");
      await page.click("#f-save");
      assert.match(await notice(page), /saved and applied/);
    };
    await add("plc7", "opc.tcp://plc-7.invalid:4840");
    await add("press9", "opc.tcp://127.0.0.1:1");
    for (const name of ["plc7", "press9"]) {
      await page.waitForSelector(`#fields tr[data-connection=${name}] td.state-failing`, { timeout: 20_000 });
    }
    const row = (name) => page.textContent(`#fields tr[data-connection=${name}]`);
    const plc7 = await row("plc7");
    assert.match(plc7, /not connected\s*\d+ attempts failed since \d{2}:\d{2} \([^)]+\)/);
    assert.doesNotMatch(plc7, /connecting/);
    assert.match(plc7, /the host name plc-7\.invalid was not found/);
    assert.match(plc7, /check the address or DNS/);
    assert.equal(await page.textContent("#fields tr[data-connection=plc7] small.status-code"), "BadTcpEndpointUrlInvalid");
    assert.match(
      await page.getAttribute("#fields tr[data-connection=plc7] small.status-code", "title"),
      /.+/,
      "the code's meaning on hover",
    );
    const press9 = await row("press9");
    assert.match(press9, /connection refused by 127\.0\.0\.1:1/);
    assert.match(press9, /check that the OPC UA server runs there and listens on port 1/);
    // The fault is styled as one: red, not the amber of "connecting".
    const colour = await page.$eval("#fields tr[data-connection=plc7] td.state-failing", (td) => getComputedStyle(td).color);
    assert.equal(colour, "rgb(180, 35, 24)");
    await shot(page, "25-fields-failing-1366");
    assert.deepEqual(await overflow(page), [], "no horizontal overflow at 1366 px");
    // Test connection of the form says the same.
    await page.goto("/fields?edit=plc7#field-editor");
    await page.click("#f-test");
    await page.waitForSelector("#form-probe");
    const probe = await page.textContent("#form-probe");
    assert.match(probe, /does not answer: the host name plc-7\.invalid was not found\s*check the address or DNS\s*BadTcpEndpointUrlInvalid/);
    await shot(page, "25b-fields-test-unknown-host-1366");
    // The Dashboard.
    await page.goto("/");
    await page.waitForSelector("#dashboard-fields tr[data-connection=press9] td.state-failing");
    assert.match(
      await page.textContent("#dashboard-fields tr[data-connection=press9]"),
      /not connected — \d+ attempts failed since \d{2}:\d{2} \([^)]+\), last: connection refused by 127\.0\.0\.1:1/,
    );
    await shot(page, "25c-dashboard-failing-1366");
    const narrow = await narrowLike(browser, context, console_url, STEP_MS);
    const p = await narrow.newPage();
    for (const [url, name] of [["/fields", "25d-fields-failing-390"], ["/", "25e-dashboard-failing-390"]]) {
      await p.goto(url);
      await p.waitForSelector("td.state-failing");
      await shot(p, name);
      assert.deepEqual(await overflow(p), [], `no horizontal overflow of ${url} at 390 px`);
    }
    await p.goto("/fields?edit=plc7#field-editor");
    await p.click("#f-test");
    await p.waitForSelector("#form-probe");
    await shot(p, "25f-fields-test-unknown-host-390");
    assert.deepEqual(await overflow(p), [], "no horizontal overflow of the test result at 390 px");
    await narrow.close();
    for (const name of ["plc7", "press9"]) {
      await page.goto("/fields");
      page.once("dialog", (d) => d.accept());
      await page.click(`#entries tr[data-entry="${name}"] button.danger`);
      assert.match(await notice(page), /removed/);
    }
  });

  await context.close();
});
