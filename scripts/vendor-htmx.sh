#!/usr/bin/env bash
# Refreshes static/htmx.min.js from the npm package htmx.org (the console
# serves it from the binary; nothing is fetched at run time).
# Usage: scripts/vendor-htmx.sh [version]   (default: the pinned one below)
set -euo pipefail
version="${1:-2.0.11}"
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "htmx.org@${version}" >/dev/null && tar xzf htmx.org-*.tgz)
cp "$tmp/package/dist/htmx.min.js" "$root/static/htmx.min.js"
echo "static/htmx.min.js <- htmx.org@${version}"
