// The console in headless Chromium (Debian package), driven by playwright-core, against a real
// `uagate run`: first-run setup, login, a stage limit with the live plan preview, a trusted owner
// with an ingress rule, trusting a rejected certificate, Maintenance seen by an asyncua client,
// and back to Running. A screenshot of every page goes to $UAGATE_TEST_OUTPUT (default
// target/test-output/browser).

import { execFile, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "..", "..");
const UAGATE_BIN = process.env.UAGATE_BIN || path.join(ROOT, "target", "debug", "uagate");
const PYTHON = process.env.UAGATE_INTEROP_PYTHON || path.join(ROOT, ".venv", "bin", "python");
const CHROMIUM = process.env.UAGATE_CHROMIUM || "/usr/bin/chromium";
const OUT = process.env.UAGATE_TEST_OUTPUT || path.join(ROOT, "target", "test-output", "browser");
const STEP_MS = 15_000;
const ADMIN = ["ada", "ada-console-pass-1"];

let tmp;
let proc;
let console_url;
let opc_url;
let setup_code;
let browser;
let serverLog = "";

/** Runs a program (bounded); resolves {code, stdout, stderr}. */
function run(cmd, args) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: 60_000, killSignal: "SIGKILL" }, (err, stdout, stderr) => {
      if (err && typeof err.code !== "number") reject(new Error(`${cmd}: ${err.message}\n${stderr}`));
      else resolve({ code: err ? err.code : 0, stdout, stderr });
    });
  });
}

/** The asyncua client's view: {service_level, state} or {error}. */
async function uaRead() {
  const r = await run(PYTHON, [path.join(HERE, "uaclient.py"), "read", opc_url, path.join(tmp, "client")]);
  return JSON.parse(r.stdout.trim().split("\n").pop());
}

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "uagate-browser-"));
  fs.mkdirSync(OUT, { recursive: true });
  const data = path.join(tmp, "data");
  const cfg = path.join(tmp, "uagate.toml");
  fs.writeFileSync(cfg, `[listen]\nopc_tcp = "127.0.0.1:0"\n[server]\napplication_name = "uagate-browser"\nmax_session_count = 50\n`);
  let r = await run(UAGATE_BIN, ["--data", data, "config", "import", cfg]);
  assert.equal(r.code, 0, r.stderr);
  r = await run(PYTHON, [path.join(HERE, "uaclient.py"), "gen", path.join(tmp, "client")]);
  assert.equal(r.code, 0, r.stderr);

  proc = spawn(UAGATE_BIN, ["--data", data, "run"], { stdio: ["ignore", "pipe", "pipe"] });
  const codeSeen = new Promise((resolve) => {
    proc.stderr.on("data", (chunk) => {
      serverLog += chunk.toString();
      const m = serverLog.match(/setup code ([0-9a-f]{16})/);
      if (m) resolve(m[1]);
    });
  });
  const lines = readline.createInterface({ input: proc.stdout });
  const ready = new Promise((resolve, reject) => {
    const got = [];
    lines.on("line", (l) => {
      got.push(l);
      if (got.length === 3) resolve(got);
    });
    proc.on("exit", (c) => reject(new Error(`uagate exited (${c}) before READY:\n${serverLog}`)));
  });
  const timeout = (ms, what) => new Promise((_, rej) => setTimeout(() => rej(new Error(`${what} within ${ms} ms\n${serverLog}`)), ms).unref());
  const [readyLine, , consoleLine] = await Promise.race([ready, timeout(60_000, "no READY/TLS/CONSOLE lines")]);
  opc_url = readyLine.match(/^READY opc\.tcp=(\S+)$/)[1];
  console_url = consoleLine.match(/^CONSOLE (https:\/\/127\.0\.0\.1:\d+\/)$/)[1];
  setup_code = await Promise.race([codeSeen, timeout(10_000, "no setup code in the log")]);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  if (proc && proc.exitCode === null) {
    proc.kill("SIGTERM");
    await Promise.race([new Promise((r) => proc.on("exit", r)), new Promise((r) => setTimeout(r, 10_000).unref())]);
    if (proc.exitCode === null) proc.kill("SIGKILL");
  }
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

async function newPage(opts = {}) {
  // The appliance's certificate is self-signed; the Python suite verifies it properly.
  const context = await browser.newContext({ ignoreHTTPSErrors: true, baseURL: console_url, ...opts });
  context.setDefaultTimeout(STEP_MS);
  return context.newPage();
}

/** Waits for the page's notice (a change was made); fails with the page's error otherwise. */
async function notice(page) {
  await page.waitForSelector("#notice, #error");
  const error = await page.$("#error");
  if (error) assert.fail(`the console refused: ${await error.textContent()}`);
  return page.textContent("#notice");
}

/** Whether the page fits its viewport's width (no horizontal scrolling). */
async function noOverflow(page) {
  return page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

test("the console end to end", async (t) => {
  const page = await newPage();

  await t.test("first start: setup creates the first admin", async () => {
    await page.goto("/");
    assert.match(page.url(), /\/login\?next=/);
    await shot(page, "01-login-first-start");
    await page.click("text=create the first administrator");
    await page.fill("input[name=code]", "0000000000000000");
    await page.fill("input[name=username]", ADMIN[0]);
    await page.fill("input[name=password]", ADMIN[1]);
    await page.click("button[type=submit]");
    assert.match(await page.textContent("#error"), /Wrong or expired setup code/);
    await page.fill("input[name=code]", setup_code);
    await page.fill("input[name=username]", ADMIN[0]);
    await page.fill("input[name=password]", ADMIN[1]);
    await page.click("button[type=submit]");
    await page.waitForURL(console_url);
    assert.equal(await page.textContent("#server-state"), "running");
    const cookies = await page.context().cookies();
    const session = cookies.find((c) => c.name === "uagate_token");
    assert.ok(session, "session cookie set");
    assert.equal(session.httpOnly, true);
    assert.equal(session.secure, true);
    assert.equal(session.sameSite, "Strict");
    await shot(page, "02-dashboard");
  });

  await t.test("logout, then login (a wrong password is refused)", async () => {
    await page.click("header form.who button");
    await page.waitForURL(/\/login$/);
    await page.goto("/limits");
    assert.match(page.url(), /\/login\?next=%2Flimits/);
    await page.fill("input[name=username]", ADMIN[0]);
    await page.fill("input[name=password]", "not the password");
    await page.click("button[type=submit]");
    assert.match(await page.textContent("#error"), /wrong user name or password/);
    await page.fill("input[name=username]", ADMIN[0]);
    await page.fill("input[name=password]", ADMIN[1]);
    await page.click("button[type=submit]");
    await page.waitForURL(/\/limits$/);
  });

  await t.test("a session ended in another tab: the whole page goes to the login, says why, and comes back", async () => {
    // The Field connections page refreshes its live table every 2 s.
    await page.goto("/fields?edit=nothing");
    const other = await page.context().newPage();
    await other.goto("/");
    await other.click("header form.who button");
    await other.waitForURL(/\/login$/);
    await other.close();
    await page.waitForURL(/\/login\?/, { timeout: 10_000 });
    const url = new URL(page.url());
    assert.equal(url.searchParams.get("next"), "/fields?edit=nothing", page.url());
    assert.match(await page.textContent("#expired"), /Your session expired/);
    await shot(page, "01b-login-session-expired");
    await page.fill("input[name=username]", ADMIN[0]);
    await page.fill("input[name=password]", ADMIN[1]);
    await page.click("button[type=submit]");
    await page.waitForURL(/\/fields\?edit=nothing$/);
    // The whole page: styled, with the navigation, not a bare fragment.
    assert.ok(await page.$("header.top nav a[href='/limits']"), "the navigation is there");
    assert.equal(await page.textContent("h1"), "Field connections");
  });

  await t.test("a browser gets pages, not JSON: unknown address, form opened before the last login", async () => {
    const r = await page.goto("/nonexistent");
    assert.equal(r.status(), 404);
    assert.equal(await page.textContent("h1"), "Page not found");
    assert.doesNotMatch(await page.textContent("body"), /"code"/);
    await shot(page, "01c-page-not-found");
    await page.click("#way-on");
    await page.waitForURL(console_url);
    // Tab A holds a form; tab B logs out and in again; tab A's form is then sent.
    await page.goto("/service-level");
    const other = await page.context().newPage();
    await other.goto("/");
    await other.click("header form.who button");
    await other.waitForURL(/\/login$/);
    await other.fill("input[name=username]", ADMIN[0]);
    await other.fill("input[name=password]", ADMIN[1]);
    await other.click("button[type=submit]");
    await other.waitForURL(console_url);
    await other.close();
    await page.fill("#override-level", "42");
    await page.click("#override-form button[type=submit]");
    await page.waitForSelector("#problem");
    assert.match(await page.textContent("#problem"), /This form was opened before you last logged in, so it was not saved/);
    assert.ok(await page.$("header.top nav a[href='/limits']"), "in the console's layout");
    await shot(page, "01d-form-before-login");
    await page.click("#way-on");
    await page.waitForURL(/\/service-level$/);
    assert.equal(await page.textContent("#level-source"), "computed", "nothing was changed");
  });

  await t.test("a stage limit: the plan preview follows the typing, invalid cannot be applied", async () => {
    await page.goto("/limits");
    const planLine = async () =>
      (await page.textContent("#plan-lines")).split("\n").find((l) => l.startsWith("RequestExecution"));
    const beforeLine = await planLine();
    assert.ok(beforeLine, "the plan lists RequestExecution");
    const input = page.locator("input[name='request_execution.capacity']");
    const ownerLimit = page.locator("input[name='request_execution.owner_hard_limit']");
    const placeholderBefore = await ownerLimit.getAttribute("placeholder");
    await input.fill("24");
    await page.waitForFunction(() =>
      (document.querySelector("#plan-lines")?.textContent || "").split("\n").some((l) => l.startsWith("RequestExecution") && /\b24\b/.test(l)),
    );
    assert.notEqual(await planLine(), beforeLine);
    // What an empty field means follows the capacity as typed.
    await page.waitForFunction(
      (before) => document.querySelector("input[name='request_execution.owner_hard_limit']").placeholder !== before,
      placeholderBefore,
    );
    assert.equal(await page.isEnabled("#apply"), true);
    await input.fill("lots");
    await page.waitForSelector("#plan-error");
    // In the page's words, naming the input's label, not the setting's key.
    assert.match(await page.textContent("#plan-error"), /^RequestExecution Capacity: “lots” is not a number; enter a whole number/);
    assert.doesNotMatch(await page.textContent("#plan-error"), /isolation\.|server\./);
    // ... and next to the field that causes it.
    await page.waitForSelector("td:has(input[name='request_execution.capacity']) .field-error");
    assert.equal(await input.getAttribute("aria-invalid"), "true");
    assert.equal(await page.isDisabled("#apply"), true);
    await shot(page, "03-limits-invalid");
    await input.fill("24");
    // An error the plan gives for a stage override by its position (`isolation.stages[0].capacity`)
    // also goes next to its input, which keeps what was typed.
    const connection = page.locator("input[name='connection.capacity']");
    await connection.fill("110");
    await page.waitForSelector("td:has(input[name='connection.capacity']) .field-error");
    assert.match(await page.textContent("td:has(input[name='connection.capacity']) .field-error"), /^Connection Capacity can only be lowered: enter 1 to \d+, or leave it empty for \d+\.$/);
    assert.equal(await connection.getAttribute("aria-invalid"), "true");
    assert.equal(await connection.inputValue(), "110");
    assert.match(await page.textContent("#plan-error"), /^Connection Capacity can only be lowered/);
    assert.equal(await page.isDisabled("#apply"), true);
    await shot(page, "03b-limits-connection-too-high");
    await connection.fill("");
    await page.waitForSelector("#plan-lines");
    assert.equal(await page.$("td:has(input[name='connection.capacity']) .field-error"), null);
    await page.waitForSelector("#plan-lines");
    assert.equal(await page.isEnabled("#apply"), true);
    await page.click("#apply");
    // Stage capacities size the pipeline at start: the console says so
    // (it used to claim "applied live" while the gateway refused it).
    assert.match(await notice(page), /takes effect at the next restart, needed by: Stage limits \(isolation\.stages/);
    // ... and every page says what waits for the restart until it comes.
    assert.match(await page.textContent("#restart-banner"), /not in force until the gateway restarts: Stage limits \(isolation\.stages/);
    assert.equal(await page.inputValue("input[name='request_execution.capacity']"), "24");
    assert.equal(await page.$("td .field-error"), null, "no stale error");
    await shot(page, "04-limits-applied");
    // The notice of that change goes as soon as the form changes again.
    await input.fill("25");
    assert.equal(await page.$("#notice"), null);
    await input.fill("24");
  });

  await t.test("a trusted owner with an ingress rule", async () => {
    await page.goto("/owners");
    await page.fill("#owner-key", "scada-main");
    await page.fill("#owner-weight", "4");
    await page.fill("#owner-reservations", "request_execution 2\nsession_establishment 1");
    // Without an address range the first owner is refused, in the form's words; nothing is stored.
    await page.click("#owner-form button[type=submit]");
    assert.match(await page.textContent("#error"), /^Callers from: the first trusted owner needs the address range of its callers/);
    assert.equal(await page.$("#owners"), null);
    await page.fill("#owner-key", "scada-main");
    await page.fill("#owner-weight", "4");
    await page.fill("#owner-reservations", "request_execution 2\nsession_establishment 1");
    await page.fill("#owner-ingress", "127.0.0.64/26");
    await page.click("#owner-form button[type=submit]");
    // The first owner switches the profile, in the same change.
    assert.match(await notice(page), /isolation\.mode/);
    assert.match(await page.textContent("#owners"), /scada-main/);
    const row = await page.textContent("#ingress tbody");
    assert.match(row, /127\.0\.0\.64\/26/);
    assert.match(row, /owner scada-main/);
    // A second rule through the ingress form.
    await page.fill("#ingress-cidr", "127.0.0.200");
    await page.selectOption("#ingress-target", "owner:scada-main");
    await page.click("#ingress-form button[type=submit]");
    await notice(page);
    assert.match(await page.textContent("#ingress tbody"), /127\.0\.0\.200/);
    // An address range that is not one is refused in the form's words, and nothing is stored.
    await page.fill("#ingress-cidr", "not-an-address");
    await page.click("#ingress-form button[type=submit]");
    assert.match(await page.textContent("#error"), /^Not saved: Address range: `not-an-address` is not an IP address or network/);
    assert.doesNotMatch(await page.textContent("#ingress tbody"), /not-an-address/);
    await shot(page, "05-owners");
  });

  await t.test("trust a rejected certificate with one click", async () => {
    const refused = await uaRead();
    assert.ok(refused.error, `an unknown client certificate is refused: ${JSON.stringify(refused)}`);
    await page.goto("/certificates");
    const row = page.locator("#rejected tbody tr", { hasText: "uagate-browser-test" });
    assert.equal(await row.count(), 1);
    await shot(page, "06-certificates-rejected");
    await row.locator("button.trust").click();
    await notice(page);
    assert.equal(await page.locator("#trusted tbody tr", { hasText: "uagate-browser-test" }).count(), 1);
    assert.equal(await page.locator("#rejected tbody tr", { hasText: "uagate-browser-test" }).count(), 0);
    const ok = await uaRead();
    assert.deepEqual(ok, { service_level: 255, state: 0 });
    await shot(page, "07-certificates-trusted");
  });

  await t.test("the Sessions page with a client connected: no sideways scrolling at 1366 and 390 px", async () => {
    const client = spawn(PYTHON, [path.join(HERE, "uaclient.py"), "hold", opc_url, path.join(tmp, "client"), "60"], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    try {
      const [line] = await Promise.race([
        new Promise((resolve) => readline.createInterface({ input: client.stdout }).on("line", (l) => resolve([l]))),
        new Promise((_, rej) => setTimeout(() => rej(new Error("the asyncua client did not connect")), 30_000).unref()),
      ]);
      assert.deepEqual(JSON.parse(line), { connected: true });
      await page.goto("/sessions");
      await page.waitForSelector("#sessions tbody tr");
      assert.match(await page.textContent("#sessions"), /operator station HMI-07/);
      assert.ok(await noOverflow(page), "no horizontal scrolling at 1366 px");
      await shot(page, "13b-sessions-client-1366");
      const narrow = await newPage({ viewport: { width: 390, height: 844 } });
      await narrow.context().addCookies(await page.context().cookies());
      await narrow.goto("/sessions");
      await narrow.waitForSelector("#sessions tbody tr");
      await shot(narrow, "13c-sessions-client-390");
      assert.ok(await noOverflow(narrow), "no horizontal scrolling at 390 px");
      await narrow.context().close();
    } finally {
      client.kill("SIGTERM");
    }
  });

  await t.test("maintenance with confirmation, seen by asyncua, and back to running", async () => {
    await page.goto("/maintenance");
    await page.selectOption("#maintenance-state", "suspended");
    await page.fill("#maintenance-reason", "firmware update");
    await page.click("#maintenance-submit");
    await page.waitForSelector("#confirm");
    assert.match(await page.textContent("#confirm-summary"), /suspended.*Reason: firmware update/s);
    // Nothing changed before the confirmation.
    assert.deepEqual(await uaRead(), { service_level: 255, state: 0 });
    await shot(page, "08-maintenance-confirm");
    await page.click("#confirm");
    await notice(page);
    assert.equal(await page.textContent("#server-state"), "suspended");
    assert.deepEqual(await uaRead(), { service_level: 0, state: 3 });
    await shot(page, "09-maintenance-suspended");
    await page.click("#back-to-running");
    await page.click("#confirm");
    await notice(page);
    assert.equal(await page.textContent("#server-state"), "running");
    assert.deepEqual(await uaRead(), { service_level: 255, state: 0 });
  });

  await t.test("the other pages render; the audit log shows before and after", async () => {
    for (const [p, name] of [
      ["/service-level", "10-service-level"],
      ["/users", "11-users"],
      ["/fields", "12-fields"],
      ["/sessions", "13-sessions"],
    ]) {
      const r = await page.goto(p);
      assert.equal(r.status(), 200, p);
      await shot(page, name);
    }
    // The audit log: a sentence per entry, no raw kinds, no OPC UA ticks.
    await page.setViewportSize({ width: 1366, height: 768 });
    await page.goto("/audit");
    const audit = await page.textContent("#audit");
    const me = ADMIN[0];
    assert.match(audit, new RegExp(`${me} put the gateway into maintenance \\(suspended\\): firmware update`));
    assert.match(audit, new RegExp(`${me} ended maintenance: the gateway is running again \\(it was suspended\\)`));
    assert.match(audit, /The gateway rejected the untrusted certificate "[^"]*uagate-browser-test/);
    assert.match(audit, new RegExp(`${me} trusted the certificate "[^"]*uagate-browser-test[^"]*".*which had been rejected`));
    assert.match(audit, new RegExp(`${me} changed (the configuration|\\d+ settings of the configuration)`));
    assert.doesNotMatch(audit, /setting\.set|trust\.add|estimated_return|\b\d{15,}\b/);
    assert.ok(await noOverflow(page), "no horizontal scrolling at 1366 px");
    await shot(page, "audit-1366");

    // The kind filter: only configuration changes, each listing only what changed.
    await page.selectOption("#audit-kind", "configuration");
    await page.click("#audit-filters button[type=submit]");
    await page.waitForURL(/kind=configuration/);
    const kinds = await page.$$eval("#audit tbody tr", (rows) => rows.map((r) => r.dataset.kind));
    assert.ok(kinds.length >= 2, `configuration entries: ${kinds}`);
    assert.deepEqual([...new Set(kinds)], ["configuration"]);
    const config = await page.textContent("#audit");
    assert.match(config, /isolation\.stages\[request_execution\]\.capacity: .*→ 24/);
    assert.match(config, /isolation\.mode: \S+ → trusted_reservations/);
    assert.match(config, new RegExp(me));
    assert.doesNotMatch(config, /put the gateway into maintenance/);
    const unchanged = await page.$$eval("ul.changes li", (items) =>
      items.filter((li) => li.querySelector(".before").textContent === li.querySelector(".after").textContent).length,
    );
    assert.equal(unchanged, 0, "a setting listed with the same value before and after");
    await shot(page, "14-audit");

    // Export CSV: the same filter, downloaded with the session.
    const [download] = await Promise.all([page.waitForEvent("download"), page.click("#audit-csv")]);
    assert.equal(download.suggestedFilename(), "uagate-audit.csv");
    const csv = fs.readFileSync(await download.path(), "utf8");
    const lines = csv.split("\n");
    assert.equal(lines[0], "time_utc,user,kind,sentence,changes");
    assert.match(csv, new RegExp(`^\\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z,${me},configuration,`, "m"));
    assert.match(csv, /isolation\.stages\[request_execution\]\.capacity: .* -> 24/);
    assert.doesNotMatch(csv, /,maintenance,/);
    const r = await page.request.get("/audit.csv?kind=maintenance");
    assert.equal(r.status(), 200);
    assert.match(r.headers()["content-type"], /^text\/csv/);
    assert.match(r.headers()["content-disposition"], /^attachment/);
    assert.match(await r.text(), new RegExp(`,${me},maintenance,"?${me} put the gateway into maintenance`));

    // A time range in the future holds nothing.
    await page.goto("/audit");
    await page.fill("#audit-from", "2099-01-01T00:00");
    await page.click("#audit-filters button[type=submit]");
    await page.waitForURL(/from=2099/);
    await page.waitForSelector("#audit-empty");

    // At 390 px in another time zone: local times (UTC on hover), nothing scrolls sideways.
    const narrow = await newPage({ viewport: { width: 390, height: 844 }, timezoneId: "Asia/Kolkata" });
    await narrow.context().addCookies(await page.context().cookies());
    await narrow.goto("/audit");
    // Chromium's ICU may still call it by its older name.
    assert.match(await narrow.textContent("th.when .tz-name"), /^Asia\/(Kolkata|Calcutta)$/);
    const first = narrow.locator("#audit tbody td.when time").first();
    const iso = await first.getAttribute("datetime");
    const utc = new Date(iso);
    const kolkata = new Date(utc.getTime() + 330 * 60_000).toISOString().replace("T", " ").slice(0, 19);
    assert.equal(await first.textContent(), kolkata);
    assert.equal(await first.getAttribute("title"), `${utc.toISOString().replace("T", " ").slice(0, 19)} UTC`);
    assert.ok(await noOverflow(narrow), "no horizontal scrolling at 390 px");
    await shot(narrow, "audit-390");
    await narrow.context().close();
  });

  await t.test("without JavaScript the pages still read and forms still post", async () => {
    const plain = await newPage({ javaScriptEnabled: false });
    await plain.goto("/login");
    await plain.fill("input[name=username]", ADMIN[0]);
    await plain.fill("input[name=password]", ADMIN[1]);
    await plain.click("button[type=submit]");
    await plain.waitForURL(console_url);
    assert.equal(await plain.textContent("#server-state"), "running");
    await plain.goto("/limits");
    await plain.fill("input[name='request_execution.capacity']", "20");
    await plain.click("noscript button, button[formaction='/limits/preview']");
    assert.match(await plain.textContent("#plan-lines"), /RequestExecution.*\b20\b/);
    await plain.context().close();
  });

  await t.test("removals and closing a session ask first, naming what goes; dismissed, nothing changes", async () => {
    const timeout = (ms, what) => new Promise((_, rej) => setTimeout(() => rej(new Error(`no ${what} within ${ms} ms`)), ms).unref());
    /** Clicks `button` answering its question with `accept`; returns the question. */
    const answer = async (button, accept) => {
      const asked = new Promise((resolve) =>
        page.once("dialog", async (d) => {
          resolve(d.message());
          await (accept ? d.accept() : d.dismiss());
        }),
      );
      await button.click();
      return Promise.race([asked, timeout(5_000, "question before the action")]);
    };
    // A user.
    await page.goto("/users");
    await page.fill("#user-form input[name=username]", "otto");
    await page.fill("#user-form input[name=password]", "otto-console-pass-1");
    await page.click("#user-form button[type=submit]");
    await notice(page);
    const otto = page.locator('#users tr[data-user="otto"] button.danger');
    assert.equal(await answer(otto, false), "Remove user otto? They can no longer log in, and their open sessions end.");
    await page.reload();
    assert.equal(await page.locator('#users tr[data-user="otto"]').count(), 1, "dismissed: otto stays");
    assert.equal(await answer(otto, true), "Remove user otto? They can no longer log in, and their open sessions end.");
    assert.match(await notice(page), /otto/);
    assert.equal(await page.locator('#users tr[data-user="otto"]').count(), 0, "accepted: otto is gone");

    // A northbound session (an earlier test's client may still have one, until it times out).
    await page.goto("/sessions");
    const earlier = await page.$$eval("#sessions tbody tr[data-session]", (rows) => rows.map((r) => r.dataset.session));
    const client = spawn(PYTHON, [path.join(HERE, "uaclient.py"), "hold", opc_url, path.join(tmp, "client"), "60"], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    try {
      const [line] = await Promise.race([
        new Promise((resolve) => readline.createInterface({ input: client.stdout }).on("line", (l) => resolve([l]))),
        new Promise((_, rej) => setTimeout(() => rej(new Error("the asyncua client did not connect")), 30_000).unref()),
      ]);
      assert.deepEqual(JSON.parse(line), { connected: true });
      await page.goto("/sessions");
      const ids = await page.$$eval("#sessions tbody tr[data-session]", (rows) => rows.map((r) => r.dataset.session));
      const fresh = ids.filter((id) => !earlier.includes(id));
      assert.equal(fresh.length, 1, `one new session: ${ids}`);
      const row = page.locator(`#sessions tbody tr[data-session="${fresh[0]}"]`);
      assert.match(await row.textContent(), /HMI-07/);
      const close = row.locator("button.danger");
      assert.match(await answer(close, false), /^Close the session of Line 3 packaging hall north, operator station HMI-07 \(asyncua\)[^?]*\? The client is disconnected and has to reconnect\.$/);
      await page.reload();
      assert.equal(await row.count(), 1, "dismissed: the session stays");
      await answer(close, true);
      await notice(page);
      assert.equal(await row.count(), 0, "accepted: the session is closed");
    } finally {
      client.kill("SIGTERM");
    }

    // A trusted owner (with its ingress rules).
    await page.goto("/owners");
    const owner = page.locator("#owners tr", { hasText: "scada-main" }).locator("button.danger");
    assert.match(await answer(owner, false), /^Remove trusted owner scada-main\? Its reserves and its address ranges go with it/);
    await page.reload();
    assert.equal(await page.locator("#owners tr", { hasText: "scada-main" }).count(), 1, "dismissed: the owner stays");
    await answer(owner, true);
    await notice(page);
    assert.equal(await page.$("#owners"), null, "accepted: the owner is gone");

    // A trusted certificate.
    await page.goto("/certificates");
    const cert = page.locator("#trusted tbody tr", { hasText: "uagate-browser-test" });
    assert.match(await answer(cert.locator("button.danger"), false), /^Remove the trusted certificate .*uagate-browser-test.*\? Clients and field servers that present it are refused/);
    await page.reload();
    assert.equal(await cert.count(), 1, "dismissed: the certificate stays trusted");
    await shot(page, "14-certificates-before-remove");
    await answer(cert.locator("button.danger"), true);
    await notice(page);
    assert.equal(await page.locator("#trusted tbody tr", { hasText: "uagate-browser-test" }).count(), 0, "accepted: no longer trusted");
  });

  await page.context().close();
});
