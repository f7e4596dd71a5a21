#!/usr/bin/env bash
#
# hack/local-cluster/build-knp.sh: builds kube-network-policies (sigs.k8s.io/kube-network-policies,
# the NetworkPolicy enforcer of SIG Network, v0.8.0) from the Go module proxy, patched for this
# machine, cached like the other cluster binaries; prints the directory:
#
#   $CACHE/cluster/knp-<ver>/kube-network-policies   the enforcer
#   $CACHE/cluster/.src/knp-<ver>/                    the patched copy of the release it was built from
#
# The local cluster's CNI (the bridge plugin) does not enforce NetworkPolicies; this enforcer
# runs as a process in the cluster's network namespace (hack/local-cluster/netpol.sh) and
# decides on every new connection of a pod in userspace, the kernel handing it the packets
# through NFQUEUE. Two patches, both small and printed in the build log:
#
#   1. The kernel of this machine has no nftables "queue" expression (CONFIG_NFT_QUEUE is off:
#      `nft add rule ... queue num 100` fails with "No such file or directory"), but it has
#      the xtables NFQUEUE target, which nftables reaches through nft_compat (CONFIG_NFT_COMPAT).
#      The rules that queue packets use that target (revision 3: queue number, one queue,
#      bypass flag) instead of the native expression: same verdict, same queue.
#   2. It reads $KUBECONFIG when set (it runs outside a pod here), else the in-cluster config.
#
# Why a patched copy and not a wrapper module with `go install`: the release must be changed,
# so its source is copied out of the module cache and built as its own main module, with the
# release's own go.mod and go.sum (the graph its release was tested with).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
# shellcheck disable=SC2034 # read by hack/lib/tools-common.sh
BULKD_LOG_PREFIX=local-cluster-knp
# shellcheck source=hack/lib/tools-common.sh
source "${ROOT}/hack/lib/tools-common.sh"
VERSION="${KNP_VERSION:-v0.8.0}"
[[ "${VERSION}" == v* ]] || VERSION="v${VERSION}"
CACHE="$(bulkd::cache_dir)"
OUT="${CACHE}/cluster/knp-${VERSION}"
SRC="${CACHE}/cluster/.src/knp-${VERSION}"
CGO="${BULKD_TOOLS_CGO_ENABLED:-0}"
STAMP="sigs.k8s.io/kube-network-policies@${VERSION} CGO_ENABLED=${CGO} recipe=1 patches=xtnfqueue,kubeconfig"

ready() { bulkd::stamp_ok "${OUT}/kube-network-policies" "${STAMP}"; }
if ready; then echo "${OUT}"; exit 0; fi
bulkd::go_env
bulkd::lock "${CACHE}/.locks/knp-${VERSION}.lock"
if ! ready; then
  start="$(bulkd::now)"
  info="$(bulkd::mod_download "sigs.k8s.io/kube-network-policies@${VERSION}")" \
    || bulkd::die "sigs.k8s.io/kube-network-policies ${VERSION} cannot be downloaded (try: go list -m -versions sigs.k8s.io/kube-network-policies)"
  dir="$(printf '%s\n' "${info}" | bulkd::json_field Dir)"
  [[ -f "${dir}/go.mod" && -f "${dir}/pkg/networkpolicy/controller.go" ]] || bulkd::die "no source for sigs.k8s.io/kube-network-policies ${VERSION}"
  grep -qE '^replace' "${dir}/go.mod" && bulkd::die "kube-network-policies ${VERSION} has replace directives; this script does not restate them"
  rm -rf "${SRC}"; mkdir -p "${SRC}" "${OUT}"
  cp -r "${dir}/." "${SRC}/"; chmod -R u+w "${SRC}"
  ctl="${SRC}/pkg/networkpolicy/controller.go"
  # Patch 1: the queue verdicts.
  perl -0pi -e 's/queue := &expr\.Queue\{Num: uint16\(c\.config\.QueueID\)\}\n\tif c\.config\.FailOpen \{\n\t\tqueue\.Flag = expr\.QueueFlagBypass\n\t\}/queue := nfqueueVerdict(c.config.QueueID, c.config.FailOpen)/g' "${ctl}"
  perl -pi -e 's/&expr\.Queue\{Num: uint16\(n\.nfQueueID\), Flag: expr\.QueueFlagBypass\}/nfqueueVerdict(n.nfQueueID, true)/' "${SRC}/pkg/networkpolicy/dnsagent.go"
  if grep -q 'expr\.Queue{' "${ctl}" "${SRC}/pkg/networkpolicy/dnsagent.go"; then
    bulkd::die "the queue patch no longer applies to ${VERSION} (expr.Queue still used)"
  fi
  cat >"${SRC}/pkg/networkpolicy/bulkd_xtqueue.go" <<'GO'
package networkpolicy

// Added by bulkd's hack/local-cluster/build-knp.sh: this kernel has no nftables "queue"
// expression (CONFIG_NFT_QUEUE off) but the xtables NFQUEUE target through nft_compat.

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// nfqueueVerdict queues a packet to queue id (struct xt_NFQ_info_v3: queuenum,
// queues_total, flags; NFQ_FLAG_BYPASS = 1), padded to 8 bytes (XT_ALIGN).
func nfqueueVerdict(id int, bypass bool) expr.Any {
	info := make([]byte, 8)
	binary.NativeEndian.PutUint16(info[0:], uint16(id))
	binary.NativeEndian.PutUint16(info[2:], 1)
	if bypass {
		binary.NativeEndian.PutUint16(info[4:], 1)
	}
	u := xt.Unknown(info)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &u}
}
GO
  # Patch 2: $KUBECONFIG.
  perl -pi -e 's/config, err := rest\.InClusterConfig\(\)/config, err := bulkdRestConfig(rest.InClusterConfig)/' "${SRC}/cmd/main.go"
  grep -q 'bulkdRestConfig(rest.InClusterConfig)' "${SRC}/cmd/main.go" || bulkd::die "the kubeconfig patch no longer applies to ${VERSION}"
  cat >"${SRC}/cmd/bulkd_kubeconfig.go" <<'GO'
package main

// Added by bulkd's hack/local-cluster/build-knp.sh: the enforcer runs outside a pod there.

import (
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func bulkdRestConfig(inCluster func() (*rest.Config, error)) (*rest.Config, error) {
	if p := os.Getenv("KUBECONFIG"); p != "" {
		return clientcmd.BuildConfigFromFlags("", p)
	}
	return inCluster()
}
GO
  (cd "${SRC}" && diff -ru "${dir}" . 1>&2 || true)
  tmp="$(mktemp -d "${OUT}/.build.XXXXXX")"
  bulkd::log "building kube-network-policies ${VERSION} ($(go env GOVERSION), CGO_ENABLED=${CGO_ENABLED}); a cold build takes a few minutes"
  (cd "${SRC}" && GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w" -o "${tmp}/kube-network-policies" ./cmd 1>&2) \
    || { rm -rf "${tmp}"; bulkd::die "building kube-network-policies ${VERSION} failed"; }
  bulkd::install_bin "${tmp}/kube-network-policies" "${OUT}/kube-network-policies" "${STAMP}"
  rm -rf "${tmp}"
  bulkd::log "built kube-network-policies ${VERSION} in $(( $(bulkd::now) - start ))s"
fi
echo "${OUT}"
