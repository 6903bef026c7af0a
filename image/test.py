"""The appliance image, end to end under QEMU (TCG, OVMF, user networking).

Called by image/test, which builds what it needs first. Boots the qcow2 (through a throwaway
overlay) and checks, in this order:

1. power-on to a console that answers over HTTPS; the one-time setup code shown on the
   serial console creates the first admin over REST; opc.tcp GetEndpoints answers (asyncua);
   the appliance's own certificate, made on first boot;
2. the next version's bundle installed over REST, then a reboot over REST, boots the other
   slot with the new version, which is then marked good (the gateway is healthy); the admin
   and the certificates are kept;
3. a bundle whose gateway never becomes healthy is installed and booted once, then the
   appliance falls back to the previous slot by itself and shows the slot as bad;
4. a bundle signed with another key, and a tampered bundle, are refused and change nothing;
5. a second appliance flashed from the same image has its own keys.

Prints `TIMING <what> <seconds>` lines for BENCHMARKS.md. Every wait is bounded; QEMU is
killed at the end whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.fd"
OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.fd"
ADMIN = ("admin", "image test password")
# Under TCG a boot takes a minute or two; an install of a 150 MB bundle a few minutes.
BOOT_TIMEOUT = 420
INSTALL_TIMEOUT = 900


def say(msg: str) -> None:
    print(f"== image/test: {msg}", flush=True)


def timing(what: str, seconds: float) -> None:
    print(f"TIMING {what} {seconds:.0f}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Failure(Exception):
    pass


class Appliance:
    """One QEMU virtual machine booted from an overlay on the image's qcow2."""

    def __init__(self, name: str, qcow2: Path, work: Path, smp: int = 2):
        self.name = name
        self.dir = work / name
        self.dir.mkdir(parents=True)
        self.serial = self.dir / "serial.log"
        self.https = free_port()
        self.opc = free_port()
        disk = self.dir / "disk.qcow2"
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(qcow2.resolve()), "-F", "qcow2",
             str(disk), "4G"],
            check=True,
        )
        shutil.copy(OVMF_VARS, self.dir / "vars.fd")
        self.cmd = [
            "qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-m", "1024",
            "-smp", str(smp), "-nographic", "-display", "none",
            "-drive", f"if=pflash,format=raw,readonly=on,file={OVMF_CODE}",
            "-drive", f"if=pflash,format=raw,file={self.dir / 'vars.fd'}",
            "-drive", f"if=virtio,file={disk},format=qcow2",
            "-netdev",
            f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.https}-:8443,"
            f"hostfwd=tcp:127.0.0.1:{self.opc}-:4840",
            "-device", "virtio-net-pci,netdev=n0",
            "-chardev", f"file,id=s0,path={self.serial},append=on", "-serial", "chardev:s0",
            "-monitor", "none",
            # A reboot ends QEMU and the supervisor starts it again on the same disk and
            # firmware variables: a power cycle. (A warm reset under TCG now and then hung
            # before the kernel printed anything.)
            "-no-reboot",
        ]
        self.proc: subprocess.Popen | None = None
        self.token: str | None = None
        self.stopping = threading.Event()
        self.failed: str | None = None
        self.boots = 0

    def start(self) -> float:
        self.started = time.monotonic()
        self.supervisor = threading.Thread(target=self.supervise, daemon=True)
        self.supervisor.start()
        return self.started

    def supervise(self) -> None:
        """Runs QEMU, and again after every reboot of the guest, until `stop`."""
        out = open(self.dir / "qemu.out", "ab")
        while not self.stopping.is_set():
            self.boots += 1
            self.proc = subprocess.Popen(
                self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            rc = self.proc.wait()
            if self.stopping.is_set():
                break
            if rc != 0:
                self.failed = f"QEMU exited with {rc} (see {self.dir / 'qemu.out'})"
                break
            with open(self.serial, "ab") as f:
                f.write(b"\n[image/test: the guest rebooted; power-cycled]\n")

    def stop(self) -> None:
        self.stopping.set()
        supervisor = getattr(self, "supervisor", None)
        deadline = time.monotonic() + 30
        while True:
            proc = self.proc
            if proc and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            if not supervisor or time.monotonic() > deadline:
                break
            supervisor.join(timeout=0.5)
            if not supervisor.is_alive():
                break

    def log(self) -> str:
        try:
            return self.serial.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60) -> str:
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.log())
        return "\n".join(text.splitlines()[-lines:])

    def wait_serial(self, pattern: str, after: int, timeout: float) -> tuple[re.Match, int]:
        """Waits for `pattern` in the serial log past offset `after`; the match and its end."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            if self.failed:
                raise Failure(f"{self.name}: {self.failed}\n{self.tail()}")
            text = self.log()
            m = rx.search(text, after)
            if m:
                return m, m.end()
            time.sleep(1)
        raise Failure(f"{self.name}: no {pattern!r} on the serial console within "
                      f"{timeout:.0f} s\n{self.tail()}")

    # ---------------------------------------------------------------- HTTPS

    def request(self, method: str, path: str, body=None, headers=None, token=None,
                timeout: float = 60) -> tuple[int, bytes, ssl.SSLObject | None]:
        ctx = ssl.create_default_context()
        # The appliance's certificate is its own, made on first boot: not one a CA signed.
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", self.https, context=ctx, timeout=timeout)
        h = dict(headers or {})
        if token or self.token:
            h["Authorization"] = f"Bearer {token or self.token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            cert = conn.sock.getpeercert(binary_form=True) if conn.sock else None
            return resp.status, data, cert
        finally:
            conn.close()

    def json(self, method: str, path: str, body=None, expect: int = 200):
        status, data, _ = self.request(method, path, body)
        if status != expect:
            raise Failure(f"{self.name}: {method} {path} answered {status}, not {expect}: "
                          f"{data[:500]!r}")
        return json.loads(data) if data else None

    def wait_console(self, timeout: float) -> bytes:
        """Waits until the console answers over HTTPS; its certificate (DER)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.failed:
                raise Failure(f"{self.name}: {self.failed}\n{self.tail()}")
            try:
                status, _, cert = self.request("GET", "/login", timeout=10)
                if status == 200 and cert:
                    return cert
                last = f"HTTP {status}"
            except (OSError, ssl.SSLError, http.client.HTTPException) as e:
                last = repr(e)
            time.sleep(2)
        raise Failure(f"{self.name}: the console did not answer within {timeout:.0f} s "
                      f"({last})\n{self.tail()}")

    def system(self) -> dict:
        return self.json("GET", "/api/v1/system")

    def wait_system(self, what: str, ok, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        view = None
        while time.monotonic() < deadline:
            try:
                view = self.system()
                if ok(view):
                    return view
            except (OSError, ssl.SSLError, http.client.HTTPException, Failure):
                pass
            time.sleep(3)
        raise Failure(f"{self.name}: {what} not seen within {timeout:.0f} s; last view: "
                      f"{json.dumps(view, indent=1)}\n{self.tail()}")

    def login(self) -> None:
        body = self.json("POST", "/api/v1/login", {"username": ADMIN[0], "password": ADMIN[1]})
        self.token = body["token"]

    def upload(self, bundle: Path) -> tuple[int, bytes]:
        with open(bundle, "rb") as f:
            status, data, _ = self.request(
                "POST", "/api/v1/system/update", body=f,
                headers={"Content-Type": "application/octet-stream",
                         "Content-Length": str(bundle.stat().st_size)},
                timeout=600,
            )
        return status, data


def slot(view: dict, name: str) -> dict:
    for s in view["slots"]:
        if s["slot"] == name:
            return s
    raise Failure(f"no slot {name} in {json.dumps(view)}")


async def get_endpoints(port: int) -> list:
    from asyncua import Client

    client = Client(f"opc.tcp://127.0.0.1:{port}", timeout=30)
    return await client.connect_and_get_server_endpoints()


def first_boot(vm: Appliance) -> bytes:
    """Power-on to setup: the code from the serial console, the first admin over REST."""
    t0 = vm.start()
    m, _ = vm.wait_serial(r"setup code ([0-9a-f]{16})", 0, BOOT_TIMEOUT)
    code = m.group(1)
    cert = vm.wait_console(BOOT_TIMEOUT)
    timing(f"{vm.name}: power-on to console ready", time.monotonic() - t0)
    banner = vm.wait_serial(r"(uagate-[0-9a-f]{6}) login:", 0, 120)[0].group(1)
    say(f"{vm.name}: login prompt of {banner}, setup code {code} on the serial console")
    status, data, _ = vm.request("GET", "/api/v1/status")
    if status != 401:
        raise Failure(f"{vm.name}: the REST API answered {status} without a token")
    body = vm.json("POST", "/api/v1/setup",
                   {"code": code, "username": ADMIN[0], "password": ADMIN[1]})
    vm.token = body["token"]
    # The setup code is spent: the banner file is gone, a second setup is refused.
    status, _, _ = vm.request("POST", "/api/v1/setup",
                              {"code": code, "username": "eve", "password": ADMIN[1]})
    if status != 403:
        raise Failure(f"{vm.name}: a second setup with the spent code answered {status}")
    return cert


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True, type=Path, help="uagate-V-amd64.qcow2")
    ap.add_argument("--version", required=True, help="the image's version")
    ap.add_argument("--next", required=True, type=Path, help="the next version's bundle")
    ap.add_argument("--next-version", required=True)
    ap.add_argument("--unhealthy", required=True, type=Path,
                    help="a bundle whose gateway never becomes healthy")
    ap.add_argument("--foreign", required=True, type=Path,
                    help="a bundle signed with a key the image does not trust")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="uagate-image-test-"))
    vms: list[Appliance] = []
    ok = False
    try:
        started = time.monotonic()
        a = Appliance("appliance1", args.image, work)
        vms.append(a)

        # 1. First boot and setup.
        cert1 = first_boot(a)
        endpoints = asyncio.run(get_endpoints(a.opc))
        if not endpoints:
            raise Failure("GetEndpoints returned no endpoint")
        policies = sorted({e.SecurityPolicyUri.rsplit("#", 1)[-1] for e in endpoints})
        server_cert = hashlib.sha256(endpoints[0].ServerCertificate).hexdigest()
        say(f"GetEndpoints: {len(endpoints)} endpoints ({', '.join(policies)})")
        view = a.system()
        if not view["appliance"] or view["booted_slot"] != "A":
            raise Failure(f"first boot not from slot A on the appliance: {json.dumps(view)}")
        if view["image_version"] != args.version:
            raise Failure(f"image version {view['image_version']}, not {args.version}")
        say(f"booted slot A, image {view['image_version']}, compatible {view['compatible']}")
        a.wait_system("slot A marked good", lambda v: slot(v, "A")["boot_status"] == "good", 180)

        # 2. The next version, installed over REST, boots from slot B.
        t0 = time.monotonic()
        status, data = a.upload(args.next)
        if status != 202:
            raise Failure(f"upload of {args.next.name} answered {status}: {data[:300]!r}")
        view = a.wait_system("the install's end",
                             lambda v: v["update"]["state"] in ("failed", "installed"),
                             INSTALL_TIMEOUT)
        if view["update"]["state"] != "installed":
            raise Failure(f"install failed: {json.dumps(view)}")
        timing("install of the next version's bundle over REST", time.monotonic() - t0)
        if slot(view, "B")["version"] != args.next_version:
            raise Failure(f"slot B holds {slot(view, 'B')['version']} after the install")
        mark = len(a.log())
        a.json("POST", "/api/v1/system/reboot", expect=202)
        t0 = time.monotonic()
        a.wait_serial(r"rauc\.slot=B|Booting `uagate slot B'", mark, BOOT_TIMEOUT)
        a.wait_serial(r"uagate-[0-9a-f]{6} login:", mark, BOOT_TIMEOUT)
        a.wait_console(BOOT_TIMEOUT)
        timing("reboot into the updated slot to console ready", time.monotonic() - t0)
        # The admin and the appliance's keys survived the update (data partition).
        a.login()
        view = a.system()
        if view["booted_slot"] != "B" or view["image_version"] != args.next_version:
            raise Failure(f"after the update: {json.dumps(view)}")
        _, _, cert = a.request("GET", "/login")
        if cert != cert1:
            raise Failure("the console certificate changed across the update")
        view = a.wait_system("slot B marked good",
                             lambda v: slot(v, "B")["boot_status"] == "good", 240)
        say(f"updated to {args.next_version}: booted slot B, marked good")

        # 3. A bundle whose gateway never becomes healthy: installed into A, booted once, then
        #    the appliance restarts into B by itself.
        status, data = a.upload(args.unhealthy)
        if status != 202:
            raise Failure(f"upload of {args.unhealthy.name} answered {status}: {data[:300]!r}")
        view = a.wait_system("the install's end",
                             lambda v: v["update"]["state"] in ("failed", "installed"),
                             INSTALL_TIMEOUT)
        if view["update"]["state"] != "installed":
            raise Failure(f"install of the unhealthy bundle failed: {json.dumps(view)}")
        mark = len(a.log())
        a.json("POST", "/api/v1/system/reboot", expect=202)
        t0 = time.monotonic()
        _, end = a.wait_serial(r"rauc\.slot=A|Booting `uagate slot A'", mark, BOOT_TIMEOUT)
        a.wait_serial(r"slot A is not healthy", end, 900)
        _, end = a.wait_serial(r"rauc\.slot=B|Booting `uagate slot B'", end, BOOT_TIMEOUT)
        a.wait_console(BOOT_TIMEOUT)
        timing("unhealthy slot booted, given up and rolled back to console ready",
               time.monotonic() - t0)
        a.login()
        view = a.system()
        if view["booted_slot"] != "B" or view["image_version"] != args.next_version:
            raise Failure(f"after the rollback: {json.dumps(view)}")
        if slot(view, "A")["boot_status"] != "bad":
            raise Failure(f"slot A not marked bad after the rollback: {json.dumps(view)}")
        say("the unhealthy slot A was marked bad; back on slot B")
        # 4. Refused bundles change nothing (the other slot keeps what it holds).
        before = slot(view, "A")
        tampered = work / "tampered.raucb"
        shutil.copy(args.next, tampered)
        with open(tampered, "r+b") as f:
            # A byte in the middle of the root file system image (the payload the signature
            # covers through the verity root hash).
            f.seek(tampered.stat().st_size // 3)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        for name, bundle, words in [
            ("a bundle signed with another key", args.foreign, "signature"),
            ("a tampered bundle", tampered, "do not match its signature"),
        ]:
            status, data = a.upload(bundle)
            if status == 202:
                view = a.wait_system(f"{name}: the install's end",
                                     lambda v: v["update"]["state"] in ("failed", "installed"),
                                     INSTALL_TIMEOUT)
                message = view["update"]["message"] or ""
                if view["update"]["state"] != "failed":
                    raise Failure(f"{name} was installed: {json.dumps(view)}")
            else:
                message = data.decode(errors="replace")
                if status != 422:
                    raise Failure(f"{name}: upload answered {status}: {message}")
            if not message.startswith("Refused") or "nothing was changed" not in message.lower():
                raise Failure(f"{name}: not refused before anything was written: {message}")
            if words not in message.lower():
                raise Failure(f"{name}: the refusal does not say why ({words}): {message}")
            view = a.system()
            if view["booted_slot"] != "B" or slot(view, "A") != before:
                raise Failure(f"{name} changed the slots: {json.dumps(view)}")
            say(f"{name} refused: {message}")

        a.stop()

        # 5. A second appliance from the same image: its own keys.
        b = Appliance("appliance2", args.image, work)
        vms.append(b)
        cert2 = first_boot(b)
        endpoints2 = asyncio.run(get_endpoints(b.opc))
        if cert2 == cert1:
            raise Failure("two appliances from one image have the same console certificate")
        if hashlib.sha256(endpoints2[0].ServerCertificate).hexdigest() == server_cert:
            raise Failure("two appliances from one image have the same OPC UA certificate")
        say("a second appliance from the same image has its own certificates")
        timing("image/test total", time.monotonic() - started)
        ok = True
        return 0
    except Failure as e:
        print(f"image/test: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for vm in vms:
            vm.stop()
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"serial logs kept in {work}")


if __name__ == "__main__":
    sys.exit(main())
