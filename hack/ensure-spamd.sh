#!/usr/bin/env bash
# Makes sure SpamAssassin's spamd (Debian packages spamassassin and spamd)
# is installed: POST /v1/content-spam-check runs on it, and its tests start
# their own (internal/testspamd). Installs it when missing and we are root;
# otherwise says exactly what to install. The package's rules ship with it:
# nothing is fetched at run time (tests and `make run` use local tests only).
set -euo pipefail
if command -v spamd >/dev/null 2>&1 || [ -x /usr/sbin/spamd ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "spamd not found: installing Debian packages spamassassin and spamd (about a minute: sa-compile compiles the rules)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq spamassassin spamd >&2
  # The package may start a system spamd on port 783; bulkd never uses it.
  exit 0
fi
echo "spamd is required for the content spam check. Install it with: sudo apt-get install spamassassin spamd" >&2
exit 1
