#!/usr/bin/env bash
#
# hack/local-cluster/kueue.sh up: runs the real Kueue (v0.17.0's manager, built by
# build-kueue.sh from the Go module proxy) in the local cluster (hack/local-cluster.sh up
# must have run), as a process in the cluster's network namespace like the other
# components:
#
#   * Kueue's CRDs, applied server-side;
#   * its manager with a Configuration of our own: the batch/job integration only, fair
#     sharing on, no leader election (one process), no internal certificate management;
#   * its webhooks for Jobs and its own objects (Job, Workload, ClusterQueue, Cohort,
#     ResourceFlavor), with failurePolicy Fail as upstream ships them, pointed at
#     https://127.0.0.1:9443 (the apiserver runs in the same namespace) with a serving
#     certificate signed by the cluster's CA.
#
# The ClusterQueues and LocalQueues are the tests' (test/cluster/kueue_test.go). The
# process is recorded in $LC_DIR/pids, so `hack/local-cluster.sh down` stops it. With
# the internal certificate management off, Kueue reads its metrics certificate from the
# hard-coded /etc/kueue/metrics/certs: created here, and removed by down when it did not
# exist before (cluster.sh, new-dirs).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LC_DIR="${LC_DIR:-/tmp/bulkd-local-cluster}"
NS="${LC_NETNS:-bulkd-lc}"
PORT=9443
HEALTH=127.0.0.1:18081
log() { printf 'kueue: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

up() {
  local kdir bin t0 kc ca d
  t0=$(date +%s)
  kdir="$("${HERE}/build-kueue.sh")"
  bin="$(cat "${LC_DIR}/bin-dir")"
  kc=(nsenter --net="/run/netns/${NS}" -- "${bin}/kubectl" --kubeconfig "${LC_DIR}/admin.kubeconfig")
  d="${LC_DIR}/kueue"
  mkdir -p "${d}/certs"

  # Serving certificate for 127.0.0.1, signed by the cluster's CA.
  openssl req -new -newkey rsa:2048 -nodes -keyout "${d}/certs/tls.key" -subj "/CN=kueue-webhook" \
    -out "${d}/certs/tls.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"${d}/certs/ext.cnf"
  openssl x509 -req -in "${d}/certs/tls.csr" -CA "${LC_DIR}/pki/ca.crt" -CAkey "${LC_DIR}/pki/ca.key" \
    -CAcreateserial -days 2 -extfile "${d}/certs/ext.cnf" -out "${d}/certs/tls.crt" 2>/dev/null
  # Kueue's metrics certificate path is hard-coded when it does not manage certificates.
  [[ -e /etc/kueue ]] || echo /etc/kueue >>"${LC_DIR}/new-dirs"
  mkdir -p /etc/kueue/metrics/certs
  cp -f "${d}/certs/tls.crt" "${d}/certs/tls.key" /etc/kueue/metrics/certs/

  cat >"${d}/config.yaml" <<CFG
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: "${HEALTH}"
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: ${PORT}
  certDir: "${d}/certs"
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
clientConnection:
  qps: 50
  burst: 100
integrations:
  frameworks: ["batch/job"]
fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
featureGates:
  VisibilityOnDemand: false
CFG

  "${kc[@]}" apply --server-side -f "${kdir}/crds" >/dev/null
  "${kc[@]}" wait --for condition=established --timeout=60s -f "${kdir}/crds" >/dev/null
  "${kc[@]}" create namespace kueue-system >/dev/null 2>&1 || true

  setsid nsenter --net="/run/netns/${NS}" -- env KUBECONFIG="${LC_DIR}/admin.kubeconfig" \
    "${kdir}/kueue" --config="${d}/config.yaml" --zap-log-level=info \
    >"${LC_DIR}/logs/kueue.log" 2>&1 </dev/null &
  echo "kueue $!" >>"${LC_DIR}/pids"
  local ok=""
  for _ in $(seq 1 240); do
    # /readyz without curl: bash's /dev/tcp, inside the namespace.
    if nsenter --net="/run/netns/${NS}" -- bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1#*:}" && printf "GET /readyz HTTP/1.0\r\n\r\n" >&3 && head -n1 <&3 | grep -q " 200 "' _ "${HEALTH}" 2>/dev/null; then ok=1; break; fi
    sleep 0.5
  done
  [[ -n "${ok}" ]] || die "Kueue not ready after 120s ($(tail -n 5 "${LC_DIR}/logs/kueue.log" | tr '\n' ' '))"

  # The webhooks, once it serves them (failurePolicy Fail would refuse Jobs before).
  ca="$(base64 -w0 <"${LC_DIR}/pki/ca.crt")"
  webhooks "${kdir}/webhooks.yaml" "${ca}" >"${d}/webhooks.yaml"
  "${kc[@]}" apply -f "${d}/webhooks.yaml" >/dev/null
  # The webhooks refuse every Job when they cannot be reached (failurePolicy Fail): prove
  # one answers (a server-side dry run of a Job goes through Kueue's), or take them away
  # again so the rest of the suite is not failed by Kueue.
  local probe=""
  for _ in $(seq 1 20); do
    if "${kc[@]}" -n default create job kueue-webhook-probe --image=localhost/pause:3.10-local --dry-run=server -o name >/dev/null 2>"${d}/probe.err"; then
      probe=1; break
    fi
    sleep 1
  done
  if [[ -z "${probe}" ]]; then
    "${kc[@]}" delete -f "${d}/webhooks.yaml" --ignore-not-found >/dev/null 2>&1 || true
    die "Kueue's webhooks do not answer: $(tr '\n' ' ' <"${d}/probe.err"); removed them"
  fi
  log "Kueue up in $(( $(date +%s) - t0 ))s (log ${LC_DIR}/logs/kueue.log)"
}

# webhooks MANIFESTS CABUNDLE: Kueue's webhook manifests with only the webhooks of the
# batch/job integration and Kueue's own objects kept, each pointed at 127.0.0.1:PORT.
webhooks() {
  awk -v ca="$2" -v port="${PORT}" '
    BEGIN { keep["mjob.kb.io"]; keep["vjob.kb.io"]; keep["mworkload.kb.io"]; keep["vworkload.kb.io"]
            keep["mclusterqueue.kb.io"]; keep["vclusterqueue.kb.io"]; keep["vcohort.kb.io"]
            keep["mresourceflavor.kb.io"]; keep["vresourceflavor.kb.io"] }
    function flush() { if (n > 0 && (name in keep)) for (i = 1; i <= n; i++) print buf[i]; n = 0; name = "" }
    /^---/ || /^apiVersion:/ || /^kind:/ || /^metadata:/ || /^webhooks:/ { flush(); initem = 0; print; next }
    /^  name: / && !initem { sub(/name: /, "name: kueue-"); print; next }
    /^- / { flush(); initem = 1 }
    !initem { print; next }
    /^    service:/ { insvc = 1; next }
    insvc && /^      path: / { p = $2; buf[++n] = "    url: https://127.0.0.1:" port p; buf[++n] = "    caBundle: " ca; insvc = 0; next }
    insvc { next }
    /^  name: / { name = $2 }
    { buf[++n] = $0 }
    END { flush() }
  ' "$1"
}

case "${1:-}" in
  up) up ;;
  webhooks) webhooks "$2" "$3" ;;
  *) echo "usage: $0 up" >&2; exit 2 ;;
esac
