// The System page in headless Chromium against a real `uagate demo` whose updater is pointed at the
// fake `rauc` (tests/fake-rauc/rauc, copied into a temporary directory with a real-shaped status
// sample beside it; UAGATE_RAUC, UAGATE_OS_RELEASE and UAGATE_REBOOT_REQUEST name them): the slots
// at a glance, an install that shows its progress and then its result, refused bundles in plain
// words (a bad signature; a real verity bundle altered after signing, which the gateway's own check
// refuses before `rauc install`), the restart with its confirmation step, and a host with RAUC
// installed but without its service (not the appliance image) in plain words. Screenshots at
// 1366x768 and 390 px wide (no sideways scrolling) into $UAGATE_TEST_OUTPUT (default
// target/test-output/browser).

import { execFileSync, spawn } from "node:child_process";
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

/**
 * A real verity bundle made by `rauc bundle` (2 MB of noise as its image), signed with a throw-away
 * key whose certificate the fake rauc's `info` uses as the keyring (fake/keyring.pem). Needs the
 * Debian packages rauc, squashfs-tools and openssl (scripts/test-setup.sh installs them).
 */
function realBundle(name, version) {
  for (const [program, pkg] of [["rauc", "rauc"], ["mksquashfs", "squashfs-tools"], ["openssl", "openssl"]]) {
    const found = (process.env.PATH || "").split(":").some((d) => d && fs.existsSync(path.join(d, program)));
    assert.ok(found, `${program} is not installed: install the Debian package ${pkg} (scripts/test-setup.sh does)`);
  }
  const dir = fs.mkdtempSync(path.join(tmp, "bundle-"));
  const content = path.join(dir, "content");
  fs.mkdirSync(content);
  fs.writeFileSync(
    path.join(content, "manifest.raucm"),
    `[update]\ncompatible=uagate-appliance-x86_64\nversion=${version}\n\n[bundle]\nformat=verity\n\n[image.rootfs]\nfilename=rootfs.img\n`,
  );
  const noise = Buffer.alloc(2_000_000);
  for (let i = 0, x = 0x2545f491; i < noise.length; i++) {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5;
    noise[i] = x & 0xff;
  }
  fs.writeFileSync(path.join(content, "rootfs.img"), noise);
  const [key, cert] = [path.join(dir, "key.pem"), path.join(dir, "cert.pem")];
  const quiet = { stdio: ["ignore", "ignore", "pipe"] };
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "3650", "-subj", "/CN=uagate browser test", "-keyout", key, "-out", cert], quiet);
  const out = path.join(tmp, name);
  execFileSync("rauc", ["bundle", "--mksquashfs-args=-noI -noD -noF -noX", `--cert=${cert}`, `--key=${key}`, content, out], quiet);
  fs.copyFileSync(cert, path.join(fake, "keyring.pem"));
  return out;
}

/** How many times the fake rauc's `install` ran. */
function installCalls() {
  const p = path.join(fake, "install-calls");
  return fs.existsSync(p) ? fs.readFileSync(p, "utf8").split("\n").filter(Boolean).length : 0;
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

  await t.test("a bundle altered after signing is refused before anything is written", async () => {
    const p = realBundle("altered.raucb", "0.4.0");
    const bytes = fs.readFileSync(p);
    bytes[300 * 4096 + 7] ^= 0x40; // in the payload's block 300
    fs.writeFileSync(p, bytes);
    const calls = installCalls();
    await page.setInputFiles("#bundle", p);
    await page.click("#install");
    await page.waitForSelector("#notice");
    await page.waitForFunction(
      () => /Refused: The update bundle's contents do not match its signature: it was damaged on the way or altered\. Nothing was changed\./.test(document.querySelector("#update-state")?.textContent || ""),
      null,
      { timeout: 20_000 },
    );
    assert.match(
      await page.textContent("#update-detail"),
      /The gateway's check found: the payload block at byte 1228800 does not match the signed hash tree/,
    );
    assert.equal(installCalls(), calls, "rauc install was not called");
    assert.match(await page.textContent("#other-slot"), /0\.2\.0/, "slot B still holds what was there");
    await bothWidths(page, narrow, "altered");
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

  await t.test("RAUC installed on a host that is not the appliance image: said in plain words", async () => {
    const osRelease = path.join(fake, "os-release");
    const image = fs.readFileSync(osRelease, "utf8");
    fs.writeFileSync(path.join(fake, "no-service"), "");
    try {
      // A Debian host with the rauc package: `rauc status` fails with a D-Bus error.
      fs.writeFileSync(osRelease, 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nID=debian\n');
      await page.goto("/system");
      const banner = await page.textContent("#not-appliance");
      assert.match(banner, /not the uagate appliance image: updates are managed by the appliance image/);
      assert.doesNotMatch(banner.replace(await page.textContent("#rauc-detail"), ""), /D-Bus/, "the raw error only in the small print");
      assert.match(await page.textContent("#rauc-detail"), /RAUC said: Error retrieving slot status via D-Bus/);
      for (const sel of ["#rauc-error", "#update-form", "#reboot-form", "#booted-slot"]) {
        assert.equal(await page.$(sel), null, `${sel} on a host that is not the appliance image`);
      }
      await bothWidths(page, narrow, "not-image");
      // On the appliance image, the same error means RAUC's service does not answer.
      fs.writeFileSync(osRelease, `${image}IMAGE_ID=uagate\n`);
      await page.goto("/system");
      assert.match(await page.textContent("#rauc-error"), /RAUC's service on this appliance does not answer.*Restart the appliance/s);
      assert.match(await page.textContent("#rauc-detail"), /D-Bus/);
      await bothWidths(page, narrow, "no-rauc-service");
    } finally {
      fs.rmSync(path.join(fake, "no-service"), { force: true });
      fs.writeFileSync(osRelease, image);
    }
  });

  await narrow.close();
  await context.close();
});
