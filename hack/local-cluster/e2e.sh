#!/usr/bin/env bash
#
# hack/local-cluster/e2e.sh (make e2e): local cluster up, redis-server and
# spamd in the cluster's namespace, helm install of charts/bulkd with the local image, the
# e2e suite (test/cluster, build tag e2ecluster) run inside the namespace,
# teardown (also on failure or Ctrl-C). Timings go to stderr and to
# E2E_TIMINGS (default /tmp/bulkd-e2e-timings.txt).
#
#   E2E_RUN=<regexp>      go test -run filter
#   E2E_KEEP=1            leave the cluster up afterwards (then: hack/local-cluster.sh down)
#   E2E_KUEUE=0           no Kueue: skip building and running Kueue v0.17.0 (on by default;
#                         TestKueueAdmission then skips)
#   E2E_NETPOL=0          do not run kube-network-policies (netpol.sh; on by default): the
#                         NetworkPolicies are then installed but not enforced, and
#                         TestNetworkPoliciesEnforced is skipped
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
export LC_DIR="${LC_DIR:-/tmp/bulkd-local-cluster}"
NS="${LC_NETNS:-bulkd-lc}"
CL="${HERE}/cluster.sh"
NAMESPACE=bulkd-e2e
NODE_IP=10.254.0.1
REDIS_PORT=6379
SPAMD_PORT=7830                 # SpamAssassin's spamd for the content spam check, on the node address
PROXY_ADDR="${NODE_IP}:18080"   # the test's stand-in for every website (redirect checks)
VERIFY_CM=bulkd-verify-e2e      # email verification pods' own ConfigMap; the suite creates it (its mail world)
LOOKUP_CM=bulkd-lookup-e2e      # email lookup pods' own ConfigMap; the suite creates it (its People world)
TIMINGS="${E2E_TIMINGS:-/tmp/bulkd-e2e-timings.txt}"
log() { printf 'e2e: %s\n' "$*" >&2; }
now() { date +%s%3N; }
: >"${TIMINGS}"
mark() { local t; t=$(now); printf '%-28s %7.1fs\n' "$1" "$(( t - MARK ))e-3" | tee -a "${TIMINGS}" >&2; MARK=$t; }

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [[ -z "${TESTBIN:-}" ]] || rm -f "${TESTBIN}"
  if [[ -n "${E2E_KEEP:-}" && ${rc} -eq 0 ]]; then log "E2E_KEEP set: cluster left up"; exit 0; fi
  MARK=$(now)
  [[ -z "${E2E_KEEP:-}" ]] || export LC_KEEP=1
  "${CL}" down || true
  mark "teardown"
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

MARK=$(now); START=$MARK
cd "${ROOT}"
# Build the binaries and tools first (cold: many minutes).
"${HERE}/build-k8s.sh" >/dev/null
HELM="$("${HERE}/build-helm.sh")"
KUEUE="${E2E_KUEUE:-1}"
[[ "${KUEUE}" == 0 ]] || "${HERE}/build-kueue.sh" >/dev/null
NETPOL="${E2E_NETPOL:-1}"
[[ "${NETPOL}" == 0 ]] || "${HERE}/build-knp.sh" >/dev/null
mark "k8s binaries + helm + kueue + knp (cached)"
# The image and the test binary.
make image >&2
mkdir -p "${LC_DIR%/*}"
TESTBIN="$(mktemp /tmp/bulkd-cluster-test.XXXXXX)"
go test -c -tags e2ecluster -o "${TESTBIN}" ./test/cluster
mark "make image + test binary"

"${CL}" up
mark "cluster up"
if [[ "${KUEUE}" != 0 ]]; then
  # The real Kueue (v0.17.0): CRDs, webhooks, its manager in the namespace;
  # test/cluster/kueue_test.go makes the queues.
  # Kueue not coming up fails its own test (TestKueueAdmission), not the whole suite.
  if "${HERE}/kueue.sh" up; then mark "kueue up"; else log "Kueue did not come up (${LC_DIR}/logs/kueue.log)"; KUEUE=failed; fi
fi
if [[ "${NETPOL}" != 0 ]]; then
  # NetworkPolicy enforcement (kube-network-policies) before anything is installed; not
  # coming up fails TestNetworkPoliciesEnforced, not the whole suite.
  if "${HERE}/netpol.sh" up; then mark "netpol enforcer up"; else log "kube-network-policies did not come up (${LC_DIR}/logs)"; NETPOL=failed; fi
fi
BIN="$("${CL}" bin-dir)"
kc() { "${CL}" exec "${BIN}/kubectl" --kubeconfig "${LC_DIR}/admin.kubeconfig" "$@"; }

# Redis for the pods, on the node address inside the namespace.
mkdir -p "${LC_DIR}/redis"
setsid nsenter --net="/run/netns/${NS}" -- redis-server --bind "${NODE_IP} 127.0.0.1" --port "${REDIS_PORT}" \
  --protected-mode no --save "" --appendonly no --dir "${LC_DIR}/redis" --daemonize no \
  >"${LC_DIR}/logs/redis-server.log" 2>&1 </dev/null &
echo "redis-server $!" >>"${LC_DIR}/pids"
for _ in $(seq 1 40); do
  "${CL}" exec redis-cli -h "${NODE_IP}" -p "${REDIS_PORT}" ping 2>/dev/null | grep -q PONG && break
  sleep 0.25
done
REDIS_URL="redis://${NODE_IP}:${REDIS_PORT}/0"

# spamd for POST /v1/content-spam-check, on the node address too: the API
# pods reach it there as they reach Redis (local tests only, as in the
# tests and make run; allowed: the pod and node addresses).
"${ROOT}/hack/ensure-spamd.sh"
mkdir -p "${LC_DIR}/spamd"
# spamd names each client (IO::Socket::IP's peerhostname) and drops the
# connection when that reverse lookup fails for any reason but "no such
# name"; this namespace has no DNS, so it failed for every API pod
# ("getnameinfo - Temporary failure in name resolution"). spamd gets a hosts
# file naming the pod and node addresses, bind-mounted over /etc/hosts in a
# mount namespace of its own (the machine's /etc/hosts is not touched). In a
# real cluster the cluster DNS answers these lookups.
{ echo "127.0.0.1 localhost"; echo "${NODE_IP} node"
  for i in $(seq 1 254); do echo "10.244.0.${i} pod-10-244-0-${i}"; done; } >"${LC_DIR}/spamd/hosts"
setsid nsenter --net="/run/netns/${NS}" -- unshare --mount --propagation private \
  sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' sh "${LC_DIR}/spamd/hosts" \
  "$(command -v spamd || echo /usr/sbin/spamd)" \
  --listen "${NODE_IP}:${SPAMD_PORT}" --allowed-ips "10.0.0.0/8,127.0.0.0/8" --max-children 2 --min-children 2 \
  --min-spare 0 --max-spare 2 --local --nouser-config --syslog stderr --cf 'use_bayes 0' --cf 'bayes_auto_learn 0' \
  --username nobody --pidfile "${LC_DIR}/spamd/spamd.pid" \
  >"${LC_DIR}/logs/spamd.log" 2>&1 </dev/null &
echo "spamd $!" >>"${LC_DIR}/pids"

kc create namespace "${NAMESPACE}" >&2
kc -n "${NAMESPACE}" create secret generic bulkd-redis --from-literal=redis-url="${REDIS_URL}" >&2
TAG="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/bulkd/Chart.yaml)"
# Values: the local image (never pulled), the Redis Secret, a small shard
# and batch size so jobs have several shards and a shard can be caught
# half done, redirect checks through the test's proxy, one API replica. At
# most 20 shards per job: each shard is a pod (about 3 s to start here), so
# the 100k scale job runs 20 pods of 5,000 inputs rather than 50 of 2,000.
# Email verification pods: at most 2 per job, in the node's network
# namespace (hostNetwork), which is this namespace, where the suite's mail
# world listens on loopback (127.x.y.z); their ConfigMap, which the suite
# creates, says where (BULKD_DNS_SERVER, BULKD_SMTP_PORT). Email lookup pods
# talk SMTP too: the same profile with their own ConfigMap.
# Private destinations are refused by default (bulkd's outbound policy and
# the chart's NetworkPolicies): the test world is private, so it is allowed
# on purpose: the mail world on loopback (hostNetwork pods) and the node
# address (Redis, spamd, the website proxy, webhook receivers). The
# NetworkPolicies are installed as in production and enforced by
# kube-network-policies (netpol.sh; not for the node's own addresses, see
# docs/e2e.md); the Kubernetes API's address is looked up by helm install.
# The processor budget: 6 pods of 100m CPU fit the node's 2 CPUs next to
# the API and the controller (charts/bulkd/README.md, "Sizing the
# budget"), and one account may hold all 6, which the fair-share test
# (test/cluster/fair_test.go) makes account A do.
"${CL}" exec "${HELM}" install bulkd charts/bulkd --kubeconfig "${LC_DIR}/admin.kubeconfig" -n "${NAMESPACE}" \
  --set image.tag="${TAG}" --set image.pullPolicy=Never \
  --set redis.existingSecret=bulkd-redis \
  --set jobs.shardSize=2000 --set jobs.parallelism=4 \
  --set apiserver.replicas=1 \
  --set spamd.address="${NODE_IP}:${SPAMD_PORT}" --set spamd.timeout=3s --set spamd.maxConns=2 \
  --set-string config.BULKD_BATCH_SIZE=5 \
  --set-string config.BULKD_RATE_LIMIT=1000 \
  --set-string config.BULKD_REDIRECT_CHECKS=true \
  --set-string config.BULKD_HTTP_PROXY="http://${PROXY_ADDR}" \
  --set-string config.BULKD_LEASE_TTL=5s \
  --set-string config.BULKD_WEBHOOK_ALLOW_CIDRS="${NODE_IP}/32" --set-string config.BULKD_WEBHOOK_BACKOFF=1s \
  --set-string config.BULKD_DASHBOARD_ALLOW_HTTP=true \
  --set jobs.maxShards=20 \
  --set processor.resources.requests.cpu=100m --set processor.resources.requests.memory=64Mi \
  --set admission.maxRunningShards=6 --set admission.maxRunningShardsPerAccount=6 \
  --set "outbound.allowCIDRs={127.0.0.0/8,${NODE_IP}/32}" \
  --set "networkPolicy.redis.cidrs={${NODE_IP}/32}" --set "networkPolicy.spamd.cidrs={${NODE_IP}/32}" \
  --set "networkPolicy.allowEgress[0].cidrs={${NODE_IP}/32}" \
  --set-json "processor.families={\"email_verification\":{\"hostNetwork\":true,\"parallelismCap\":2,\"configMap\":\"${VERIFY_CM}\"},\"email_lookup\":{\"hostNetwork\":true,\"parallelismCap\":2,\"configMap\":\"${LOOKUP_CM}\"}}" \
  ${E2E_HELM_ARGS:-} --wait --timeout 5m >&2
mark "helm install (ready)"
kc -n "${NAMESPACE}" get pods -o wide >&2

rc=0
"${CL}" exec env E2E_KUBECONFIG="${LC_DIR}/admin.kubeconfig" E2E_NAMESPACE="${NAMESPACE}" \
  E2E_REDIS_URL="${REDIS_URL}" E2E_PROXY_ADDR="${PROXY_ADDR}" E2E_TIMINGS="${TIMINGS}" \
  E2E_VERIFY_CONFIGMAP="${VERIFY_CM}" E2E_LOOKUP_CONFIGMAP="${LOOKUP_CM}" E2E_NODE_IP="${NODE_IP}" \
  E2E_SPAMD_PIDFILE="${LC_DIR}/spamd/spamd.pid" \
  E2E_HELM="${HELM}" E2E_CHART="${ROOT}/charts/bulkd" E2E_IMAGE_TAG="${TAG}" E2E_KUEUE="${KUEUE}" \
  E2E_NETPOL="${NETPOL}" "${TESTBIN}" -test.v -test.count=1 -test.timeout=70m ${E2E_RUN:+-test.run "${E2E_RUN}"} || rc=$?
mark "e2e suite (rc=${rc})"
if [[ ${rc} -ne 0 ]]; then
  log "suite failed; pods and logs:"
  kc -n "${NAMESPACE}" get all -o wide >&2 || true
  mkdir -p /tmp/bulkd-e2e-logs && cp -r "${LC_DIR}/logs" /tmp/bulkd-e2e-logs/ 2>/dev/null || true
  cp -rL /var/log/pods /tmp/bulkd-e2e-logs/pod-logs 2>/dev/null || true
  log "component and pod logs copied to /tmp/bulkd-e2e-logs"
fi
log "total $(( ($(now) - START) / 1000 ))s"
exit "${rc}"
