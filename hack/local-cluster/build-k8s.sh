#!/usr/bin/env bash
#
# hack/local-cluster/build-k8s.sh
#
# Builds the node/control-plane binaries that hack/local-cluster needs on top
# of hack/envtest.sh's (kube-apiserver, etcd, kubectl): kube-controller-manager,
# kube-scheduler, kubelet and kube-proxy, from k8s.io/kubernetes through the Go
# module proxy, with the same wrapper module (staging replaces restated from
# kubernetes' go.mod) and the same version ldflags as hack/envtest.sh.
# Prints the cache directory on stdout; it then holds all seven binaries
# (the envtest ones are hard-linked/copied in).
#
# Layout: $CACHE/cluster/k8s-<ver>/{kube-apiserver,etcd,kubectl,kube-controller-manager,kube-scheduler,kubelet,kube-proxy}
#         $CACHE/cluster/.src/k8s-<ver>/kubernetes/{go.mod,go.sum}
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
# shellcheck disable=SC2034 # read by hack/lib/tools-common.sh
BULKD_LOG_PREFIX=local-cluster-build
# shellcheck source=hack/lib/tools-common.sh
source "${ROOT}/hack/lib/tools-common.sh"

K8S_VERSION="${ENVTEST_K8S_VERSION:-1.36.4}"
K8S_VERSION="${K8S_VERSION#v}"
[[ "${K8S_VERSION}" =~ ^1\.([0-9]+)\.([0-9]+) ]] || bulkd::die "bad ENVTEST_K8S_VERSION"
K8S_MINOR="${BASH_REMATCH[1]}"
CACHE="$(bulkd::cache_dir)"
OUT="${CACHE}/cluster/k8s-${K8S_VERSION}"
SRC="${CACHE}/cluster/.src/k8s-${K8S_VERSION}/kubernetes"
CGO="${BULKD_TOOLS_CGO_ENABLED:-0}"
RECIPE=1
STAMP="k8s.io/kubernetes@v${K8S_VERSION} CGO_ENABLED=${CGO} cluster-recipe=${RECIPE}"
BINS=(kube-controller-manager kube-scheduler kubelet kube-proxy)

missing() { local b; for b in "${BINS[@]}"; do bulkd::stamp_ok "${OUT}/${b}" "${STAMP}" || echo "${b}"; done; }

link_envtest() {
  local envtest b
  envtest="$(ENVTEST_K8S_VERSION="${K8S_VERSION}" "${ROOT}/hack/envtest.sh")"
  mkdir -p "${OUT}"
  for b in kube-apiserver etcd kubectl; do
    if [[ ! -x "${OUT}/${b}" || "${envtest}/${b}" -nt "${OUT}/${b}" ]]; then
      ln -f "${envtest}/${b}" "${OUT}/${b}" 2>/dev/null || cp -f "${envtest}/${b}" "${OUT}/${b}"
    fi
  done
}

main() {
  link_envtest   # also guarantees envtest's generated wrapper module exists
  local todo; todo="$(missing)"
  if [[ -z "${todo}" ]]; then printf '%s\n' "${OUT}"; return 0; fi
  bulkd::go_env
  bulkd::lock "${CACHE}/.locks/cluster-k8s-${K8S_VERSION}.lock"
  todo="$(missing)"
  if [[ -n "${todo}" ]]; then
    local start b pkgs=() ldflags info infofile build_date tmp
    start="$(bulkd::now)"
    # Reuse hack/envtest.sh's generated wrapper (require + restated staging
    # replaces); only the tool list differs.
    local base="${CACHE}/envtest/.src/k8s-${K8S_VERSION}/kubernetes/go.mod"
    [[ -f "${base}" ]] || bulkd::die "${base} missing; run hack/envtest.sh"
    mkdir -p "${SRC}"
    awk -v bins="${BINS[*]}" '
      BEGIN { n = split(bins, B, " ") }
      /^module / { print "module bulkd.invalid/local-cluster-build/kubernetes"; next }
      /^tool[ \t]*\(/ { print "tool ("; for (i = 1; i <= n; i++) print "\tk8s.io/kubernetes/cmd/" B[i]; skip = 1; next }
      skip && /^\)/ { skip = 0; print; next }
      skip { next }
      /^tool[ \t]/ { next }
      { print }
    ' "${base}" >"${SRC}/go.mod"
    grep -q 'cmd/kubelet' "${SRC}/go.mod" || bulkd::die "could not rewrite the tool block of ${base}"
    cp -f "${CACHE}/envtest/.src/k8s-${K8S_VERSION}/kubernetes/go.sum" "${SRC}/go.sum"
    bulkd::log "resolving the dependency graph (go mod tidy in ${SRC})"
    (cd "${SRC}" && go mod tidy 1>&2) || bulkd::die "go mod tidy failed in ${SRC}"
    info="$(bulkd::mod_download "k8s.io/kubernetes@v${K8S_VERSION}")"
    infofile="$(printf '%s\n' "${info}" | bulkd::json_field Info)"
    build_date="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "${infofile}" 2>/dev/null || true)"
    [[ -n "${build_date}" ]] || build_date="1970-01-01T00:00:00Z"
    ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X ${pkg}.gitVersion=v${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${K8S_MINOR}"
      ldflags+=" -X ${pkg}.gitCommit= -X ${pkg}.buildDate=${build_date}"
    done
    for b in ${todo}; do pkgs+=("k8s.io/kubernetes/cmd/${b}"); done
    tmp="$(mktemp -d "${OUT}/.build.XXXXXX")"
    bulkd::log "building ${todo//$'\n'/ } from k8s.io/kubernetes v${K8S_VERSION} (several minutes cold)"
    if ! (cd "${SRC}" && go build -trimpath -ldflags="${ldflags}" -o "${tmp}/" "${pkgs[@]}" 1>&2); then
      rm -rf "${tmp}"; bulkd::die "build failed"
    fi
    for b in ${todo}; do bulkd::install_bin "${tmp}/${b}" "${OUT}/${b}" "${STAMP}"; done
    rm -rf "${tmp}"
    bulkd::log "built in $(( $(bulkd::now) - start ))s"
  fi
  printf '%s\n' "${OUT}"
}
main "$@"
