#!/usr/bin/env bash
# `make run`: serve bulkd on 127.0.0.1:8080 for a newcomer. When no Redis is
# configured (BULKD_REDIS_URL unset) it starts a private redis-server on a
# loopback port with its data under var/redis (append-only file, so jobs and
# the demo account survive restarts), creates the demo account on first
# start, and stops that redis-server again when bulkd exits.
# Unless BULKD_DNS_SERVER is set or MAILWORLD=0, it also starts the demo mail
# world (hack/mailworld: a DNS server and SMTP servers on loopback, see
# internal/mailworld) so email verification has mail servers to talk to, and
# stops it again on exit.
# Unless BULKD_SPAMD_ADDR is set or SPAMD=0, it also starts a private
# SpamAssassin spamd on a loopback port (local tests only, no user
# configuration; installing the Debian packages when missing and root) for
# POST /v1/content-spam-check, and stops it on exit. Without spamd the API
# still runs and that endpoint answers 503 engine_unavailable.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/bulkd}
mkdir -p var
started_redis=""
if [ -z "${BULKD_REDIS_URL:-}" ]; then
  hack/ensure-redis.sh
  port=${BULKD_LOCAL_REDIS_PORT:-6390}
  mkdir -p var/redis
  if redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
    echo "using the redis-server already listening on 127.0.0.1:$port" >&2
    # bulkd's ledger and accepted jobs need an append-only file; say so
    # when the Redis found here runs without one.
    if [ "$(redis-cli -h 127.0.0.1 -p "$port" config get appendonly 2>/dev/null | sed -n 2p)" != "yes" ]; then
      echo "warning: that redis-server runs without an append-only file (appendonly no): a restart of it loses data" >&2
    fi
  else
    # Durability (docs/reliability.md): every write goes to the
    # append-only file in var/redis, fsynced once a second (a crash of the
    # machine loses at most the last second; a crash or restart of Redis
    # itself loses nothing it acknowledged). noeviction: Redis refuses
    # writes when full rather than silently dropping keys (accounts,
    # ledgers, jobs).
    redis-server --bind 127.0.0.1 --port "$port" --dir "$PWD/var/redis" \
      --appendonly yes --appendfsync everysec --save "" --maxmemory-policy noeviction \
      --daemonize yes --pidfile "$PWD/var/redis/redis.pid" --logfile "$PWD/var/redis/redis.log" >/dev/null
    started_redis=1
    for _ in $(seq 1 50); do
      redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && break
      sleep 0.1
    done
    echo "started redis-server on 127.0.0.1:$port (data in var/redis)" >&2
  fi
  export BULKD_REDIS_URL="redis://127.0.0.1:$port/0"
fi
started_spamd=""
spamd_ping() { # PING over the SPAMC protocol; true when spamd answers PONG
  local port=$1 reply
  { exec 7<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
  printf 'PING SPAMC/1.5\r\n\r\n' >&7
  reply=$(timeout 2 head -n1 <&7 || true)
  exec 7<&- 7>&- || true
  [[ "$reply" == *PONG* ]]
}
if [ -z "${BULKD_SPAMD_ADDR:-}" ] && [ "${SPAMD:-1}" != 0 ]; then
  if hack/ensure-spamd.sh; then
    sport=${BULKD_LOCAL_SPAMD_PORT:-7830}
    mkdir -p var/spamd
    if spamd_ping "$sport"; then
      echo "using the spamd already listening on 127.0.0.1:$sport" >&2
    else
      spamd_bin=$(command -v spamd || echo /usr/sbin/spamd)
      user_args=()
      [ "$(id -u)" = "0" ] && user_args=(--username nobody) # spamd will not scan as root
      # The same settings as the tests' spamd (internal/testspamd.Args).
      "$spamd_bin" --listen "127.0.0.1:$sport" --allowed-ips 127.0.0.1 --max-children 2 --min-children 2 \
        --min-spare 0 --max-spare 2 --local --nouser-config --syslog "$PWD/var/spamd/spamd.log" --cf 'use_bayes 0' --cf 'bayes_auto_learn 0' \
        "${user_args[@]}" --pidfile "$PWD/var/spamd/spamd.pid" --daemonize
      started_spamd=1
      for _ in $(seq 1 300); do # loading the rules takes a few seconds
        spamd_ping "$sport" && break
        sleep 0.2
      done
      if spamd_ping "$sport"; then
        echo "started spamd on 127.0.0.1:$sport (log in var/spamd/spamd.log)" >&2
      else
        echo "spamd did not start (see var/spamd/spamd.log): POST /v1/content-spam-check will answer 503 engine_unavailable" >&2
      fi
    fi
    export BULKD_SPAMD_ADDR="127.0.0.1:$sport"
  else
    echo "continuing without spamd: POST /v1/content-spam-check will answer 503 engine_unavailable" >&2
  fi
fi
mailworld_pid=""
stop_local() {
  if [ -n "$started_spamd" ] && [ -f var/spamd/spamd.pid ]; then
    kill "$(cat var/spamd/spamd.pid)" 2>/dev/null || true
  fi
  if [ -n "$started_redis" ] && [ -f var/redis/redis.pid ]; then
    kill "$(cat var/redis/redis.pid)" 2>/dev/null || true
  fi
  if [ -n "$mailworld_pid" ]; then
    kill "$mailworld_pid" 2>/dev/null || true
    wait "$mailworld_pid" 2>/dev/null || true
  fi
}
trap stop_local EXIT
if [ -z "${BULKD_DNS_SERVER:-}" ] && [ "${MAILWORLD:-1}" != 0 ]; then
  "${GO:-go}" build -o bin/mailworld ./hack/mailworld
  rm -f var/mailworld.env
  bin/mailworld --scenario demo --env-file var/mailworld.env >var/mailworld.log 2>&1 &
  mailworld_pid=$!
  for _ in $(seq 1 100); do
    [ -s var/mailworld.env ] && break
    kill -0 "$mailworld_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -s var/mailworld.env ]; then
    echo "the demo mail world did not start (see var/mailworld.log)" >&2
    exit 1
  fi
  BULKD_DNS_SERVER=$(sed -n 's/^BULKD_DNS_SERVER=//p' var/mailworld.env)
  BULKD_SMTP_PORT=$(sed -n 's/^BULKD_SMTP_PORT=//p' var/mailworld.env)
  # The world's mail servers are on loopback, which bulkd refuses by
  # default (the outbound policy): the demo opens it explicitly, on top of
  # any allowance already set.
  world_allow=$(sed -n 's/^BULKD_OUTBOUND_ALLOW_CIDRS=//p' var/mailworld.env)
  BULKD_OUTBOUND_ALLOW_CIDRS="${BULKD_OUTBOUND_ALLOW_CIDRS:+$BULKD_OUTBOUND_ALLOW_CIDRS,}${world_allow}"
  export BULKD_DNS_SERVER BULKD_SMTP_PORT BULKD_OUTBOUND_ALLOW_CIDRS
  # The demo's grey.test greylists for 20 s: retry after 25 s, not the
  # production default of minutes, so the quickstart completes quickly.
  export BULKD_VERIFY_RETRY_DELAYS="${BULKD_VERIFY_RETRY_DELAYS:-25s,1m}"
  domains=$(sed -n 's/^MAILWORLD_DOMAINS=//p' var/mailworld.env | sed 's/,/, /g')
  echo "demo mail world running (DNS $BULKD_DNS_SERVER, SMTP port $BULKD_SMTP_PORT): $domains" >&2
fi
# The sample dataset: 5,000 clearly fictional companies, generated by bulkd
# itself (same seed, same file) and imported on first start.
if [ ! -s var/companies.jsonl ]; then
  "$BIN" admin companies generate --count 5000 --seed 1 > var/companies.jsonl
fi
# The sample companies live under the reserved .example TLD, so there are no
# real websites to check for redirects: the checks are off here.
# --dashboard-allow-http: the dashboard's session cookie without Secure, as
# this serves plain HTTP on loopback (never in production).
"$BIN" serve --demo --dashboard-allow-http --company-data var/companies.jsonl --redirect-checks=false \
  --log-format "${BULKD_LOG_FORMAT:-text}" "$@"
