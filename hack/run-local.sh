#!/usr/bin/env bash
# `make run`: serve bulkd on 127.0.0.1:8080 for a newcomer. When no Redis is
# configured (BULKD_REDIS_URL unset) it starts a private redis-server on a
# loopback port with its data under var/redis (append-only file, so jobs and
# the demo account survive restarts), creates the demo account on first
# start, and stops that redis-server again when bulkd exits.
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
  else
    redis-server --bind 127.0.0.1 --port "$port" --dir "$PWD/var/redis" --appendonly yes --save "" \
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
stop_redis() {
  if [ -n "$started_redis" ] && [ -f var/redis/redis.pid ]; then
    kill "$(cat var/redis/redis.pid)" 2>/dev/null || true
  fi
}
trap stop_redis EXIT
if [ -x hack/load-sample.sh ]; then
  hack/load-sample.sh
fi
"$BIN" serve --demo --log-format "${BULKD_LOG_FORMAT:-text}" "$@"
