// What the console's browser tests share: where the binary, the browser and the screenshots are,
// a screenshot, what makes a page scroll sideways, and stopping a process (bounded).

import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(HERE, "..", "..");
export const UAGATE_BIN = process.env.UAGATE_BIN || path.join(ROOT, "target", "debug", "uagate");
export const CHROMIUM = process.env.UAGATE_CHROMIUM || "/usr/bin/chromium";
export const OUT = process.env.UAGATE_TEST_OUTPUT || path.join(ROOT, "target", "test-output", "browser");

/** A full-page screenshot into OUT. */
export async function shot(page, name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

/** Elements sticking out of the window on the right (what makes a page scroll sideways); empty
 * when the page fits. */
export async function overflow(page) {
  return page.evaluate(() => {
    if (document.documentElement.scrollWidth <= window.innerWidth + 1) return [];
    return [...document.querySelectorAll("body *")]
      .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
      .slice(0, 4)
      .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`);
  });
}

/** SIGTERM, then SIGKILL after 10 s; for after() hooks. */
export async function stop(proc) {
  if (!proc || proc.exitCode !== null) return;
  proc.kill("SIGTERM");
  await Promise.race([new Promise((r) => proc.on("exit", r)), new Promise((r) => setTimeout(r, 10_000).unref())]);
  if (proc.exitCode === null) proc.kill("SIGKILL");
}

/** A promise that fails after `ms` with `what` and the log so far. */
export function timeout(ms, what, log = () => "") {
  return new Promise((_, rej) => setTimeout(() => rej(new Error(`${what} within ${ms} ms\n${log()}`)), ms).unref());
}

/** A 1366x768 browser context on `consoleUrl` and its page, logged in as the first
 * administrator `[user, password]` made with the one-time `setupCode`. */
export async function firstAdmin(browser, consoleUrl, setupCode, [user, password], stepMs) {
  const context = await browser.newContext({
    ignoreHTTPSErrors: true,
    baseURL: consoleUrl,
    viewport: { width: 1366, height: 768 },
  });
  context.setDefaultTimeout(stepMs);
  const page = await context.newPage();
  await page.goto("/setup");
  await page.fill("input[name=code]", setupCode);
  await page.fill("input[name=username]", user);
  await page.fill("input[name=password]", password);
  await page.click("button[type=submit]");
  await page.waitForURL(consoleUrl);
  return { context, page };
}

/** A 390 px wide context with the same login as `context` (a phone's view). */
export async function narrowLike(browser, context, consoleUrl, stepMs) {
  const narrow = await browser.newContext({
    ignoreHTTPSErrors: true,
    baseURL: consoleUrl,
    viewport: { width: 390, height: 844 },
    storageState: await context.storageState(),
  });
  narrow.setDefaultTimeout(stepMs);
  return narrow;
}

/** Collects what the browser refused under the console's Content-Security-Policy (inline
 * script or style, eval) on every page of `context`, now and later; the array fills as pages
 * load. */
export function policyViolations(context) {
  const seen = [];
  const watch = (page) =>
    page.on("console", (m) => {
      if (m.type() === "error" && /Content Security Policy/i.test(m.text())) seen.push(`${page.url()}: ${m.text()}`);
    });
  context.pages().forEach(watch);
  context.on("page", watch);
  return seen;
}
