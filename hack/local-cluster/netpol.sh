#!/usr/bin/env bash
#
# hack/local-cluster/netpol.sh up: makes the local cluster enforce NetworkPolicies (its CNI,
# the bridge plugin, does not). hack/local-cluster.sh up must have run. It
#
#   * runs kube-network-policies (build-knp.sh: v0.8.0 from the Go module proxy, patched for
#     this kernel's xt NFQUEUE) as a process in the cluster's network namespace, like the other
#     components, recorded in $LC_DIR/pids so that down stops it: it watches NetworkPolicies,
#     Namespaces and Pods and decides every new connection a pod makes or receives (its
#     nftables table "kube-network-policies" queues them to it); fail closed (no --fail-open);
#   * turns on net.bridge.bridge-nf-call-iptables in that namespace (per namespace since Linux
#     5.3), so that pod-to-pod traffic on the pod bridge passes netfilter too;
#   * adds a network namespace "<ns>-md" holding 169.254.169.254 (the cloud metadata address)
#     behind a veth, with a TCP listener on port 80: a destination a pod reaches by routing,
#     so that what a policy allows or refuses there is decided, not a missing route.
#
# Traffic from the namespace itself (the node: kubelet probes, the test binary, run as root)
# and to the node's own addresses (Redis, spamd) is not filtered by kube-network-policies:
# it queues only forwarded traffic of pod addresses (and accepts what root sends).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LC_DIR="${LC_DIR:-/tmp/bulkd-local-cluster}"
NS="${LC_NETNS:-bulkd-lc}"
MD="${NS}-md"
NODE=local   # cluster.sh's node name
POD_CIDR=10.244.0.0/24
log() { printf 'netpol: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
in_ns() { nsenter --net="/run/netns/${NS}" -- "$@"; }

up() {
  local kdir t0 ok=""
  t0=$(date +%s)
  kdir="$("${HERE}/build-knp.sh")"
  command -v nft >/dev/null || die "nft missing: apt-get install nftables"

  in_ns sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 \
    || die "net.bridge.bridge-nf-call-iptables cannot be set in ${NS} (no br_netfilter?)"

  # The metadata address, one hop away.
  ip netns add "${MD}"
  ip link add lcmd0 netns "${NS}" type veth peer name md0 netns "${MD}"
  in_ns ip addr add 10.254.1.1/30 dev lcmd0
  in_ns ip link set lcmd0 up
  in_ns ip route add 169.254.169.254/32 via 10.254.1.2 dev lcmd0
  ip -n "${MD}" link set lo up
  ip -n "${MD}" addr add 10.254.1.2/30 dev md0
  ip -n "${MD}" addr add 169.254.169.254/32 dev md0
  ip -n "${MD}" link set md0 up
  ip -n "${MD}" route add "${POD_CIDR}" via 10.254.1.1 dev md0
  ip -n "${MD}" route add 10.254.0.0/24 via 10.254.1.1 dev md0
  setsid ip netns exec "${MD}" python3 -m http.server 80 --bind 169.254.169.254 \
    >"${LC_DIR}/logs/metadata.log" 2>&1 </dev/null &
  echo "http.server:metadata $!" >>"${LC_DIR}/pids"   # down matches "http.server" in its command line

  setsid nsenter --net="/run/netns/${NS}" -- env KUBECONFIG="${LC_DIR}/admin.kubeconfig" \
    "${kdir}/kube-network-policies" --hostname-override="${NODE}" --disable-nri \
    --netfilter-bug-1766-fix=false --metrics-bind-address=127.0.0.1:19080 --v=2 \
    >"${LC_DIR}/logs/kube-network-policies.log" 2>&1 </dev/null &
  echo "kube-network-policies $!" >>"${LC_DIR}/pids"
  for _ in $(seq 1 120); do
    if in_ns nft list table inet kube-network-policies 2>/dev/null | grep -q 'queue'; then ok=1; break; fi
    sleep 0.5
  done
  [[ -n "${ok}" ]] || die "kube-network-policies installed no queue rule in 60s ($(tail -n 5 "${LC_DIR}/logs/kube-network-policies.log" | tr '\n' ' '))"
  log "kube-network-policies up in $(( $(date +%s) - t0 ))s (log ${LC_DIR}/logs/kube-network-policies.log)"
}

down() {
  [[ ! -e "/run/netns/${MD}" ]] || ip netns del "${MD}"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
