#!/usr/bin/env python3
"""Composes the uagate root file system: the cached Debian tree (a tar made by mmdebstrap with
image/customize.sh) plus the gateway binary, its unit, the update keyring and the image version.

Called by image/build for the disk image's root slot and for every update bundle (including the
test-only variants), so that a new gateway or version never needs a new Debian tree. Writes the
tar to standard output, every added file owned by root with the fixed time SOURCE_DATE_EPOCH.
"""
import argparse
import io
import os
import sys
import tarfile

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--base", required=True, help="the Debian tree (tar)")
ap.add_argument("--bin", required=True, help="the uagate binary")
ap.add_argument("--unit", required=True, help="uagate.service")
ap.add_argument("--keyring", required=True, help="certificate(s) RAUC trusts for bundles")
ap.add_argument("--doc", required=True, help="docs/appliance.md")
ap.add_argument("--overlay", required=True, help="image/rootfs: the appliance's own files")
ap.add_argument("--version", required=True, help="the image version")
ap.add_argument("--build", default="", help="what it was built from (git commit)")
ap.add_argument("--unhealthy", action="store_true",
                help="image/test only: a gateway that never becomes healthy")
args = ap.parse_args()
mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))

UNIT = "./usr/lib/systemd/system/uagate.service"
OS_RELEASE = "./usr/lib/os-release"
UNHEALTHY = "./usr/lib/systemd/system/uagate.service.d/zz-unhealthy.conf"


def entry(name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info, io.BytesIO(data)


def link(name, target):
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    info.mode = 0o777
    info.mtime = mtime
    info.uname = info.gname = "root"
    return info, None


def directory(name):
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.mtime = mtime
    info.uname = info.gname = "root"
    return info, None


def read(path):
    with open(path, "rb") as f:
        return f.read()


added = {
    "./usr/bin/uagate": entry("./usr/bin/uagate", read(args.bin), 0o755),
    UNIT: entry(UNIT, read(args.unit)),
    "./etc/systemd/system/multi-user.target.wants/uagate.service":
        link("./etc/systemd/system/multi-user.target.wants/uagate.service",
             "/usr/lib/systemd/system/uagate.service"),
    "./etc/rauc/keyring.pem": entry("./etc/rauc/keyring.pem", read(args.keyring)),
    "./usr/share/doc/uagate": directory("./usr/share/doc/uagate"),
    "./usr/share/doc/uagate/appliance.md":
        entry("./usr/share/doc/uagate/appliance.md", read(args.doc)),
}
# image/rootfs again (customize.sh put it in the cached tree): its files' contents as they are now.
for dirpath, dirnames, filenames in os.walk(args.overlay):
    dirnames.sort()
    for fname in sorted(filenames):
        path = os.path.join(dirpath, fname)
        name = "./" + os.path.relpath(path, args.overlay)
        if os.path.islink(path):
            added[name] = link(name, os.readlink(path))
        else:
            added[name] = entry(name, read(path), os.stat(path).st_mode & 0o777)
if args.unhealthy:
    added[UNHEALTHY] = entry(UNHEALTHY, b"# image/test: a gateway that never becomes healthy\n"
                             b"[Service]\nExecStart=\nExecStart=/bin/false\n")

out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT)
with tarfile.open(args.base, mode="r|") as base:
    for member in base:
        name = member.name if member.name.startswith("./") else "./" + member.name.lstrip("/")
        if name in added:
            continue
        if name == OS_RELEASE:
            text = base.extractfile(member).read().decode()
            text = "".join(line + "\n" for line in text.splitlines()
                           if not line.startswith(("IMAGE_ID=", "IMAGE_VERSION=", "BUILD_ID=")))
            text += f'IMAGE_ID=uagate\nIMAGE_VERSION={args.version}\n'
            if args.build:
                text += f"BUILD_ID={args.build}\n"
            info, data = entry(OS_RELEASE, text.encode())
            out.addfile(info, data)
            continue
        data = base.extractfile(member) if member.isfile() else None
        out.addfile(member, data)
for info, data in added.values():
    out.addfile(info, data)
out.close()
