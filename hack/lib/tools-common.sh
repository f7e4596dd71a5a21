# shellcheck shell=bash
#
# Helpers shared by hack/tools.sh and hack/envtest.sh. Source it; do not run it.
#
# Contract of the scripts built on it:
#   * stdout carries only the resulting path(s), so a Makefile can capture it;
#   * every message (and all output of the go command) goes to stderr;
#   * results are cached outside the repository, in
#       ${BULKD_TOOLS_CACHE:-$HOME/.cache/bulkd-tools}
#     under a path that names the version, with a stamp file written only after
#     a successful build, so a second run finds them and returns at once;
#   * a build holds an flock on a per-tool/per-version lock file, so two
#     concurrent invocations build once (the second waits, then reuses).

: "${BULKD_LOG_PREFIX:=$(basename "$0")}"

bulkd::log() {
  printf '%s: %s\n' "${BULKD_LOG_PREFIX}" "$*" >&2
}

bulkd::die() {
  bulkd::log "error: $*"
  exit 1
}

# Prints the cache root and makes sure it exists.
bulkd::cache_dir() {
  local dir
  if [[ -n "${BULKD_TOOLS_CACHE:-}" ]]; then
    dir="${BULKD_TOOLS_CACHE}"
  else
    [[ -n "${HOME:-}" ]] || bulkd::die "neither BULKD_TOOLS_CACHE nor HOME is set"
    dir="${HOME}/.cache/bulkd-tools"
  fi
  mkdir -p "${dir}" || bulkd::die "cannot create cache dir ${dir}"
  (cd "${dir}" && pwd -P)
}

# Environment for every go command run by these scripts: never let a
# go.work, a vendor directory or the caller's GOFLAGS steer the build; build
# static binaries. A caller may still set CGO_ENABLED explicitly through
# BULKD_TOOLS_CGO_ENABLED.
bulkd::go_env() {
  command -v go >/dev/null 2>&1 || bulkd::die "go is not on PATH"
  command -v flock >/dev/null 2>&1 || bulkd::die "flock is not on PATH (Debian: apt-get install util-linux)"
  export GOWORK=off
  export GOFLAGS=-buildvcs=false
  export CGO_ENABLED="${BULKD_TOOLS_CGO_ENABLED:-0}"
  unset GOOS GOARCH GOBIN
}

# bulkd::lock FILE: takes an exclusive flock on FILE for the rest of the
# script (the fd is inherited by nothing we care about and is released when
# the script exits).
bulkd::lock() {
  local file="$1"
  mkdir -p "$(dirname "${file}")"
  exec {BULKD_LOCK_FD}>"${file}"
  if ! flock -n "${BULKD_LOCK_FD}"; then
    bulkd::log "another build holds ${file}; waiting for it"
    flock "${BULKD_LOCK_FD}"
  fi
}

# bulkd::stamp_ok BINARY EXPECTED: true when BINARY is an executable file and
# BINARY's stamp file holds exactly EXPECTED.
bulkd::stamp_ok() {
  local bin="$1" want="$2" stamp
  stamp="$(dirname "$1")/.$(basename "$1").stamp"
  [[ -x "${bin}" && -f "${stamp}" ]] || return 1
  [[ "$(cat "${stamp}")" == "${want}" ]]
}

# bulkd::install_bin SRC DEST STAMP: moves a freshly built SRC to DEST
# atomically (same file system) and records STAMP next to it.
bulkd::install_bin() {
  local src="$1" dest="$2" want="$3" stamp
  stamp="$(dirname "${dest}")/.$(basename "${dest}").stamp"
  rm -f "${stamp}"
  chmod 0755 "${src}"
  mv -f "${src}" "${dest}"
  printf '%s\n' "${want}" >"${stamp}.tmp"
  mv -f "${stamp}.tmp" "${stamp}"
}

# bulkd::mod_download MODULE@VERSION: downloads the module (verified against
# the checksum database as usual) and prints the `go mod download -json`
# record. Runs in an empty temp dir so no surrounding go.mod is involved.
bulkd::mod_download() {
  local tmp out rc=0
  tmp="$(mktemp -d)"
  out="$(cd "${tmp}" && go mod download -json "$1" 2>"${tmp}.err")" || rc=$?
  cat "${tmp}.err" >&2
  rm -rf "${tmp}" "${tmp}.err"
  if [[ ${rc} -ne 0 ]]; then
    printf '%s\n' "${out}" | bulkd::json_field Error | sed 's/\\n/\n/g; s/\\t/  /g' >&2
    return "${rc}"
  fi
  printf '%s\n' "${out}"
}

# bulkd::json_field NAME: reads a `go mod download -json` record on stdin and
# prints the string field NAME.
bulkd::json_field() {
  sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p" | head -n1
}

bulkd::now() { date +%s; }
