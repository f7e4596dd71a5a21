#!/usr/bin/env bash
#
# hack/envtest.sh
#
# Builds the control-plane binaries that controller-runtime's envtest needs
# (kube-apiserver, etcd, and kubectl) from source through the Go module proxy,
# caches them outside the repository and prints the directory holding them on
# stdout; use it as KUBEBUILDER_ASSETS:
#
#   export KUBEBUILDER_ASSETS="$(hack/envtest.sh)"
#   KUBEBUILDER_ASSETS=$(shell hack/envtest.sh) go test ./...     # Makefile
#
# Nothing prebuilt is downloaded (setup-envtest's download source is not
# reachable from here). A second run finds the cached binaries by version and
# returns at once. Messages go to stderr. A cold build takes several minutes
# on 2 cores (kube-apiserver is the bulk of it).
#
# Layout:   $CACHE/envtest/k8s-<k8s version>/{kube-apiserver,etcd,kubectl}
#           $CACHE/envtest/.src/k8s-<k8s version>/{kubernetes,etcd-v<etcd version>}/
#                                     generated wrapper modules (go.mod, go.sum)
#           $CACHE/.locks/...         flock files
#
# Environment:
#   BULKD_TOOLS_CACHE             cache root (default $HOME/.cache/bulkd-tools)
#   ENVTEST_K8S_VERSION           k8s.io/kubernetes release, with or without v
#                                 (default below)
#   ENVTEST_K8S_STAGING_VERSION   version of the k8s.io/<staging> modules
#                                 (default: v0.<minor>.<patch> of the above)
#   ENVTEST_ETCD_VERSION          go.etcd.io/etcd/server/v3 release (default below)
#   ENVTEST_KUBECTL               1 to build kubectl too (default), 0 to skip
#   BULKD_TOOLS_CGO_ENABLED       CGO_ENABLED for the builds (default 0)
#
# Why these versions:
#   * k8s 1.36.4: the project uses k8s.io/api v0.36.6, so the wanted release
#     is v1.36.6, but the module proxy refuses k8s.io/kubernetes v1.36.6
#     ("not available") and v1.36.5 cannot be verified against the checksum
#     database (lookup 404). v1.36.4 is the newest 1.36 patch that downloads
#     and verifies. Any 1.36 patch serves the same API to a v0.36 client.
#   * etcd 3.6.16: newest 3.6 patch release on the proxy; Kubernetes 1.36
#     builds against the etcd 3.6 client libraries (3.6.8 in its go.mod).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/lib/tools-common.sh
source "${HACK_DIR}/lib/tools-common.sh"

K8S_VERSION="${ENVTEST_K8S_VERSION:-1.36.4}"
K8S_VERSION="${K8S_VERSION#v}"
ETCD_VERSION="${ENVTEST_ETCD_VERSION:-3.6.16}"
ETCD_VERSION="${ETCD_VERSION#v}"
WITH_KUBECTL="${ENVTEST_KUBECTL:-1}"

if [[ ! "${K8S_VERSION}" =~ ^1\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$ ]]; then
  bulkd::die "ENVTEST_K8S_VERSION='${K8S_VERSION}' is not a 1.<minor>.<patch> release"
fi
K8S_MINOR="${BASH_REMATCH[1]}"
STAGING_VERSION="${ENVTEST_K8S_STAGING_VERSION:-v0.${K8S_MINOR}.${BASH_REMATCH[2]}${BASH_REMATCH[3]}}"
[[ "${STAGING_VERSION}" == v* ]] || STAGING_VERSION="v${STAGING_VERSION}"
[[ "${ETCD_VERSION}" =~ ^3\.[0-9]+\.[0-9]+ ]] || bulkd::die "ENVTEST_ETCD_VERSION='${ETCD_VERSION}' is not a 3.x.y release"
case "${WITH_KUBECTL}" in 0|1) ;; *) bulkd::die "ENVTEST_KUBECTL must be 0 or 1" ;; esac

CACHE="$(bulkd::cache_dir)"
OUT="${CACHE}/envtest/k8s-${K8S_VERSION}"
SRC="${CACHE}/envtest/.src/k8s-${K8S_VERSION}"
CGO="${BULKD_TOOLS_CGO_ENABLED:-0}"

# What each cached binary must have been built from; compared with its stamp.
# Bump RECIPE when a change to this script changes what it builds (flags,
# ldflags...), so that cached binaries of the old recipe are rebuilt.
RECIPE=2
STAMP_K8S="k8s.io/kubernetes@v${K8S_VERSION} staging=${STAGING_VERSION} CGO_ENABLED=${CGO} recipe=${RECIPE}"
STAMP_ETCD="go.etcd.io/etcd/server/v3@v${ETCD_VERSION} CGO_ENABLED=${CGO} recipe=${RECIPE}"

# missing_binaries: prints the names of the binaries that must be (re)built.
missing_binaries() {
  bulkd::stamp_ok "${OUT}/kube-apiserver" "${STAMP_K8S}" || echo kube-apiserver
  if [[ "${WITH_KUBECTL}" == 1 ]]; then
    bulkd::stamp_ok "${OUT}/kubectl" "${STAMP_K8S}" || echo kubectl
  fi
  bulkd::stamp_ok "${OUT}/etcd" "${STAMP_ETCD}" || echo etcd
}

# fetch_k8s / fetch_etcd: download (and checksum-verify) the module and print
# its `go mod download -json` record; die with a hint if it cannot be had.
fetch_k8s() {
  bulkd::mod_download "k8s.io/kubernetes@v${K8S_VERSION}" \
    || bulkd::die "k8s.io/kubernetes v${K8S_VERSION} cannot be downloaded; pick another 1.${K8S_MINOR} patch with ENVTEST_K8S_VERSION (try: go mod download -json k8s.io/kubernetes@v1.${K8S_MINOR}.N)"
}

fetch_etcd() {
  bulkd::mod_download "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}" \
    || bulkd::die "go.etcd.io/etcd/server/v3 v${ETCD_VERSION} cannot be downloaded; pick another with ENVTEST_ETCD_VERSION (try: go list -m -versions go.etcd.io/etcd/server/v3)"
}

# wrapper_go_lines GOMOD: prints the go and godebug lines for a wrapper module
# that builds the main module of GOMOD, so the binary gets the language
# version and GODEBUG defaults its authors chose (the godebug/go lines of a
# dependency are ignored by Go). The wrapper needs at least go 1.24 for its
# tool directive; for an older upstream the GODEBUG defaults are kept with a
# godebug line.
wrapper_go_lines() {
  local gomod="$1" gover minor
  gover="$(sed -n 's/^go \([0-9][0-9.]*\).*/\1/p' "${gomod}" | head -n1)"
  [[ -n "${gover}" ]] || gover=1.24
  minor="$(cut -d. -f2 <<<"${gover}")"
  if [[ "${gover}" == 1.* && "${minor}" -lt 24 ]]; then
    echo "go 1.24"
    grep -qE '^godebug' "${gomod}" || echo "godebug default=go1.${minor}"
  else
    echo "go ${gover}"
  fi
  # godebug lines, single or in a block.
  awk '/^godebug[ \t]*\(/ { blk = 1 } blk || /^godebug[ \t]/ { print } blk && /^[ \t]*\)/ { blk = 0 }' "${gomod}"
}

# write_k8s_wrapper DIR BIN...: generates, in DIR, a module that requires
# k8s.io/kubernetes and points every staging module it replaces with a local
# ./staging path at the published module of STAGING_VERSION. Replace
# directives of a dependency are ignored by Go, so they have to be restated
# in the main module; they are generated from kubernetes' own go.mod.
write_k8s_wrapper() {
  local dir="$1" info gomod replaces b
  shift
  info="$(fetch_k8s)" || exit 1
  gomod="$(printf '%s\n' "${info}" | bulkd::json_field GoMod)"
  [[ -f "${gomod}" ]] || bulkd::die "no go.mod found for k8s.io/kubernetes v${K8S_VERSION}"
  K8S_INFO_FILE="$(printf '%s\n' "${info}" | bulkd::json_field Info)"

  # Restate kubernetes' replace directives: "./staging/src/<mod>" becomes
  # "<mod> STAGING_VERSION"; replacements by module version are copied as
  # they are; any other local path is an error.
  replaces="$(awk -v staging="${STAGING_VERSION}" '
    function emit(line,   n, f, arrow, i, lhs, rhs) {
      sub(/\/\/.*/, "", line)
      n = split(line, f, /[ \t]+/)
      lhs = ""; rhs = ""; arrow = 0
      for (i = 1; i <= n; i++) {
        if (f[i] == "") continue
        if (f[i] == "=>") { arrow = 1; continue }
        if (arrow) rhs = rhs (rhs == "" ? "" : " ") f[i]
        else lhs = lhs (lhs == "" ? "" : " ") f[i]
      }
      if (!arrow) return
      if (rhs ~ /^\.\/staging\/src\//) {
        mod = rhs; sub(/^\.\/staging\/src\//, "", mod)
        split(lhs, l, " ")
        if (mod != l[1]) { print "BAD " line; return }
        print "\t" l[1] " => " l[1] " " staging
      } else if (rhs ~ /^(\.|\/)/) {
        print "BAD " line
      } else {
        print "\t" lhs " => " rhs
      }
    }
    /^replace[ \t]*\(/ { inblk = 1; next }
    inblk && /^[ \t]*\)/ { inblk = 0; next }
    inblk { emit($0); next }
    /^replace[ \t]/ { l = $0; sub(/^replace[ \t]+/, "", l); emit(l) }
  ' "${gomod}")"
  if grep -q '^BAD ' <<<"${replaces}"; then
    bulkd::die "k8s.io/kubernetes v${K8S_VERSION} go.mod has replace directives this script cannot restate: $(grep '^BAD ' <<<"${replaces}" | tr '\n' ';')"
  fi
  [[ -n "${replaces}" ]] || bulkd::die "found no staging replace directives in ${gomod}; has the layout of k8s.io/kubernetes changed?"
  bulkd::log "restating $(grep -c '=>' <<<"${replaces}") replace directives of k8s.io/kubernetes (staging modules at ${STAGING_VERSION})"

  mkdir -p "${dir}"
  {
    echo "// Generated by hack/envtest.sh; builds k8s.io/kubernetes commands. Do not edit."
    echo "module bulkd.invalid/envtest-build/kubernetes"
    echo
    wrapper_go_lines "${gomod}"
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    echo "tool ("
    for b in "$@"; do echo "	k8s.io/kubernetes/cmd/${b}"; done
    echo ")"
    echo
    echo "replace ("
    printf '%s\n' "${replaces}"
    echo ")"
  } >"${dir}/go.mod"
}

# build_k8s BIN...: builds the named k8s.io/kubernetes commands into OUT.
build_k8s() {
  local dir="${SRC}/kubernetes" tmp start ldflags pkgs=() b major=1
  write_k8s_wrapper "${dir}" "$@"
  start="$(bulkd::now)"
  bulkd::log "resolving the dependency graph (go mod tidy in ${dir})"
  (cd "${dir}" && go mod tidy 1>&2) || bulkd::die "go mod tidy failed in ${dir}"

  # Same variables as kubernetes' hack/lib/version.sh sets, so that
  # `kube-apiserver --version` and /version report the release. buildDate is
  # the release's publication time from the module proxy, for reproducibility.
  local build_date
  build_date="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "${K8S_INFO_FILE}" 2>/dev/null || true)"
  [[ -n "${build_date}" ]] || build_date="1970-01-01T00:00:00Z"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=v${K8S_VERSION}"
    ldflags+=" -X ${pkg}.gitMajor=${major}"
    ldflags+=" -X ${pkg}.gitMinor=${K8S_MINOR}"
    # The module proxy does not tell the commit; leave it empty rather than
    # the "$Format:%H$" placeholder.
    ldflags+=" -X ${pkg}.gitCommit="
    ldflags+=" -X ${pkg}.buildDate=${build_date}"
  done

  for b in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/${b}"); done
  mkdir -p "${OUT}"
  tmp="$(mktemp -d "${OUT}/.build.XXXXXX")"
  bulkd::log "building $* from k8s.io/kubernetes v${K8S_VERSION} ($(go env GOVERSION), CGO_ENABLED=${CGO_ENABLED}); a cold build takes several minutes"
  if ! (cd "${dir}" && go build -trimpath -ldflags="${ldflags}" -o "${tmp}/" "${pkgs[@]}" 1>&2); then
    rm -rf "${tmp}"
    bulkd::die "building $* from k8s.io/kubernetes v${K8S_VERSION} failed"
  fi
  for b in "$@"; do
    bulkd::install_bin "${tmp}/${b}" "${OUT}/${b}" "${STAMP_K8S}"
  done
  rm -rf "${tmp}"
  bulkd::log "built $* in $(( $(bulkd::now) - start ))s"
}

# build_etcd: builds etcd into OUT. The etcd command is the main package at
# the root of module go.etcd.io/etcd/server/v3 (server/main.go calls
# etcdmain.Main). That go.mod has relative replace directives, so
# `go install ...@version` refuses it; a wrapper module builds it with the
# versions its go.mod requires (all etcd modules at the same release).
build_etcd() {
  local dir="${SRC}/etcd-v${ETCD_VERSION}" tmp start info gomod
  start="$(bulkd::now)"
  info="$(fetch_etcd)" || exit 1
  gomod="$(printf '%s\n' "${info}" | bulkd::json_field GoMod)"

  mkdir -p "${dir}"
  {
    echo "// Generated by hack/envtest.sh; builds the etcd server. Do not edit."
    echo "module bulkd.invalid/envtest-build/etcd"
    echo
    wrapper_go_lines "${gomod}"
    echo
    echo "require go.etcd.io/etcd/server/v3 v${ETCD_VERSION}"
    echo
    echo "tool go.etcd.io/etcd/server/v3"
  } >"${dir}/go.mod"
  (cd "${dir}" && go mod tidy 1>&2) || bulkd::die "go mod tidy failed in ${dir}"

  mkdir -p "${OUT}"
  tmp="$(mktemp -d "${OUT}/.build.XXXXXX")"
  bulkd::log "building etcd v${ETCD_VERSION} ($(go env GOVERSION), CGO_ENABLED=${CGO_ENABLED})"
  if ! (cd "${dir}" && go build -trimpath -ldflags="-s -w" -o "${tmp}/etcd" go.etcd.io/etcd/server/v3 1>&2); then
    rm -rf "${tmp}"
    bulkd::die "building etcd v${ETCD_VERSION} failed"
  fi
  bulkd::install_bin "${tmp}/etcd" "${OUT}/etcd" "${STAMP_ETCD}"
  rm -rf "${tmp}"
  bulkd::log "built etcd in $(( $(bulkd::now) - start ))s"
}

main() {
  local missing k8s_bins=() b start
  missing="$(missing_binaries)"
  if [[ -z "${missing}" ]]; then
    printf '%s\n' "${OUT}"
    return 0
  fi

  bulkd::go_env
  bulkd::lock "${CACHE}/.locks/envtest-k8s-${K8S_VERSION}.lock"
  missing="$(missing_binaries)" # re-check: another run may have built them
  if [[ -n "${missing}" ]]; then
    start="$(bulkd::now)"
    bulkd::log "building envtest binaries for Kubernetes ${K8S_VERSION} into ${OUT}: $(tr '\n' ' ' <<<"${missing}")"
    for b in ${missing}; do
      case "${b}" in
        kube-apiserver|kubectl) k8s_bins+=("${b}") ;;
      esac
    done
    # Fail fast, before a long build, if a module version cannot be had.
    if [[ ${#k8s_bins[@]} -gt 0 ]]; then
      bulkd::log "fetching k8s.io/kubernetes v${K8S_VERSION}"
      fetch_k8s >/dev/null
    fi
    if grep -qx etcd <<<"${missing}"; then
      bulkd::log "fetching go.etcd.io/etcd/server/v3 v${ETCD_VERSION}"
      fetch_etcd >/dev/null
      build_etcd
    fi
    if [[ ${#k8s_bins[@]} -gt 0 ]]; then
      build_k8s "${k8s_bins[@]}"
    fi
    bulkd::log "envtest binaries ready in $(( $(bulkd::now) - start ))s"
  fi
  printf '%s\n' "${OUT}"
}

main "$@"
