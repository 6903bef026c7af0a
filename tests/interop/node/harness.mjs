// Harness for the node-opcua interop suite: one server process (and data dir) per test.
//
// UAGATE_INTEROP_TARGET selects the server under test:
//   uagate (default)  the binary at $UAGATE_BIN (default <repo>/target/debug/uagate); never built here.
//   asyncua-server    the asyncua example server (tests/interop/python/selfcheck_server.py run with
//                     $UAGATE_INTEROP_PYTHON, default <repo>/.venv/bin/python), to check the harness.
// Tests that need the uagate CLI (trust/user) pass `skip: SKIP_UAGATE_ONLY`.

import { execFile, spawn } from "node:child_process";
import { createHash, X509Certificate } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

import opcua from "node-opcua";

const { OPCUAClient, OPCUACertificateManager, MessageSecurityMode, SecurityPolicy } = opcua;

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(HERE, "..", "..", "..");

export const TARGET = process.env.UAGATE_INTEROP_TARGET || "uagate";
if (!["uagate", "asyncua-server"].includes(TARGET)) {
  throw new Error(`UAGATE_INTEROP_TARGET=${TARGET}; expected uagate or asyncua-server`);
}
export const SELF_CHECK = TARGET === "asyncua-server";
export const SKIP_UAGATE_ONLY = SELF_CHECK ? "uagate-only test (UAGATE_INTEROP_TARGET=asyncua-server)" : false;
export const UAGATE_BIN = process.env.UAGATE_BIN || path.join(REPO_ROOT, "target", "debug", "uagate");
const PYTHON = process.env.UAGATE_INTEROP_PYTHON || path.join(REPO_ROOT, ".venv", "bin", "python");

export const READY_TIMEOUT_MS = 60_000;
export const CLI_TIMEOUT_MS = 60_000;
export const STOP_TIMEOUT_MS = 10_000;
export const STEP_TIMEOUT_MS = 30_000;
const READY_RE = /^READY opc\.tcp=(opc\.tcp:\/\/127\.0\.0\.1:(\d+)\/)$/;

const MINIMAL_CONFIG = `[listen]
opc_tcp = "127.0.0.1:0"
[server]
application_name = "uagate-test"
demo_nodes = true
`;

export const NODE_APP_URI = "urn:uagate-interop:node-client";
export const NODE_APP_NAME = "uagate-interop-node";

/** Resolve `promise` or reject after `ms` so nothing in a test waits forever. */
export async function bounded(promise, what, ms = STEP_TIMEOUT_MS) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Run a program with a bounded wait; resolves {code, stdout, stderr}. */
function run(cmd, args, { stdin } = {}) {
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, args, { timeout: CLI_TIMEOUT_MS, killSignal: "SIGKILL" }, (err, stdout, stderr) => {
      if (err && typeof err.code !== "number") {
        reject(new Error(`${cmd} ${args.join(" ")}: ${err.message}\n${stderr}`));
        return;
      }
      resolve({ code: err ? err.code : 0, stdout, stderr });
    });
    // A program that exits without reading its input closes the pipe
    // first; the write then fails with EPIPE, which is not the program's
    // answer (its exit code and output are), so only that error is ignored.
    child.stdin.on("error", (e) => {
      if (e.code !== "EPIPE") reject(e);
    });
    child.stdin.end(stdin ?? "");
  });
}

/** Parse `<sha1-hex> <subject> <application-uri-or-->` lines of `trust list` / `trust rejected`. */
export function parseTrustLines(text) {
  return text
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)
    .map((line) => {
      const sp = line.indexOf(" ");
      const thumb = line.slice(0, sp);
      const rest = line.slice(sp + 1);
      const lastSp = rest.lastIndexOf(" ");
      if (!/^[0-9a-fA-F]{40}$/.test(thumb) || sp < 0 || lastSp < 0) {
        throw new Error(`malformed trust line: ${JSON.stringify(line)}`);
      }
      const uri = rest.slice(lastSp + 1);
      return { thumbprint: thumb.toLowerCase(), subject: rest.slice(0, lastSp), applicationUri: uri === "-" ? null : uri };
    });
}

/** SHA-1 of the certificate's DER bytes, lower-case hex (the thumbprint uagate prints). */
export function thumbprintOfPem(pemFile) {
  const der = new X509Certificate(fs.readFileSync(pemFile)).raw;
  return createHash("sha1").update(der).digest("hex");
}

/** One server under test: its own temp dir, data dir, and (after start()) its own process. */
export class ServerTarget {
  static async create() {
    const t = new ServerTarget();
    t.tmp = await fs.promises.mkdtemp(path.join(os.tmpdir(), "uagate-interop-node-"));
    t.dataDir = path.join(t.tmp, "data");
    await fs.promises.mkdir(t.dataDir);
    t.logFile = path.join(t.tmp, "server.log");
    t.proc = null;
    t.url = null;
    if (TARGET === "uagate") {
      if (!fs.existsSync(UAGATE_BIN)) {
        throw new Error(`uagate binary not found at ${UAGATE_BIN} (build it with cargo build or set UAGATE_BIN)`);
      }
      const config = path.join(t.tmp, "uagate.toml");
      await fs.promises.writeFile(config, MINIMAL_CONFIG);
      await t.cli(["config", "import", config]);
    }
    return t;
  }

  /** `uagate --data DIR ...args`; throws with the output on a non-zero exit. */
  async cli(args, { stdin } = {}) {
    if (TARGET !== "uagate") throw new Error("the uagate CLI only exists for the uagate target");
    const full = ["--data", this.dataDir, ...args];
    const res = await run(UAGATE_BIN, full, { stdin });
    if (res.code !== 0) {
      throw new Error(`uagate ${full.join(" ")} exited ${res.code}\nstdout:\n${res.stdout}\nstderr:\n${res.stderr}`);
    }
    return res.stdout;
  }

  async userAdd(name, role, password) {
    if (TARGET === "uagate") await this.cli(["user", "add", name, "--role", role], { stdin: `${password}\n` });
  }
  async trustAdd(certFile) {
    await this.cli(["trust", "add", certFile]);
  }
  async trustList() {
    return parseTrustLines(await this.cli(["trust", "list"]));
  }
  async trustRejected() {
    return parseTrustLines(await this.cli(["trust", "rejected"]));
  }
  /** Make the server accept this client certificate (uagate: trust add; the example server trusts all). */
  async trustClient(certFile) {
    if (TARGET === "uagate") await this.trustAdd(certFile);
  }

  /** Start the server and wait (bounded) for its READY line; returns the endpoint URL. */
  async start() {
    if (this.proc) throw new Error("already started");
    const [cmd, args] =
      TARGET === "uagate"
        ? [UAGATE_BIN, ["--data", this.dataDir, "run"]]
        : [PYTHON, [path.join(REPO_ROOT, "tests", "interop", "python", "selfcheck_server.py"), "--dir", this.dataDir]];
    const log = fs.openSync(this.logFile, "w");
    const proc = spawn(cmd, args, { stdio: ["ignore", "pipe", log], env: { ...process.env, RUST_BACKTRACE: "1" } });
    fs.closeSync(log);
    this.proc = proc;
    this.exited = new Promise((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal })));
    // readline keeps draining stdout after READY, so the server never blocks on a full pipe.
    const lines = readline.createInterface({ input: proc.stdout });
    const first = new Promise((resolve, reject) => {
      lines.once("line", resolve);
      proc.once("error", reject);
      this.exited.then(({ code, signal }) => reject(new Error(`server exited (${code ?? signal}) before READY`)));
    });
    let line;
    try {
      line = await bounded(first, `READY line from ${cmd}`, READY_TIMEOUT_MS);
    } catch (err) {
      await this.stop();
      throw new Error(`${err.message}\n${this.logTail()}`);
    }
    const m = READY_RE.exec(line);
    if (!m) {
      await this.stop();
      throw new Error(`first stdout line is not a READY line: ${JSON.stringify(line)}\n${this.logTail()}`);
    }
    this.url = m[1];
    return this.url;
  }

  /** SIGTERM, SIGKILL after STOP_TIMEOUT_MS; idempotent. */
  async stop() {
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill("SIGTERM");
    try {
      await bounded(this.exited, "server stop", STOP_TIMEOUT_MS);
    } catch {
      proc.kill("SIGKILL");
      await bounded(this.exited, "server kill", STOP_TIMEOUT_MS);
    }
  }

  logTail(n = 40) {
    try {
      return "server log (tail):\n" + fs.readFileSync(this.logFile, "utf8").split("\n").slice(-n).join("\n");
    } catch {
      return "(no server log)";
    }
  }

  async dispose() {
    await this.stop();
    await fs.promises.rm(this.tmp, { recursive: true, force: true });
  }
}

/** Run `fn(target)` with a fresh server (started unless `start: false`); always cleans up. */
export async function withServer(fn, { start = true } = {}) {
  const target = await ServerTarget.create();
  try {
    if (start) await target.start();
    return await fn(target);
  } finally {
    await target.dispose();
  }
}

/**
 * Create this test's client application instance certificate with node-opcua's own PKI
 * (OPCUACertificateManager) in `pkiDir`; its URI SAN is NODE_APP_URI. Returns the PEM path.
 */
export async function createClientCertificate(pkiDir) {
  const cm = new OPCUACertificateManager({ rootFolder: pkiDir, automaticallyAcceptUnknownCertificate: true });
  await bounded(cm.initialize(), "PKI initialize");
  const certFile = path.join(cm.rootDir, "own", "certs", "client_certificate.pem");
  await bounded(
    cm.createSelfSignedCertificate({
      applicationUri: NODE_APP_URI,
      dns: ["localhost"],
      outputFile: certFile,
      subject: `/CN=${NODE_APP_NAME}/O=uagate tests`,
      startDate: new Date(),
      validity: 365,
    }),
    "create client certificate",
  );
  await cm.dispose();
  return certFile;
}

/**
 * A node-opcua client that uses the PKI in `pkiDir` (own certificate as created above; server
 * certificates accepted) and fails fast: no reconnection retries, bounded request timeouts.
 */
export function makeClient(pkiDir, { securityMode = MessageSecurityMode.None, securityPolicy = SecurityPolicy.None } = {}) {
  const client = OPCUAClient.create({
    applicationName: NODE_APP_NAME,
    applicationUri: NODE_APP_URI,
    clientCertificateManager: new OPCUACertificateManager({
      rootFolder: pkiDir,
      automaticallyAcceptUnknownCertificate: true,
    }),
    securityMode,
    securityPolicy,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    defaultTransactionTimeout: 10_000,
    requestedSessionTimeout: 60_000,
  });
  // node-opcua drops the status of a transport Error (ERR) message that answers an
  // OpenSecureChannel (its connect() error then only says "may have been rejected"), so record
  // the status of every ERR chunk the client receives: Error UInt32 right after the 8-byte header.
  client.receivedErrorStatus = [];
  client.on("secure_channel_created", (channel) => {
    channel.on("receive_chunk", (chunk) => {
      if (chunk.length >= 12 && chunk.toString("latin1", 0, 3) === "ERR") {
        client.receivedErrorStatus.push(statusName(chunk.readUInt32LE(8)));
      }
    });
  });
  return client;
}

/** Symbolic name of a numeric OPC UA status code (e.g. 0x801A0000 -> "BadCertificateUntrusted"). */
export function statusName(code) {
  return opcua.StatusCode.makeStatusCode(code).name;
}

/** Every OPC UA status name (Bad...) an error from node-opcua carries, plus ERR statuses `client` received. */
export function statusNamesOf(err, client = null) {
  const names = new Set(client?.receivedErrorStatus ?? []);
  const add = (sc) => sc && typeof sc.name === "string" && names.add(sc.name);
  for (let e = err; e; e = e.cause) {
    add(e.statusCode);
    add(e.response?.responseHeader?.serviceResult);
    for (const m of String(e.message ?? "").matchAll(/\b(Bad[A-Za-z]+)\b/g)) names.add(m[1]);
  }
  return [...names];
}
