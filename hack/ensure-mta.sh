#!/usr/bin/env bash
# Makes sure the real-MTA world (internal/mtaworld, docs/mta-world.md) has
# its mail software: stock Postfix and Exim 4 from Debian, postgrey and
# dnsmasq. Debian installs one MTA per system (postfix and exim4 conflict),
# so the two MTAs are fetched with `apt-get download` and unpacked with
# `dpkg-deb -x` into a cache outside the repository; the world runs their
# binaries from there with its own configuration, queue and spool. postgrey
# and dnsmasq-base conflict with nothing and are installed with apt-get.
#
# Prints the cache directory (MTA root) on stdout. As root it installs what
# is missing; otherwise it says what to run and exits 1.
set -euo pipefail
root="${BULKD_MTA_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/bulkd-tools/mta}"
have_unpacked() {
  [ -x "$root/usr/lib/postfix/sbin/master" ] && [ -x "$root/usr/lib/postfix/sbin/smtpd" ] && [ -x "$root/usr/sbin/exim4" ]
}
have_user() { getent passwd Debian-exim >/dev/null; }
have_installed() {
  command -v postgrey >/dev/null 2>&1 || [ -x /usr/sbin/postgrey ] || return 1
  command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ] || return 1
}
if have_unpacked && have_installed && have_user; then
  echo "$root"
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "The real-MTA world needs postgrey and dnsmasq-base installed, postfix and exim4-daemon-light" >&2
  echo "unpacked into $root, and the user Debian-exim: run hack/ensure-mta.sh as root (make deps does)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt() { apt-get -o DPkg::Lock::Timeout=900 "$@"; }
if ! have_installed; then
  echo "installing Debian packages postgrey and dnsmasq-base" >&2
  apt update -qq >&2 || true
  apt install -y -qq --no-install-recommends postgrey dnsmasq-base >&2
fi
if ! have_unpacked; then
  # The MTAs' shared-library dependencies conflict with nothing; install
  # them so the unpacked binaries run.
  for pkg in postfix exim4-daemon-light; do
    deps=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$pkg" 2>/dev/null |
      sed -n 's/^ *Depends: *//p' | grep -E '^lib' | sort -u || true)
    if [ -n "$deps" ]; then
      # shellcheck disable=SC2086
      apt install -y -qq --no-install-recommends $deps >&2
    fi
  done
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt download postfix exim4-daemon-light >&2)
  mkdir -p "$root"
  for deb in "$tmp"/*.deb; do
    dpkg-deb -x "$deb" "$root"
  done
fi
# exim4-daemon-light's binary looks up its compiled-in user Debian-exim
# before it reads any configuration; the exim4-base package would create it.
if ! have_user; then
  useradd --system --user-group --no-create-home --home-dir /var/spool/exim4 --shell /usr/sbin/nologin Debian-exim
fi
have_unpacked || { echo "unpacking postfix/exim4 into $root did not give the expected binaries" >&2; exit 1; }
echo "$root"
