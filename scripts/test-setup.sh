#!/usr/bin/env bash
# Installs the interop test peers; idempotent and quick when nothing changed.
#   - .venv (python3 -m venv) with tests/interop/python/requirements.txt (asyncua, pytest, ...)
#   - tests/interop/node/node_modules from package-lock.json (node-opcua)
#   - tests/browser/node_modules from package-lock.json (playwright-core)
#   - Debian packages chromium (headless browser tests) and prometheus (promtool)
#   - the appliance image's tools (image/build, image/test): mmdebstrap, squashfs, FAT, GPT,
#     bmaptool, qemu-img, rauc, GRUB's EFI modules, QEMU and OVMF (rauc, squashfs-tools and openssl
#     also for the update tests, which make and check real RAUC bundles)
# Each part is skipped while its stamp (hash of its inputs and the interpreter version) matches.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf 'test-setup: %s\n' "$*"; }
need() { command -v "$1" >/dev/null 2>&1 || { log "missing required tool: $1"; exit 1; }; }
hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

need python3
need node
need npm
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  log "node >= 20 required (found $(node --version))"
  exit 1
fi

# --- Python: .venv -------------------------------------------------------------------
VENV="$ROOT/.venv"
REQ="tests/interop/python/requirements.txt"
PY_STAMP="$VENV/.uagate-requirements.sha256"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  log "creating $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
fi
py_want="$( { cat "$REQ"; "$VENV/bin/python" --version; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$PY_STAMP" 2>/dev/null || true)" = "$py_want" ]; then
  log "python requirements up to date"
else
  log "installing python requirements ($REQ)"
  "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$REQ"
  printf '%s\n' "$py_want" >"$PY_STAMP"
fi

# --- Node: tests/interop/node/node_modules --------------------------------------------
NODE_DIR="tests/interop/node"
NODE_STAMP="$NODE_DIR/node_modules/.uagate-stamp"
node_inputs() {
  local f
  for f in "$NODE_DIR/package.json" "$NODE_DIR/package-lock.json"; do
    [ -f "$f" ] && cat "$f"
  done
  node --version
}
node_want="$(node_inputs | sha256sum | cut -d' ' -f1)"
if [ -d "$NODE_DIR/node_modules" ] && [ "$(cat "$NODE_STAMP" 2>/dev/null || true)" = "$node_want" ]; then
  log "node modules up to date"
else
  if [ -f "$NODE_DIR/package-lock.json" ]; then
    log "npm ci in $NODE_DIR"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
  else
    log "npm install in $NODE_DIR (no package-lock.json yet)"
    (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error)
  fi
  node_inputs | sha256sum | cut -d' ' -f1 >"$NODE_STAMP"
fi
# --- Browser tests: tests/browser/node_modules (playwright-core) -------------------------
BROWSER_DIR="tests/browser"
BROWSER_STAMP="$BROWSER_DIR/node_modules/.uagate-stamp"
browser_want="$( { cat "$BROWSER_DIR/package.json" "$BROWSER_DIR/package-lock.json"; node --version; } | sha256sum | cut -d' ' -f1)"
if [ -d "$BROWSER_DIR/node_modules" ] && [ "$(cat "$BROWSER_STAMP" 2>/dev/null || true)" = "$browser_want" ]; then
  log "browser test modules up to date"
else
  log "npm ci in $BROWSER_DIR"
  (cd "$BROWSER_DIR" && npm ci --no-audit --no-fund --loglevel=error)
  printf '%s\n' "$browser_want" >"$BROWSER_STAMP"
fi

# --- Debian packages: chromium (browser tests), prometheus (promtool), image tools ------
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# The appliance image: each tool or file and the package that has it.
while read -r have pkg; do
  case "$have" in
    /*) [ -e "$have" ] || missing+=("$pkg") ;;
    *) command -v "$have" >/dev/null 2>&1 || missing+=("$pkg") ;;
  esac
done <<'IMAGE_TOOLS'
mmdebstrap mmdebstrap
newuidmap uidmap
tar2sqfs squashfs-tools-ng
mksquashfs squashfs-tools
mkfs.vfat dosfstools
mcopy mtools
sfdisk fdisk
mkfs.ext4 e2fsprogs
bmaptool bmap-tools
rauc rauc
grub-mkstandalone grub-common
/usr/lib/grub/x86_64-efi/linux.mod grub-efi-amd64-bin
qemu-system-x86_64 qemu-system-x86
/usr/share/OVMF/OVMF_CODE_4M.fd ovmf
qemu-img qemu-utils
openssl openssl
strip binutils
IMAGE_TOOLS
if [ "${#missing[@]}" -eq 0 ]; then
  log "chromium, promtool and the image tools present"
else
  as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "need root (or sudo) to install: ${missing[*]}"; exit 1; }
    as_root=(sudo -n)
  fi
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The package lists of a fresh machine may be missing or stale.
  "${as_root[@]}" apt-get update -q >/dev/null
  # prometheus would start a server as a service; only promtool is wanted.
  "${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    "${as_root[@]}" systemctl stop prometheus || true
  fi
  # Installing qemu-system-x86 can replace the qemu-utils that has qemu-img (another suite's).
  if ! command -v qemu-img >/dev/null 2>&1; then
    log "qemu-img went missing: installing qemu-utils again"
    "${as_root[@]}" apt-get install -y -q --no-install-recommends qemu-utils >/dev/null
  fi
  command -v qemu-img >/dev/null 2>&1 || { log "qemu-img is missing after the set-up"; exit 1; }
fi

log "done"
