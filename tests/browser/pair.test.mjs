// The Pair page in headless Chromium against two real `uagate run` appliances: invite on A, join
// on B, the read-only banner on the standby linking to the primary's console, a user made on A
// logging in on B, the forced promotion of B (with its confirmation) once A is killed, and A's
// diverged list after it returns. Screenshots at 1366x768 and 390 px wide go to
// $UAGATE_TEST_OUTPUT (default target/test-output/browser).

import { execFile, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
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
const CHROMIUM = process.env.UAGATE_CHROMIUM || "/usr/bin/chromium";
const OUT = process.env.UAGATE_TEST_OUTPUT || path.join(ROOT, "target", "test-output", "browser");
const STEP_MS = 15_000;
const ADMIN = ["ada", "ada-console-pass-1"];
const WIDE = { width: 1366, height: 768 };
const NARROW = { width: 390, height: 844 };
/** A SHA-256 fingerprint as the console writes every fingerprint. */
const FINGERPRINT = /^([0-9A-F]{2}:){31}[0-9A-F]{2}$/;

let tmp;
let browser;
const appliances = {};

/** Runs a program (bounded); resolves {code, stdout, stderr}. */
function run(cmd, args, input) {
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, args, { timeout: 60_000, killSignal: "SIGKILL" }, (err, stdout, stderr) => {
      if (err && typeof err.code !== "number") reject(new Error(`${cmd}: ${err.message}\n${stderr}`));
      else resolve({ code: err ? err.code : 0, stdout, stderr });
    });
    if (input !== undefined) child.stdin.end(input);
  });
}

/** A TCP port free on 127.0.0.1 now. */
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const timeout = (ms, what, log) =>
  new Promise((_, rej) => setTimeout(() => rej(new Error(`${what} within ${ms} ms\n${log()}`)), ms).unref());

/** `uagate run` on appliance `name` (its data directory stays across restarts). */
async function start(name) {
  const a = appliances[name];
  a.log = "";
  a.proc = spawn(UAGATE_BIN, ["--data", a.data, "run"], { stdio: ["ignore", "pipe", "pipe"] });
  a.proc.stderr.on("data", (chunk) => {
    a.log += chunk.toString();
  });
  const lines = readline.createInterface({ input: a.proc.stdout });
  const got = new Promise((resolve, reject) => {
    const seen = [];
    lines.on("line", (l) => {
      seen.push(l);
      if (l.startsWith("PAIR ")) resolve(seen);
    });
    a.proc.on("exit", (c) => reject(new Error(`uagate ${name} exited (${c}):\n${a.log}`)));
  });
  const seen = await Promise.race([got, timeout(60_000, `${name}: no PAIR line`, () => a.log)]);
  a.console = seen.find((l) => l.startsWith("CONSOLE ")).split(" ")[1];
  a.pair = seen.find((l) => l.startsWith("PAIR ")).split(" ")[1];
}

async function kill(name) {
  const p = appliances[name].proc;
  if (p && p.exitCode === null && p.signalCode === null) {
    const gone = new Promise((r) => p.on("exit", r));
    p.kill("SIGKILL");
    await gone;
  }
}

async function setupCode(name) {
  const a = appliances[name];
  const m = await Promise.race([
    new Promise((resolve) => {
      const look = () => {
        const found = a.log.match(/setup code ([0-9a-f]{16})/);
        if (found) resolve(found[1]);
        else setTimeout(look, 100);
      };
      look();
    }),
    timeout(10_000, `${name}: no setup code`, () => a.log),
  ]);
  return m;
}

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "uagate-browser-pair-"));
  fs.mkdirSync(OUT, { recursive: true });
  for (const name of ["a", "b"]) {
    const data = path.join(tmp, name);
    const cfg = path.join(tmp, `${name}.toml`);
    const port = await freePort();
    fs.writeFileSync(
      cfg,
      `[listen]\nopc_tcp = "127.0.0.1:0"\npair = "127.0.0.1:${port}"\n[server]\napplication_uri = "urn:uagate:browser-${name}"\n`,
    );
    const r = await run(UAGATE_BIN, ["--data", data, "config", "import", cfg]);
    assert.equal(r.code, 0, r.stderr);
    appliances[name] = { data };
    await start(name);
  }
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  for (const name of Object.keys(appliances)) await kill(name);
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** A page in its own browser context (both consoles are on 127.0.0.1: separate cookies). */
async function newPage(name, viewport = WIDE) {
  const context = await browser.newContext({ ignoreHTTPSErrors: true, baseURL: appliances[name].console, viewport });
  context.setDefaultTimeout(STEP_MS);
  return context.newPage();
}

async function firstAdmin(page, code) {
  await page.goto("/setup");
  await page.fill("input[name=code]", code);
  await page.fill("input[name=username]", ADMIN[0]);
  await page.fill("input[name=password]", ADMIN[1]);
  await page.click("button[type=submit]");
  await page.waitForURL(/\/$/);
}

async function login(page, user, password) {
  await page.goto("/login");
  await page.fill("input[name=username]", user);
  await page.fill("input[name=password]", password);
  await page.click("button[type=submit]");
  await page.waitForURL((u) => !u.pathname.startsWith("/login"));
}

async function notice(page, ms = STEP_MS) {
  await page.waitForSelector("#notice, #error", { timeout: ms });
  const error = await page.$("#error");
  if (error) assert.fail(`the console refused: ${await error.textContent()}`);
  return page.textContent("#notice");
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

/** Reloads /pair until the role reads `role` (bounded). */
async function waitRole(page, role) {
  const t0 = Date.now();
  for (;;) {
    await page.goto("/pair");
    if ((await page.textContent("#pair-role")) === role) return;
    assert.ok(Date.now() - t0 < 30_000, `role never became ${role}: ${await page.textContent("#pair-role")}`);
    await page.waitForTimeout(500);
  }
}

/** No horizontal scrolling at the page's width. */
async function fits(page) {
  const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(over <= 1, `the page is ${over} px wider than the window`);
}

test("the Pair page: invite, join, standby banner, promotion, diverged", async (t) => {
  const pa = await newPage("a");
  const pb = await newPage("b");
  await firstAdmin(pa, await setupCode("a"));
  await firstAdmin(pb, await setupCode("b"));

  let code;
  let inviteFingerprint;
  await t.test("A invites: its pair address, a one-time code and its fingerprint on the page", async () => {
    await pa.goto("/pair");
    assert.equal(await pa.textContent("#pair-role"), "standalone");
    await shot(pa, "pair-01-standalone");
    await pa.click("#pair-invite");
    code = (await pa.textContent("#invite-code")).trim();
    assert.match(code, /^[0-9A-Z]{4}(-[0-9A-Z]{4}){4}$/);
    // The address to type on B, ready to copy: A's pair listener (a specific address here).
    const addrs = await pa.$$eval(".invite-addr", (els) => els.map((e) => e.textContent.trim()));
    assert.deepEqual(addrs, [appliances.a.pair]);
    inviteFingerprint = (await pa.textContent("#invite-fingerprint")).trim();
    assert.match(inviteFingerprint, FINGERPRINT);
    // The copy buttons copy what they stand by.
    await pa.context().grantPermissions(["clipboard-read", "clipboard-write"]);
    await pa.click('button[data-copy="invite-addr-1"]');
    assert.equal(await pa.evaluate(() => navigator.clipboard.readText()), appliances.a.pair);
    await pa.click('button[data-copy="invite-code"]');
    assert.equal(await pa.evaluate(() => navigator.clipboard.readText()), code);
    await shot(pa, "pair-02-invite");
    // At 390 px: the same invite (a second code; both stay valid), without sideways scrolling.
    const narrow = await newPage("a", NARROW);
    await login(narrow, ...ADMIN);
    await narrow.goto("/pair");
    await narrow.click("#pair-invite");
    await narrow.waitForSelector("#invite-shown");
    await fits(narrow);
    await shot(narrow, "pair-02-invite-390");
  });

  await t.test("B's failed joins say what to do in plain words, the raw cause in small print", async () => {
    await pb.goto("/pair");
    // Nothing listens there.
    const nowhere = `127.0.0.1:${await freePort()}`;
    await pb.fill("#join-addr", nowhere);
    await pb.fill("#join-code", code);
    await pb.click("#join-submit");
    await pb.waitForSelector("#error");
    const unreachable = await pb.textContent("#error");
    assert.match(unreachable, new RegExp(`cannot be reached at ${nowhere}.*gateway is running.*firewalls`, "s"));
    assert.match(await pb.textContent("#error-detail"), /Connection refused|os error/);
    // What was typed stays in the form.
    assert.equal(await pb.inputValue("#join-addr"), nowhere);
    assert.equal(await pb.inputValue("#join-code"), code);
    await shot(pb, "pair-02b-join-unreachable-1366");
    // A's console port answers, but it is not a pair listener.
    await pb.fill("#join-addr", new URL(appliances.a.console).host);
    await pb.click("#join-submit");
    await pb.waitForSelector("#error");
    assert.match(await pb.textContent("#error"), /not as the pair address of a uagate appliance.*pair port/s);
    // A wrong code (A's real address): A refuses it.
    await pb.fill("#join-addr", appliances.a.pair);
    await pb.fill("#join-code", "0000-0000-0000-0000-0000");
    await pb.click("#join-submit");
    await pb.waitForSelector("#error");
    assert.match(await pb.textContent("#error"), /refused the code.*Press Invite on the other appliance for a new code/s);
    assert.match(await pb.textContent("#error-detail"), /refused: the pairing code is wrong, used or expired/);
    const narrow = await newPage("b", NARROW);
    await login(narrow, ...ADMIN);
    await narrow.goto("/pair");
    await narrow.fill("#join-addr", nowhere);
    await narrow.fill("#join-code", code);
    await narrow.click("#join-submit");
    await narrow.waitForSelector("#error-detail");
    await fits(narrow);
    await shot(narrow, "pair-02b-join-unreachable-390");
    // A wrong try costs the invite one of its five: A's code still works.
  });

  await t.test("B joins with it and shows the read-only banner", async () => {
    await pb.goto("/pair");
    await pb.fill("#join-addr", appliances.a.pair);
    await pb.fill("#join-code", code);
    await pb.click("#join-submit");
    // The join waits for A's snapshot: a loaded machine may take a while.
    const joined = await notice(pb, 60_000);
    assert.match(joined, /Joined the pair/);
    // The fingerprint B saw, as the console writes every fingerprint: the one A's invite showed.
    assert.ok(joined.includes(inviteFingerprint), `${joined} / ${inviteFingerprint}`);
    // B now has A's users: the session made with B's own ended with them.
    assert.match(joined, /log in again with a user of that appliance/);
    // (when A's snapshot has arrived: a loaded machine may take a while).
    const loggedOutBy = Date.now() + 60_000;
    for (;;) {
      await pb.goto("/pair");
      if (new URL(pb.url()).pathname.startsWith("/login")) break;
      assert.ok(Date.now() < loggedOutBy, `still logged in on B with B's own user: ${pb.url()}`);
      await pb.waitForTimeout(500);
    }
    await login(pb, ...ADMIN);
    await waitRole(pb, "standby");
    const banner = await pb.textContent("#follower-banner");
    assert.match(banner, /This appliance is the standby; change settings on the primary at/);
    // The role is known from the join; the leader's address (and so the
    // link) from its first heartbeat, which a loaded machine may delay.
    const t1 = Date.now();
    while (!(await pb.$("#leader-console"))) {
      assert.ok(Date.now() - t1 < 30_000, `no link to the leader: ${await pb.textContent("#follower-banner")}`);
      await pb.waitForTimeout(500);
      await pb.goto("/pair");
    }
    assert.equal(await pb.getAttribute("#leader-console", "href"), `${appliances.a.console}pair`);
    // The primary's address in words, not only behind a link.
    assert.match(await pb.textContent("#follower-banner"), new RegExp(`on the primary at ${appliances.a.console}`));
    // Every page carries it.
    await pb.goto("/limits");
    assert.ok(await pb.$("#follower-banner"), "banner on /limits");
    // The settings the pair shares are shown read-only, with where to change them; no form
    // that the standby would refuse.
    const readOnly = {
      "/limits": ["#apply"],
      "/users": ["#user-form", "form[action='/users/role']", "form[action='/users/remove']"],
      "/owners": ["#owner-form", "#ingress-form"],
      "/fields": ["#field-editor"],
      "/certificates": ["#cert-form", "#crl-form"],
    };
    for (const [where, gone] of Object.entries(readOnly)) {
      await pb.goto(where);
      for (const sel of gone) assert.equal(await pb.$(sel), null, `${sel} on the standby's ${where}`);
      const note = await pb.textContent("#standby-note");
      assert.match(note, /this appliance is the standby\./, `${where}: ${note}`);
      assert.equal(await pb.getAttribute("#standby-note a", "href"), `${appliances.a.console}${where.slice(1)}`);
    }
    await pb.goto("/limits");
    assert.ok(await pb.$eval("#max_session_count", (i) => i.matches(":disabled")), "limits are shown, not edited");
    await shot(pb, "pair-03c-standby-limits-1366");
    await pb.goto("/users");
    assert.match(await pb.textContent("#users"), /ada\s*admin/);
    await shot(pb, "pair-03b-standby-users-1366");
    // A form posted anyway (an old tab, a script) is still refused by the standby.
    const posted = await pb.evaluate(async () => {
      const csrf = document.querySelector("input[name=_csrf]").value;
      const r = await fetch("/users", {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ _csrf: csrf, username: "mallory", password: "mallory-pass-1", role: "admin" }),
      });
      return { status: r.status, text: await r.text() };
    });
    assert.equal(posted.status, 409, posted.text);
    assert.match(posted.text, /not the configuration leader: write on/);
    await pb.goto("/users");
    assert.ok(!(await pb.textContent("#users")).includes("mallory"));
    await pb.goto("/pair");
    await shot(pb, "pair-03-standby-1366");
    const narrow = await newPage("b", NARROW);
    await login(narrow, ...ADMIN);
    await narrow.goto("/pair");
    await fits(narrow);
    await shot(narrow, "pair-03-standby-390");
    await narrow.goto("/users");
    await fits(narrow);
    await shot(narrow, "pair-03b-standby-users-390");
    // On A: two members, B in step.
    await waitRole(pa, "primary");
    const t0 = Date.now();
    while (!/in step/.test(await pa.textContent("#pair-members"))) {
      assert.ok(Date.now() - t0 < 15_000, await pa.textContent("#pair-members"));
      await pa.waitForTimeout(300);
      await pa.goto("/pair");
    }
    assert.equal(await pa.$("#follower-banner"), null);
    // The pair's fingerprint on the page is the one the invite showed, in the same format.
    assert.equal((await pa.textContent("#pair-fingerprint")).trim(), inviteFingerprint);
    // The primary keeps its forms.
    await pa.goto("/users");
    assert.ok(await pa.$("#user-form"));
    assert.equal(await pa.$("#standby-note"), null);
    // Certificates: every fingerprint (the OPC UA and the TLS certificate) in the same format,
    // the OPC UA thumbprint labelled as such, in the same format too.
    await pa.goto("/certificates");
    const fps = await pa.$$eval("#own code.fingerprint", (els) => els.map((e) => e.textContent.trim()));
    assert.equal(fps.length, 2, fps.join(" / "));
    for (const fp of fps) assert.match(fp, FINGERPRINT);
    assert.match((await pa.textContent("#own code.thumbprint")).trim(), /^([0-9A-F]{2}:){19}[0-9A-F]{2}$/);
    assert.match(await pa.textContent("#own"), /Thumbprint \(SHA-1\)/);
    const narrowCerts = await newPage("a", NARROW);
    await login(narrowCerts, ...ADMIN);
    await narrowCerts.goto("/certificates");
    await fits(narrowCerts);
    await shot(narrowCerts, "pair-04b-certificates-390");
    await pa.goto("/pair");
    await shot(pa, "pair-04-primary-1366");
    const narrowA = await newPage("a", NARROW);
    await login(narrowA, ...ADMIN);
    await narrowA.goto("/pair");
    await fits(narrowA);
    await shot(narrowA, "pair-04-primary-390");
  });

  await t.test("a user made on A logs in to B's console", async () => {
    const r = await run(UAGATE_BIN, ["--data", appliances.a.data, "user", "add", "olga", "--role", "operator"], "olga-console-pass-1\n");
    assert.equal(r.code, 0, r.stderr);
    const page = await newPage("b");
    const t0 = Date.now();
    for (;;) {
      await page.goto("/login");
      await page.fill("input[name=username]", "olga");
      await page.fill("input[name=password]", "olga-console-pass-1");
      await page.click("button[type=submit]");
      await page.waitForLoadState();
      if (!new URL(page.url()).pathname.startsWith("/login")) break;
      assert.ok(Date.now() - t0 < 10_000, "olga never could log in on B");
      await page.waitForTimeout(300);
    }
    assert.ok(await page.$("#follower-banner"));
  });

  await t.test("maintenance on the primary says where the configuration leadership goes", async () => {
    await pa.goto("/maintenance");
    await pa.selectOption("#maintenance-state", "suspended");
    await pa.click("#maintenance-submit");
    await pa.waitForSelector("#confirm");
    // Pair without witness: the primary keeps the leadership.
    assert.match(await pa.textContent("#confirm-summary"), /keeps it \(without a witness/);
    await shot(pa, "pair-05-maintenance-confirm-1366");
    await pa.click("#confirm");
    assert.match(await notice(pa), /leadership stays on this appliance.*Server state is now suspended/s);
    await pa.click("#back-to-running");
    await pa.click("#confirm");
    assert.match(await notice(pa), /Server state is now running/);
    await waitRole(pa, "primary");
  });

  await t.test("A changes alone, dies; B is promoted after a confirmation", async () => {
    // B down while A makes a change B never gets.
    await kill("b");
    const r = await run(UAGATE_BIN, ["--data", appliances.a.data, "user", "add", "zed", "--role", "viewer"], "zed-console-pass-1\n");
    assert.equal(r.code, 0, r.stderr);
    await kill("a");
    await start("b");
    const page = await newPage("b");
    await login(page, ...ADMIN);
    await page.goto("/pair");
    await page.click("#pair-promote");
    await page.waitForSelector("#promote-confirm-form");
    assert.match(await page.textContent("#promote-confirm-form"), /diverged/);
    await shot(page, "pair-05-promote-confirm");
    await page.click("#promote-confirm");
    assert.match(await notice(page, 60_000), /primary now \(epoch \d+\)/);
    await waitRole(page, "primary");
    // The banner is decided when a request starts and the role shown while
    // the page is made: a page made during the promotion may show both.
    const t0 = Date.now();
    while (await page.$("#follower-banner")) {
      assert.ok(Date.now() - t0 < 15_000, "the standby banner stayed on the promoted appliance");
      await page.waitForTimeout(300);
      await page.goto("/pair");
    }
  });

  await t.test("A returns, steps down and lists its diverged change", async () => {
    await start("a");
    const page = await newPage("a");
    await login(page, ...ADMIN);
    await waitRole(page, "standby");
    const t0 = Date.now();
    while (!(await page.$("#pair-diverged"))) {
      assert.ok(Date.now() - t0 < 15_000, "no diverged list on A");
      await page.waitForTimeout(300);
      await page.goto("/pair");
    }
    const diverged = await page.textContent("#pair-diverged");
    assert.match(diverged, /user\.add/);
    assert.match(diverged, /zed/);
    // The banner links to B once A knows its new leader, and B's console
    // URL of its restart (announced by B, replicated to A: it may first
    // show the one from before).
    const t1 = Date.now();
    const linksToB = async () =>
      (await page.$("#leader-console")) &&
      (await page.getAttribute("#leader-console", "href")) === `${appliances.b.console}pair`;
    while (!(await linksToB())) {
      assert.ok(Date.now() - t1 < 15_000, "no banner linking to B on A");
      await page.waitForTimeout(300);
      await page.goto("/pair");
    }
    assert.equal(await page.getAttribute("#leader-console", "href"), `${appliances.b.console}pair`);
    await shot(page, "pair-06-diverged-1366");
    const narrow = await newPage("a", NARROW);
    await login(narrow, ...ADMIN);
    await narrow.goto("/pair");
    await fits(narrow);
    await shot(narrow, "pair-06-diverged-390");

    // Reviewed: the admin removes the change from the list (after the
    // browser's confirmation).
    let asked = "";
    page.once("dialog", async (d) => {
      asked = d.message();
      await d.accept();
    });
    await page.click("#pair-diverged-clear");
    assert.match(await notice(page), /1 diverged change removed from the list/);
    assert.match(asked, /Remove this change from the list\?/);
    assert.equal(await page.$("#pair-diverged"), null, "the diverged list is still shown");
  });
});
