// Every console page in headless Chromium against a real `uagate demo` (two simulated PLCs as a
// hot pair, live data): the dashboard's charts draw the gateway's own samples; maintenance set
// with the date-time picker puts a banner with state, reason and return time on every page; every
// page is screenshotted at 1366x768 and at 390 px wide (no horizontal scrolling) into
// $UAGATE_TEST_OUTPUT (default target/test-output/browser).

import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { chromium } from "playwright-core";

import {
  CHROMIUM,
  OUT,
  UAGATE_BIN,
  firstAdmin,
  narrowLike,
  overflow,
  policyViolations,
  shot,
  stop,
  timeout as within,
} from "./common.mjs";
const STEP_MS = 15_000;
const ADMIN = ["pia", "pia-console-pass-1"];
const PAGES = [
  ["/", "dashboard"],
  ["/limits", "limits"],
  ["/owners", "owners"],
  ["/service-level", "service-level"],
  ["/maintenance", "maintenance"],
  ["/pair", "pair"],
  ["/fields", "fields"],
  ["/certificates", "certificates"],
  ["/sessions", "sessions"],
  ["/system", "system"],
  ["/users", "users"],
  ["/audit", "audit"],
];

let tmp;
let demo;
let console_url;
let setup_code;
let browser;
let log = "";

const timeout = (ms, what) => within(ms, what, () => log);

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "uagate-pages-"));
  fs.mkdirSync(OUT, { recursive: true });
  // No RAUC (even where the rauc package is installed): the System page shows a gateway off the
  // appliance image; tests/browser/system.test.mjs shows it on one.
  demo = spawn(UAGATE_BIN, ["--data", tmp, "demo", "--listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, UAGATE_RAUC: path.join(tmp, "no-rauc") },
  });
  demo.stderr.on("data", (c) => (log += c.toString()));
  const lines = readline.createInterface({ input: demo.stdout });
  const seen = new Promise((resolve, reject) => {
    let url;
    lines.on("line", (l) => {
      log += l + "\n";
      const c = l.match(/^CONSOLE (https:\/\/127\.0\.0\.1:\d+\/)$/);
      if (c) url = c[1];
      const code = l.match(/setup code[^0-9a-f]*([0-9a-f]{16})/);
      if (code && url) resolve([url, code[1]]);
    });
    demo.on("exit", (c) => reject(new Error(`uagate demo exited (${c}):\n${log}`)));
  });
  const fromLog = new Promise((resolve) => {
    const t = setInterval(() => {
      const m = log.match(/setup code ([0-9a-f]{16})/);
      const c = log.match(/^CONSOLE (https:\/\/127\.0\.0\.1:\d+\/)$/m);
      if (m && c) {
        clearInterval(t);
        resolve([c[1], m[1]]);
      }
    }, 100);
    t.unref();
  });
  [console_url, setup_code] = await Promise.race([seen, fromLog, timeout(90_000, "demo console and setup code")]);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await stop(demo);
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** Screenshots of every page at both widths; fails on sideways scrolling at 390 px. */
async function everyPage(context, narrowContext, suffix, check) {
  const sideways = [];
  for (const [width, ctx] of [["1366", context], ["390", narrowContext]]) {
    const page = await ctx.newPage();
    for (const [url, name] of PAGES) {
      const r = await page.goto(url);
      assert.equal(r.status(), 200, url);
      if (check) await check(page, url);
      await shot(page, `page-${name}${suffix}-${width}`);
      if (width === "390") {
        const out = await overflow(page);
        if (out.length) sideways.push(`${url}: ${out.join(", ")}`);
      }
    }
    await page.close();
  }
  assert.deepEqual(sideways, [], "pages that scroll sideways at 390 px");
}

test("every page, the dashboard charts and the maintenance banner", async (t) => {
  const { context, page } = await firstAdmin(browser, console_url, setup_code, ADMIN, STEP_MS);
  const narrow = await narrowLike(browser, context, console_url, STEP_MS);
  // Every page runs under the console's Content-Security-Policy (no inline script or style):
  // nothing on any page may need what it forbids.
  const refused = [policyViolations(context), policyViolations(narrow)];
  const refusedNow = () => refused.flat();

  await t.test("the dashboard: what an operator needs, and charts drawing the last minutes", async () => {
    await page.goto("/");
    assert.match(await page.textContent("#uptime"), /\d+ (s|min)/);
    assert.match(await page.textContent("main"), /uagate \d+\.\d+\.\d+/);
    assert.equal(await page.$("table.usage"), null, "isolation internals are on the Limits page");
    // A sample every 5 s: after a few the lines are drawn (htmx refreshes every 2 s).
    await page.waitForFunction(() => document.querySelectorAll("#charts svg.chart polyline").length >= 4, null, {
      timeout: 30_000,
    });
    const captions = await page.$$eval("#charts figcaption", (f) => f.map((x) => x.textContent));
    assert.deepEqual(captions, [
      "Reads per second",
      "Notifications per second",
      "Sessions",
      "Field connections' ServiceLevel",
    ]);
    // The demo's field connection serves ServiceLevel 255 (or close) from its hot pair.
    const level = await page.getAttribute("#charts figure:nth-child(4) svg", "aria-label");
    assert.match(level, /plant (2\d\d|1\d\d)/, level);
    assert.match(await page.textContent("#fields-up"), /1 of 1 up/);
    await page.goto("/limits");
    assert.ok(await page.$("#usage table.usage, table#usage"), "usage on the Limits page");
    // A favicon in the tab.
    assert.equal(await page.getAttribute("link[rel=icon]", "href"), "/static/favicon.svg");
    const icon = await page.request.get("/favicon.ico");
    assert.equal(icon.status(), 200);
    assert.match(icon.headers()["content-type"], /image\/svg\+xml/);
  });

  await t.test("every page at both widths", async () => {
    await everyPage(context, narrow, "", async (p) => {
      assert.equal(await p.$("#state-banner"), null, "no banner while running");
    });
  });

  await t.test("maintenance with a return time picked: a banner on every page", async () => {
    await page.goto("/maintenance");
    await page.selectOption("#maintenance-state", "suspended");
    await page.fill("#maintenance-reason", "PLC firmware update, line 3");
    await page.fill("#maintenance-return", "2030-06-01T14:30");
    await page.click("#maintenance-submit");
    await page.waitForSelector("#confirm");
    // The confirmation gives the return time as it was entered (the browser's time zone).
    assert.match(await page.textContent("#confirm-summary"), /back by 2030-06-01 14:30\./);
    await page.click("#confirm");
    await page.waitForSelector("#notice");
    await everyPage(context, narrow, "-maintenance", async (p, url) => {
      const banner = await p.textContent("#state-banner");
      assert.match(banner, /The gateway is in maintenance \(Suspended\): PLC firmware update, line 3; back at 2030-06-01 \d\d:30/, `${url}: ${banner}`);
    });
    await page.goto("/maintenance");
    await page.click("#back-to-running");
    await page.click("#confirm");
    await page.waitForSelector("#notice");
    assert.equal(await page.$("#state-banner"), null);
  });

  await t.test("maintenance in Berlin: the return time confirmed as entered; a time past refused at its field", async () => {
    const berlin = await browser.newContext({
      ignoreHTTPSErrors: true,
      baseURL: console_url,
      viewport: { width: 1366, height: 768 },
      timezoneId: "Europe/Berlin",
      storageState: await context.storageState(),
    });
    berlin.setDefaultTimeout(STEP_MS);
    const p = await berlin.newPage();
    await p.goto("/maintenance");
    await p.selectOption("#maintenance-state", "suspended");
    await p.fill("#maintenance-reason", "pump swap");
    await p.fill("#maintenance-return", "2030-12-07T15:30");
    await p.click("#maintenance-submit");
    await p.waitForSelector("#confirm");
    const summary = await p.textContent("#confirm-summary");
    assert.match(summary, /back by 2030-12-07 15:30\./, summary);
    // The UTC time on the wire is 14:30 (Berlin is UTC+1 in December).
    assert.equal(await p.getAttribute("#confirm-summary time", "datetime"), "2030-12-07T14:30:00Z");
    await shot(p, "maintenance-confirm-berlin");
    await p.goto("/maintenance");
    await p.fill("#maintenance-reason", "pump swap");
    await p.fill("#maintenance-return", "2020-01-01T10:00");
    await p.click("#maintenance-submit");
    await p.waitForSelector("#maintenance-return-error");
    assert.match(await p.textContent("#maintenance-return-error"), /2020-01-01 10:00 is already past/);
    assert.equal(await p.getAttribute("#maintenance-return", "aria-invalid"), "true");
    assert.equal(await p.inputValue("#maintenance-reason"), "pump swap", "the form keeps what was typed");
    assert.equal(await p.$("#confirm"), null, "nothing to confirm");
    await shot(p, "maintenance-past-berlin");
    await berlin.close();
  });

  await t.test("Force failover asks first, naming the connection; dismissed, nothing happens", async () => {
    await page.goto("/fields");
    const row = page.locator("#fields tr[data-connection]", { has: page.locator("button.failover") }).first();
    const name = await row.getAttribute("data-connection");
    const failovers = async () => Number((await row.locator("td.failovers").textContent()).trim());
    const before = await failovers();
    /** Clicks Force failover answering its question with `accept`; returns the question. */
    const answer = async (accept) => {
      const asked = new Promise((resolve) =>
        page.once("dialog", async (d) => {
          resolve(d.message());
          await (accept ? d.accept() : d.dismiss());
        }),
      );
      await row.locator("button.failover").click();
      return Promise.race([asked, timeout(5_000, "a question before the failover")]);
    };
    const question = `Force ${name} to fail over to its other server now? Clients see a short gap.`;
    assert.equal(await answer(false), question);
    // The live table refreshes every 2 s: give a request that was sent time to show.
    await page.waitForTimeout(2_500);
    assert.equal(await page.$("#notice"), null, "dismissed: nothing requested");
    assert.equal(await failovers(), before, "dismissed: no failover");
    assert.equal(await answer(true), question);
    await page.waitForSelector("#notice");
    assert.match(await page.textContent("#notice"), new RegExp(`Failover of ${name} requested`));
    await page.waitForFunction(
      ([n, b]) => Number(document.querySelector(`#fields tr[data-connection="${n}"] td.failovers`)?.textContent.trim()) > b,
      [name, before],
    );
  });

  await t.test("the first trusted owner on the default limits: refused in plain words, with the fix", async () => {
    for (const [width, p] of [["1366", page], ["390", await narrow.newPage()]]) {
      await p.goto("/owners");
      await p.fill("#owner-key", "scada");
      await p.fill("#owner-weight", "5");
      await p.fill("#owner-reservations", "request_execution 4");
      await p.fill("#owner-ingress", "10.0.5.0/24");
      await p.click("#owner-form button[type=submit]");
      await p.waitForSelector("#error");
      const error = await p.textContent("#error");
      assert.match(error, /^The 1 connection scada is kept of its own \(every trusted owner is, unless its reservations say connection 0\) needs room the gateway does not have: it allows 103 connections/);
      assert.match(error, /Raise Max connections to 104 or more, or lower Max sessions to 99, on the Limits page/);
      // What was typed stays, and the error is at the input it concerns.
      assert.equal(await p.inputValue("#owner-key"), "scada");
      assert.equal(await p.inputValue("#owner-weight"), "5");
      assert.equal(await p.inputValue("#owner-reservations"), "request_execution 4");
      assert.equal(await p.inputValue("#owner-ingress"), "10.0.5.0/24");
      assert.equal(await p.getAttribute("#owner-reservations", "aria-invalid"), "true");
      assert.match(await p.textContent("#owner-reservations-error"), /^The 1 connection scada is kept of its own \(every trusted owner is/);
      assert.equal(await p.$("#owner-key[aria-invalid], #owner-weight[aria-invalid], #owner-ingress[aria-invalid]"), null);
      await shot(p, `owners-no-room-${width}`);
      // A weight that is not a number: said at the weight, the rest kept as typed.
      await p.fill("#owner-weight", "heavy");
      await p.click("#owner-form button[type=submit]");
      await p.waitForSelector("#owner-weight-error");
      assert.match(await p.textContent("#owner-weight-error"), /heavy/);
      assert.equal(await p.inputValue("#owner-weight"), "heavy");
      assert.equal(await p.inputValue("#owner-reservations"), "request_execution 4");
      assert.equal(await p.inputValue("#owner-ingress"), "10.0.5.0/24");
      await shot(p, `owners-bad-weight-${width}`);
      await p.goto("/limits");
      await shot(p, `limits-sessions-connections-${width}`);
      // Too few connections for the sessions: said with the page's labels, at Max connections.
      await p.fill("#max_channel_count", "100");
      await p.waitForSelector("label:has(#max_channel_count) .field-error");
      const limitsError = await p.textContent("label:has(#max_channel_count) .field-error");
      assert.match(limitsError, /^Max connections must be at least 103: each of the 100 sessions \(Max sessions\) needs a connection/);
      assert.doesNotMatch(limitsError, /server\.|isolation\.|shared/);
      assert.equal(await p.getAttribute("#max_channel_count", "aria-invalid"), "true");
      await shot(p, `limits-too-few-connections-${width}`);
      if (width === "390") {
        assert.deepEqual(await overflow(p), [], "no sideways scrolling at 390 px");
        await p.close();
      }
    }
  });

  await t.test("the Content-Security-Policy blocked nothing on any page", async () => {
    const csp = (await page.request.get("/")).headers()["content-security-policy"];
    assert.match(csp, /script-src 'self'/);
    assert.deepEqual(refusedNow(), []);
  });

  await narrow.close();
  await context.close();
});
