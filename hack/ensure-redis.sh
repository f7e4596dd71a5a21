#!/usr/bin/env bash
# Makes sure redis-server (Debian's package) is installed. Installs it when
# missing and we are root; otherwise says exactly what to install.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server not found: installing Debian package redis-server" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq redis-server >&2
  # The package may start a system instance; bulkd never uses it.
  exit 0
fi
echo "redis-server is required. Install it with: sudo apt-get install redis-server" >&2
exit 1
