#!/usr/bin/env bash
#
# hack/tools.sh TOOL...
#
# Builds the named Go tools from source (through the Go module proxy) at a
# pinned version, caches them outside the repository and prints the path of
# each binary on stdout, one per line. A second run finds the cached binary by
# version and returns at once. Messages go to stderr.
#
#   hack/tools.sh controller-gen      -> .../tools/controller-gen/v0.21.0/controller-gen
#   hack/tools.sh kwok                -> .../tools/kwok/v0.8.0/kwok
#   hack/tools.sh envtest             -> same as hack/envtest.sh (KUBEBUILDER_ASSETS dir)
#   hack/tools.sh --list              -> the known tools and the versions in force
#
# Makefile use:
#   CONTROLLER_GEN ?= $(shell hack/tools.sh controller-gen)
#
# Environment:
#   BULKD_TOOLS_CACHE         cache root (default $HOME/.cache/bulkd-tools)
#   CONTROLLER_TOOLS_VERSION  controller-tools release (default below)
#   KWOK_VERSION              kwok release (default below)
#   BULKD_TOOLS_CGO_ENABLED   CGO_ENABLED for the builds (default 0)
#
# Why these versions:
#   controller-tools v0.21.0 is the release built against k8s.io/* v0.36
#   (its go.mod requires k8s.io/api, apimachinery, apiextensions-apiserver
#   v0.36.0), matching this project's k8s.io v0.36.6 / controller-runtime
#   v0.24.1. v0.22.0 and later require k8s.io v0.37.
#   kwok v0.8.0 (the fake-node controller of the scale bench, hack/kube-bench)
#   is the release built against k8s.io/* v0.36 (its go.mod requires
#   k8s.io/api, client-go, apiserver v0.36.1) and has no replace directives,
#   so `go install sigs.k8s.io/kwok/cmd/kwok@v0.8.0` builds it as released.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/tools-common.sh
source "${HACK_DIR}/lib/tools-common.sh"

: "${CONTROLLER_TOOLS_VERSION:=v0.21.0}"
: "${KWOK_VERSION:=v0.8.0}"

# Bump when a change to this script changes what it builds, so that cached
# binaries of the old recipe are rebuilt.
RECIPE=1

# tool_spec NAME: sets MODULE, PACKAGE, VERSION for a known tool.
tool_spec() {
  case "$1" in
    controller-gen)
      MODULE=sigs.k8s.io/controller-tools
      PACKAGE=sigs.k8s.io/controller-tools/cmd/controller-gen
      VERSION="${CONTROLLER_TOOLS_VERSION}"
      ;;
    kwok)
      MODULE=sigs.k8s.io/kwok
      PACKAGE=sigs.k8s.io/kwok/cmd/kwok
      VERSION="${KWOK_VERSION}"
      ;;
    *)
      return 1
      ;;
  esac
  [[ "${VERSION}" == v* ]] || VERSION="v${VERSION}"
}

KNOWN_TOOLS=(controller-gen kwok)

usage() {
  cat >&2 <<EOF
usage: $(basename "$0") TOOL...
       $(basename "$0") --list
tools: ${KNOWN_TOOLS[*]} envtest
EOF
}

# ensure_tool NAME: builds NAME if needed, prints its path.
ensure_tool() {
  local name="$1" cache dir bin want tmp start
  tool_spec "${name}" || { usage; bulkd::die "unknown tool '${name}'"; }

  cache="$(bulkd::cache_dir)"
  dir="${cache}/tools/${name}/${VERSION}"
  bin="${dir}/${name}"
  want="${PACKAGE}@${VERSION} CGO_ENABLED=${BULKD_TOOLS_CGO_ENABLED:-0} recipe=${RECIPE}"

  if bulkd::stamp_ok "${bin}" "${want}"; then
    printf '%s\n' "${bin}"
    return 0
  fi

  bulkd::go_env
  bulkd::lock "${cache}/.locks/tool-${name}-${VERSION}.lock"
  # Someone else may have built it while we waited for the lock.
  if bulkd::stamp_ok "${bin}" "${want}"; then
    printf '%s\n' "${bin}"
    return 0
  fi

  bulkd::log "building ${name} from ${PACKAGE}@${VERSION} ($(go env GOVERSION), CGO_ENABLED=${CGO_ENABLED})"
  start="$(bulkd::now)"
  mkdir -p "${dir}"
  tmp="$(mktemp -d "${dir}/.build.XXXXXX")"
  # go install pkg@version builds outside any main module, with exactly the
  # dependency versions of the tool's own go.mod. Run it from the temp dir so
  # no surrounding go.mod is even looked at.
  if ! (cd "${tmp}" && GOBIN="${tmp}" go install -trimpath -ldflags='-s -w' "${PACKAGE}@${VERSION}" 1>&2); then
    rm -rf "${tmp}"
    bulkd::die "building ${PACKAGE}@${VERSION} failed (is ${MODULE} ${VERSION} on the module proxy? try: go list -m -versions ${MODULE})"
  fi
  bulkd::install_bin "${tmp}/${name}" "${bin}" "${want}"
  rm -rf "${tmp}"
  bulkd::log "built ${bin} in $(( $(bulkd::now) - start ))s"
  printf '%s\n' "${bin}"
}

main() {
  if [[ $# -eq 0 ]]; then
    usage
    exit 2
  fi
  local t
  for t in "$@"; do
    case "${t}" in
      -h|--help) usage; exit 0 ;;
      --list)
        for name in "${KNOWN_TOOLS[@]}"; do
          tool_spec "${name}"
          printf '%s\t%s@%s\n' "${name}" "${PACKAGE}" "${VERSION}"
        done
        printf 'envtest\tsee hack/envtest.sh\n'
        ;;
      envtest) "${HACK_DIR}/envtest.sh" ;;
      *)
        # Each tool in its own subshell so each one's lock is released as
        # soon as it is built.
        ( ensure_tool "${t}" )
        ;;
    esac
  done
}

main "$@"
