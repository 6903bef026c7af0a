// The System page in headless Chromium against a real `uagate demo` whose updater is pointed at the
// fake `rauc` (tests/fake-rauc/rauc, copied into a temporary directory with a real-shaped status
// sample beside it; UAGATE_RAUC, UAGATE_OS_RELEASE and UAGATE_REBOOT_REQUEST name them): the slots
// at a glance, an install that shows its progress and then its result, a refused bundle in plain
// words, and the restart with its confirmation step. Screenshots at 1366x768 and 390 px wide (no
// sideways scrolling) into $UAGATE_TEST_OUTPUT (default target/test-output/browser).

import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { chromium } from "playwright-core";

import { CHROMIUM, OUT, ROOT, UAGATE_BIN, firstAdmin, narrowLike, overflow, shot, stop, timeout as within } from "./common.mjs";

const STEP_MS = 15_000;
const ADMIN = ["sys", "sys-console-pass-1"];

let tmp;
let fake;
let demo;
let console_url;
let setup_code;
let browser;
let log = "";

const timeout = (ms, what) => within(ms, what, () => log);

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "uagate-system-"));
  fake = path.join(tmp, "fake-rauc");
  fs.mkdirSync(fake);
  fs.copyFileSync(path.join(ROOT, "tests", "fake-rauc", "rauc"), path.join(fake, "rauc"));
  fs.chmodSync(path.join(fake, "rauc"), 0o755);
  fs.copyFileSync(path.join(ROOT, "gateway", "system", "tests", "data", "booted-a-b-good.json"), path.join(fake, "status.json"));
  fs.writeFileSync(path.join(fake, "os-release"), 'PRETTY_NAME="uagate appliance"\nVERSION_ID="12"\nIMAGE_VERSION="2025.06.1"\n');
  fs.mkdirSync(OUT, { recursive: true });
  const data = path.join(tmp, "data");
  fs.mkdirSync(data);
  demo = spawn(UAGATE_BIN, ["--data", data, "demo", "--listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      UAGATE_RAUC: path.join(fake, "rauc"),
      UAGATE_OS_RELEASE: path.join(fake, "os-release"),
      UAGATE_REBOOT_REQUEST: path.join(fake, "reboot"),
    },
  });
  demo.stderr.on("data", (c) => (log += c.toString()));
  const lines = readline.createInterface({ input: demo.stdout });
  lines.on("line", (l) => (log += l + "\n"));
  const seen = new Promise((resolve, reject) => {
    const t = setInterval(() => {
      const m = log.match(/setup code ([0-9a-f]{16})/);
      const c = log.match(/^CONSOLE (https:\/\/127\.0\.0\.1:\d+\/)$/m);
      if (m && c) {
        clearInterval(t);
        resolve([c[1], m[1]]);
      }
    }, 100);
    t.unref();
    demo.on("exit", (c) => reject(new Error(`uagate demo exited (${c}):\n${log}`)));
  });
  [console_url, setup_code] = await Promise.race([seen, timeout(90_000, "demo console and setup code")]);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await stop(demo);
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** A bundle for the fake rauc (one setting a line, see tests/fake-rauc/rauc). */
function bundle(name, text) {
  const p = path.join(tmp, name);
  fs.writeFileSync(p, text);
  return p;
}

/** Screenshots of /system at both widths; fails on sideways scrolling at 390 px. */
async function bothWidths(page, narrow, name, prepare = async () => {}) {
  await shot(page, `system-${name}-1366`);
  const p = await narrow.newPage();
  await p.goto("/system");
  await prepare(p);
  await shot(p, `system-${name}-390`);
  assert.deepEqual(await overflow(p), [], `${name} scrolls sideways at 390 px`);
  await p.close();
}

test("the System page: slots, an install with progress and result, a refusal, the restart", async (t) => {
  const { context, page } = await firstAdmin(browser, console_url, setup_code, ADMIN, STEP_MS);
  const narrow = await narrowLike(browser, context, console_url, STEP_MS);

  await t.test("the slots and versions at a glance", async () => {
    await page.goto("/");
    await page.click("header nav a[href='/system']");
    await page.waitForURL(/\/system$/);
    assert.match(await page.textContent("#gateway-version"), /uagate \d+\.\d+\.\d+/);
    assert.match(await page.textContent("#image-version"), /2025\.06\.1/);
    assert.match(await page.textContent("#booted-slot"), /Running from\s*Slot A\s*Image 0\.1\.1 · Good\./);
    assert.match(await page.textContent("#other-slot"), /Other slot \(B\)\s*0\.1\.0\s*Good\./);
    assert.match(await page.textContent("#update-state"), /No update since the gateway started\./);
    assert.equal(await page.$("#not-appliance"), null);
    await bothWidths(page, narrow, "slots");
  });

  await t.test("an install shows its progress, then its result", async () => {
    await page.setInputFiles("#bundle", bundle("uagate-0.2.0.raucb", "version=0.2.0\nslow\n"));
    await page.click("#install");
    await page.waitForSelector("#notice");
    assert.match(await page.textContent("#notice"), /Update bundle received/);
    await page.waitForFunction(() => /Installing uagate 0\.2\.0 into slot B…/.test(document.querySelector("#update-state")?.textContent || ""));
    assert.equal(await page.isDisabled("#install"), true, "no second install meanwhile");
    assert.equal(await page.isDisabled("#reboot"), true, "no restart meanwhile");
    await bothWidths(page, narrow, "installing");
    // RAUC finishes; the page's live part (refreshed every 2 s) shows the result.
    fs.writeFileSync(path.join(fake, "go"), "");
    await page.waitForFunction(
      () => /Installed 0\.2\.0 into slot B\. Restart the appliance to use it\./.test(document.querySelector("#update-state")?.textContent || ""),
      null,
      { timeout: 20_000 },
    );
    assert.match(await page.textContent("#other-slot"), /0\.2\.0/);
    assert.equal(await page.isDisabled("#install"), false);
    await bothWidths(page, narrow, "installed");
  });

  await t.test("a bundle with a bad signature is refused in plain words", async () => {
    await page.setInputFiles("#bundle", bundle("forged.raucb", "version=9.9.9\nbadsig\n"));
    await page.click("#install");
    await page.waitForSelector("#notice");
    await page.waitForFunction(
      () => /Refused: The update bundle's signature is not valid for this appliance\. Nothing was changed\./.test(document.querySelector("#update-state")?.textContent || ""),
      null,
      { timeout: 20_000 },
    );
    assert.match(await page.textContent("#update-detail"), /RAUC said: signature verification failed: Verify error/);
    assert.match(await page.textContent("#other-slot"), /0\.2\.0/, "slot B still holds what was there");
    await bothWidths(page, narrow, "refused");
  });

  await t.test("the restart asks first", async () => {
    await page.click("#reboot");
    await page.waitForSelector("#reboot-confirm");
    assert.match(await page.textContent("#reboot-summary"), /Restart the appliance now\? OPC UA clients and field connections are interrupted/);
    await bothWidths(page, narrow, "restart-confirm", async (p) => {
      await p.click("#reboot");
      await p.waitForSelector("#reboot-confirm");
    });
    await page.click("#reboot-cancel");
    await page.waitForSelector("#reboot");
    assert.equal(fs.existsSync(path.join(fake, "reboot")), false, "cancel asks for nothing");
    await page.click("#reboot");
    await page.click("#reboot-yes");
    await page.waitForSelector("#notice");
    assert.match(await page.textContent("#notice"), /Restart requested/);
    const deadline = Date.now() + 5_000;
    while (!fs.existsSync(path.join(fake, "reboot")) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(fs.existsSync(path.join(fake, "reboot")), true, "the reboot request file is made");
  });

  await t.test("the audit log names the update and the restart", async () => {
    await page.goto("/audit?kind=system");
    const text = await page.textContent("main");
    assert.match(text, /sys uploaded an update bundle/);
    assert.match(text, /The update sys started was installed: 0\.2\.0 into slot B/);
    assert.match(text, /sys restarted the appliance/);
  });

  await narrow.close();
  await context.close();
});
