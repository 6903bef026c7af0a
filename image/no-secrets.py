#!/usr/bin/env python3
"""Reads a root file system tar on standard input and fails, naming them, if any of its files
holds a private key (a PEM private key block, or an OpenSSH private key) or a build-host identity
(/etc/hostname, a machine id). Programs (ELF files) are skipped: they carry the PEM markers as
strings for their parsers. Run by image/build on every root file system it makes: nothing secret
or machine-specific is baked into the image, so two appliances flashed from it differ."""
import re
import sys
import tarfile

KEY = re.compile(rb"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{16}")
bad = []
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tar:
    for m in tar:
        name = m.name.lstrip(".")
        if name in ("/etc/hostname",) and m.isfile():
            bad.append(f"{name}: the build host's name")
        if name == "/etc/machine-id" and m.isfile() and m.size > 0:
            bad.append(f"{name}: a fixed machine id")
        if not m.isfile() or m.size > 4 * 1024 * 1024:
            continue
        data = tar.extractfile(m).read()
        if data.startswith(b"\x7fELF"):
            continue
        if KEY.search(data) or b"-----BEGIN OPENSSH PRIVATE KEY-----" in data:
            bad.append(f"{name}: a private key")
for line in bad:
    print(f"image/build: not for an image: {line}", file=sys.stderr)
sys.exit(1 if bad else 0)
