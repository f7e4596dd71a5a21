#!/usr/bin/env bash
# Makes sure Debian's chromium is installed: the dashboard's tests drive it
# headless with chromedp (internal/browsertest). Installs it when missing and
# we are root; otherwise says exactly what to install.
set -euo pipefail
for b in "${BULKD_CHROMIUM:-}" chromium chromium-browser; do
  if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then
    exit 0
  fi
done
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium not found: installing Debian package chromium (the dashboard's browser tests)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq chromium >&2
  exit 0
fi
echo "chromium is required for the dashboard's browser tests. Install it with: sudo apt-get install chromium (or set BULKD_CHROMIUM to a Chromium binary)" >&2
exit 1
