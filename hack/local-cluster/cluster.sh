#!/usr/bin/env bash
#
# hack/local-cluster/cluster.sh: a real single-node Kubernetes cluster on this
# machine, every component inside a network namespace of its own.
#
#   hack/local-cluster.sh up          build/cache binaries, start, wait for node Ready
#   hack/local-cluster.sh down        stop everything, undo every host change
#   hack/local-cluster.sh status      components, node, pods
#   hack/local-cluster.sh kubeconfig  print the admin kubeconfig path
#   hack/local-cluster.sh exec CMD…   run CMD inside the cluster's network namespace
#                                     (the API, pods and services are reachable only there)
#
# Layout (LC_DIR, default /tmp/bulkd-local-cluster): pki/, *.kubeconfig, etcd/,
# containerd/, cni/, kubelet/, logs/, pids, host-state (sysctls before up).
# Network: namespace bulkd-lc; node bridge lcnode0 = 10.254.0.1; pod bridge
# lcbr0 = 10.244.0.0/24 (no masquerade: nothing leaves the namespace);
# Services 10.96.0.0/16 (kube-proxy, iptables mode, in the namespace).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
LC_DIR="${LC_DIR:-/tmp/bulkd-local-cluster}"
NS="${LC_NETNS:-bulkd-lc}"
NODE_IP=10.254.0.1
NODE_BR=lcnode0
POD_BR=lcbr0
POD_CIDR=10.244.0.0/24
SVC_CIDR=10.96.0.0/16
NODE=local
PAUSE_IMAGE=localhost/pause:3.10-local
SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)

log() { printf 'local-cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
now_ms() { date +%s%3N; }
in_ns() { nsenter --net="/run/netns/${NS}" -- "$@"; }
kc() { in_ns "${BIN}/kubectl" --kubeconfig "${LC_DIR}/admin.kubeconfig" "$@"; }

bins() { BIN="$("${HERE}/build-k8s.sh")"; }

ensure_packages() {
  local missing=() p
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v redis-server >/dev/null || missing+=(redis-server)
  # kube-network-policies (netpol.sh, E2E_NETPOL) programs nftables.
  command -v nft >/dev/null || missing+=(nftables)
  if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
  for p in containerd runc ctr iptables conntrack openssl; do command -v "$p" >/dev/null || die "$p missing"; done
}

# ---------------------------------------------------------------- PKI, configs
gen_pki() {
  local d="${LC_DIR}/pki"
  mkdir -p "${d}"
  openssl genrsa -out "${d}/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "${d}/ca.key" -subj "/CN=bulkd-local-cluster-ca" -days 30 -out "${d}/ca.crt" 2>/dev/null
  openssl genrsa -out "${d}/apiserver.key" 2048 2>/dev/null
  openssl req -new -key "${d}/apiserver.key" -subj "/CN=kube-apiserver" -out "${d}/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:%s,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n' "${NODE_IP}" >"${d}/apiserver.ext"
  openssl x509 -req -in "${d}/apiserver.csr" -CA "${d}/ca.crt" -CAkey "${d}/ca.key" -CAcreateserial \
    -days 30 -extfile "${d}/apiserver.ext" -out "${d}/apiserver.crt" 2>/dev/null
  openssl genrsa -out "${d}/sa.key" 2048 2>/dev/null
  openssl rsa -in "${d}/sa.key" -pubout -out "${d}/sa.pub" 2>/dev/null
  : >"${d}/tokens.csv"
  local u
  for u in admin:admin:system:masters kcm:system:kube-controller-manager: sched:system:kube-scheduler: \
           kubelet:system:node:${NODE}:system:nodes proxy:system:kube-proxy:; do
    local short="${u%%:*}" rest="${u#*:}" user group tok
    if [[ "${short}" == kubelet ]]; then user="system:node:${NODE}"; group="system:nodes"
    elif [[ "${short}" == admin ]]; then user="admin"; group="system:masters"
    else user="${rest%:}"; group=""; fi
    tok="$(openssl rand -hex 16)"
    printf '%s,%s,%s,"%s"\n' "${tok}" "${user}" "${user}" "${group}" >>"${d}/tokens.csv"
    kubeconfig "${short}" "${tok}"
  done
  chmod 600 "${d}"/*.key "${d}/tokens.csv"
}

kubeconfig() { # NAME TOKEN
  cat >"${LC_DIR}/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://${NODE_IP}:6443", certificate-authority: "${LC_DIR}/pki/ca.crt"}
users:
- name: $1
  user: {token: "$2"}
contexts:
- name: local
  context: {cluster: local, user: $1, namespace: default}
current-context: local
KC
  chmod 600 "${LC_DIR}/$1.kubeconfig"
}

write_configs() {
  mkdir -p "${LC_DIR}"/{containerd,cni/net.d,cni/ipam,kubelet/root,kubelet/pki,kubelet/pod-logs,etcd,logs,proxy}
  cat >"${LC_DIR}/containerd/config.toml" <<T
version = 2
root = "${LC_DIR}/containerd/root"
state = "${LC_DIR}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "${LC_DIR}/containerd/containerd.sock"
[ttrpc]
  address = "${LC_DIR}/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "${LC_DIR}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  enable_selinux = false
  # no CAP_SYS_RESOURCE in the bounding set: negative oom_score_adj is refused
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${LC_DIR}/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${LC_DIR}/cni/net.d"
T
  cat >"${LC_DIR}/cni/net.d/10-bulkd-lc.conflist" <<T
{
  "cniVersion": "1.0.0",
  "name": "bulkd-lc",
  "plugins": [
    {"type": "bridge", "bridge": "${POD_BR}", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "${LC_DIR}/cni/ipam",
              "ranges": [[{"subnet": "${POD_CIDR}"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
T
  # Pods get a resolver that answers nothing: no DNS query leaves the pod.
  echo "nameserver 127.0.0.1" >"${LC_DIR}/kubelet/resolv.conf"
  cat >"${LC_DIR}/kubelet/config.yaml" <<T
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${NODE_IP}
port: 10250
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://${LC_DIR}/containerd/containerd.sock
podLogsDirectory: ${LC_DIR}/kubelet/pod-logs
clusterDomain: cluster.local
resolvConf: ${LC_DIR}/kubelet/resolv.conf
rotateCertificates: false
serverTLSBootstrap: false
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 60
T
  cat >"${LC_DIR}/proxy/config.yaml" <<T
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "${LC_DIR}/proxy.kubeconfig"}
hostnameOverride: ${NODE}
mode: iptables
clusterCIDR: ${POD_CIDR}
bindAddress: ${NODE_IP}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["${NODE_IP}/32"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
T
}

# ---------------------------------------------------------------- processes
start() { # NAME CMD...
  local name="$1"; shift
  setsid nsenter --net="/run/netns/${NS}" -- "$@" >"${LC_DIR}/logs/${name}.log" 2>&1 </dev/null &
  echo "${name} $!" >>"${LC_DIR}/pids"
}

wait_for() { # SECONDS WHAT CMD...
  local t="$1" what="$2" deadline; shift 2
  deadline=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || die "timed out after ${t}s waiting for ${what} (logs: ${LC_DIR}/logs)"
    sleep 0.25
  done
}

phase() { local t; t=$(now_ms); log "$1: $(( t - PHASE_T ))ms"; PHASE_T=$t; }

up() {
  [[ ! -e "/run/netns/${NS}" ]] || die "namespace ${NS} exists: run '$0 down' first"
  local T0; T0=$(now_ms); PHASE_T=$T0
  # A failed or interrupted up leaves nothing behind.
  # shellcheck disable=SC2154 # rc is assigned inside the trap
  trap 'rc=$?; trap - EXIT; if [[ ${rc} -ne 0 ]]; then log "up failed (rc ${rc}); tearing down"; LC_KEEP=1 down || true; fi; exit ${rc}' EXIT
  trap 'exit 130' INT TERM
  ensure_packages
  bins; phase "binaries ready (${BIN})"
  local helm; helm="$("${HERE}/build-helm.sh")"; phase "helm ready (${helm})"
  rm -rf "${LC_DIR}"; mkdir -p "${LC_DIR}/logs"
  echo "${BIN}" >"${LC_DIR}/bin-dir"
  : >"${LC_DIR}/pids"
  # Host state that the kubelet changes, restored by down.
  for s in "${SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"${LC_DIR}/host-state"
  ip netns list | awk '{print $1}' | grep '^cni-' >"${LC_DIR}/netns-before" || true
  # Host directories the components create outside LC_DIR (removed by down
  # only when they did not exist before): ip netns' /run/netns (a mount),
  # libcni's result cache, containerd 1.6's hard-coded shim socket dir.
  # The kubelet also hard-codes /var/lib/kubelet/device-plugins and writes
  # container logs to /var/log/pods (+ symlinks in /var/log/containers)
  # whatever podLogsDirectory says.
  for d in /run/netns /var/lib/cni /run/containerd /var/lib/kubelet /var/log/pods /var/log/containers; do
    [[ -e "$d" ]] || echo "$d"
  done >"${LC_DIR}/new-dirs"
  touch "${LC_DIR}/up-marker"
  gen_pki; write_configs; phase "pki and configs"
  build_images &
  local imgpid=$!

  ip netns add "${NS}"
  in_ns ip link set lo up
  in_ns ip link add "${NODE_BR}" type bridge
  in_ns ip addr add "${NODE_IP}/32" dev "${NODE_BR}"
  in_ns ip link set "${NODE_BR}" up
  # Service ClusterIPs are reachable from the namespace itself (the test
  # client) through kube-proxy's OUTPUT DNAT; they need a route to be tried.
  in_ns ip route add "${SVC_CIDR}" dev "${NODE_BR}" src "${NODE_IP}"
  in_ns sysctl -qw net.ipv4.ip_forward=1   # the namespace's own, not the host's
  phase "network namespace ${NS}"

  start etcd "${BIN}/etcd" --name local --data-dir "${LC_DIR}/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster local=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
    --unsafe-no-fsync --quota-backend-bytes 2147483648
  start containerd containerd --config "${LC_DIR}/containerd/config.toml"
  start kube-apiserver "${BIN}/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --advertise-address="${NODE_IP}" --secure-port=6443 \
    --tls-cert-file="${LC_DIR}/pki/apiserver.crt" --tls-private-key-file="${LC_DIR}/pki/apiserver.key" \
    --client-ca-file="${LC_DIR}/pki/ca.crt" --token-auth-file="${LC_DIR}/pki/tokens.csv" \
    --authorization-mode=Node,RBAC --anonymous-auth=false \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="${LC_DIR}/pki/sa.pub" --service-account-signing-key-file="${LC_DIR}/pki/sa.key" \
    --service-cluster-ip-range="${SVC_CIDR}" --allow-privileged=true \
    --kubelet-preferred-address-types=InternalIP --profiling=false
  wait_for 60 "kube-apiserver /readyz" kc get --raw /readyz
  phase "etcd + kube-apiserver ready"
  start kube-controller-manager "${BIN}/kube-controller-manager" --kubeconfig="${LC_DIR}/kcm.kubeconfig" \
    --authentication-kubeconfig="${LC_DIR}/kcm.kubeconfig" --authorization-kubeconfig="${LC_DIR}/kcm.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="${LC_DIR}/pki/sa.key" --root-ca-file="${LC_DIR}/pki/ca.crt" \
    --cluster-signing-cert-file="${LC_DIR}/pki/ca.crt" --cluster-signing-key-file="${LC_DIR}/pki/ca.key" \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller' \
    --profiling=false
  start kube-scheduler "${BIN}/kube-scheduler" --kubeconfig="${LC_DIR}/sched.kubeconfig" \
    --authentication-kubeconfig="${LC_DIR}/sched.kubeconfig" --authorization-kubeconfig="${LC_DIR}/sched.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false
  start kube-proxy "${BIN}/kube-proxy" --config="${LC_DIR}/proxy/config.yaml"
  wait_for 30 "containerd" ctr --address "${LC_DIR}/containerd/containerd.sock" version
  wait "${imgpid}" || die "building the images failed (${LC_DIR}/logs/images.log)"
  import_images
  phase "containerd up, images imported"
  start kubelet "${BIN}/kubelet" --config="${LC_DIR}/kubelet/config.yaml" \
    --kubeconfig="${LC_DIR}/kubelet.kubeconfig" --root-dir="${LC_DIR}/kubelet/root" \
    --cert-dir="${LC_DIR}/kubelet/pki" --hostname-override="${NODE}" --node-ip="${NODE_IP}"
  wait_for 90 "node ${NODE} Ready" bash -c "[[ \$(nsenter --net=/run/netns/${NS} -- '${BIN}/kubectl' --kubeconfig '${LC_DIR}/admin.kubeconfig' get node ${NODE} -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]"
  phase "node Ready"
  wait_for 60 "default ServiceAccount" kc -n default get serviceaccount default
  phase "default ServiceAccount"
  trap - EXIT INT TERM
  log "cluster up in $(( $(now_ms) - T0 ))ms; kubeconfig ${LC_DIR}/admin.kubeconfig (use: $0 exec kubectl …)"
}

build_images() {
  (
    set -e
    cd "${ROOT}"
    [[ -f bin/bulkd-image.tar && -z "${LC_REBUILD_IMAGE:-}" ]] || make image
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "${LC_DIR}/pause" ./hack/local-cluster/pause
    go run ./hack/image --binary "${LC_DIR}/pause" --repository localhost/pause --tag 3.10-local \
      --version local --commit local --ca-certs "" --tar "${LC_DIR}/pause-image.tar"
  ) >"${LC_DIR}/logs/images.log" 2>&1
}

import_images() {
  local a=(--address "${LC_DIR}/containerd/containerd.sock" -n k8s.io)
  ctr "${a[@]}" images import "${ROOT}/bin/bulkd-image.tar" >>"${LC_DIR}/logs/images.log" 2>&1
  ctr "${a[@]}" images import "${LC_DIR}/pause-image.tar" >>"${LC_DIR}/logs/images.log" 2>&1
  # The list is read whole before matching: with pipefail, "ctr | grep -q" fails whenever grep
  # exits at its first match while ctr is still writing (SIGPIPE), as it did once in CI.
  local images
  images="$(ctr "${a[@]}" images ls -q)"
  grep -qx -- "${PAUSE_IMAGE}" <<<"${images}" || die "pause image not imported: $(tr '\n' ' ' <<<"${images}")"
  grep -q '^localhost/bulkd:' <<<"${images}" || die "bulkd image not imported: $(tr '\n' ' ' <<<"${images}")"
}

# ---------------------------------------------------------------- teardown
own_pid() { # PID NAME: is PID still the component we started?
  local cmd
  # A process gone between the test and the read is simply not ours any more.
  [[ -r "/proc/$1/cmdline" ]] && { cmd="$(tr '\0' ' ' <"/proc/$1/cmdline")"; } 2>/dev/null || return 1
  [[ "${cmd}" == *"$2"* ]]
}

stop_pid() { # PID PATTERN
  local pid="$1" pat="$2"
  own_pid "${pid}" "${pat}" || return 0
  kill -TERM "${pid}" 2>/dev/null || true
  for _ in $(seq 1 40); do own_pid "${pid}" "${pat}" || return 0; sleep 0.25; done
  kill -KILL "${pid}" 2>/dev/null || true
}

down() {
  local T0 name pid sock; T0=$(now_ms)
  [[ -d "${LC_DIR}" ]] || { log "nothing to tear down (${LC_DIR} missing)"; [[ ! -e /run/netns/${NS} ]] || ip netns del "${NS}"; return 0; }
  sock="${LC_DIR}/containerd/containerd.sock"
  # 1. The kubelet first, so it does not restart what we stop.
  if [[ -f "${LC_DIR}/pids" ]]; then
    pid="$(awk '$1 == "kubelet" {print $2}' "${LC_DIR}/pids")"
    [[ -z "${pid}" ]] || stop_pid "${pid}" kubelet
    # redis etc. started by the e2e driver register here too.
    while read -r name pid; do
      case "${name}" in kubelet|containerd|etcd|kube-apiserver) ;; *) stop_pid "${pid}" "${name%%:*}" ;; esac
    done <"${LC_DIR}/pids"
  fi
  # 2. Every container: kill the tasks through containerd, then any process
  #    still in the node's cgroups (all of them are ours).
  if [[ -S "${sock}" ]]; then
    local a=(--address "${sock}" -n k8s.io) id
    for id in $(timeout 10 ctr "${a[@]}" tasks ls -q 2>/dev/null); do
      timeout 5 ctr "${a[@]}" tasks kill -s SIGKILL "${id}" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for id in $(timeout 10 ctr "${a[@]}" tasks ls -q 2>/dev/null); do
      timeout 5 ctr "${a[@]}" tasks delete -f "${id}" >/dev/null 2>&1 || true
    done
  fi
  kill_cgroup_procs
  # 3. containerd, apiserver, etcd.
  if [[ -f "${LC_DIR}/pids" ]]; then
    for name in containerd kube-apiserver etcd; do
      pid="$(awk -v n="${name}" '$1 == n {print $2}' "${LC_DIR}/pids")"
      [[ -z "${pid}" ]] || stop_pid "${pid}" "${name}"
    done
  fi
  # 4. Shims of our containerd (their command line names our socket).
  for pid in $(pgrep -f -- "-address ${sock}" || true); do kill -KILL "${pid}" 2>/dev/null || true; done
  kill_cgroup_procs
  # 5. Mounts under LC_DIR, deepest first; pod network namespaces containerd made.
  local m
  for m in $(awk -v d="${LC_DIR}/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || true
  done
  for m in $(ip netns list | awk '{print $1}' | grep '^cni-' || true); do
    grep -qx "${m}" "${LC_DIR}/netns-before" 2>/dev/null || ip netns del "${m}" 2>/dev/null || true
  done
  # 6. The namespace: its links (bridges, veths), addresses, iptables chains
  #    and sysctls go with it.
  [[ ! -e "/run/netns/${NS}" ]] || ip netns del "${NS}"
  [[ ! -e "/run/netns/${NS}-md" ]] || ip netns del "${NS}-md"   # netpol.sh's metadata address
  # 7. Cgroups the kubelet made, in every hierarchy.
  local h
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [[ -d "${h}kubepods" ]] && find "${h}kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d "${h}kubepods.slice" ]] && find "${h}kubepods.slice" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # 8. Host sysctls the kubelet changed.
  if [[ -f "${LC_DIR}/host-state" ]]; then
    while IFS='=' read -r k v; do sysctl -qw "${k}=${v}" || true; done <"${LC_DIR}/host-state"
  fi
  # 9. Host directories that did not exist before up.
  rmdir /run/containerd/s /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd 2>/dev/null || true
  if [[ -f "${LC_DIR}/new-dirs" ]]; then
    while read -r d; do
      case "${d}" in
        /run/netns) if [[ -z "$(ls -A /run/netns 2>/dev/null)" ]]; then
                      while mountpoint -q /run/netns; do umount /run/netns || break; done
                      rmdir /run/netns 2>/dev/null || true
                    fi ;;
        /var/lib/cni|/var/lib/kubelet|/var/log/pods|/var/log/containers) rm -rf "${d}" ;;
        /run/containerd) rmdir /run/containerd 2>/dev/null || true ;;
        /etc/kueue) rm -rf /etc/kueue ;;   # kueue.sh: Kueue's hard-coded metrics certificate path
      esac
    done <"${LC_DIR}/new-dirs"
    # Where those existed before: only what this cluster's pods left there.
    local d
    for d in /var/log/pods /var/log/containers; do
      grep -qx "${d}" "${LC_DIR}/new-dirs" || [[ ! -d "${d}" ]] && continue
      find "${d}" -mindepth 1 -maxdepth 1 -newer "${LC_DIR}/up-marker" \
        \( -name 'bulkd-e2e_*' -o -name '*_bulkd-e2e_*' -o -name 'default_*' -o -name '*_default_*' \) -exec rm -rf {} + 2>/dev/null || true
    done
  fi
  if [[ -z "${LC_KEEP:-}" ]]; then
    rm -rf "${LC_DIR}" 2>/dev/null || { sleep 1; rm -rf "${LC_DIR}"; }
  fi
  log "down in $(( $(now_ms) - T0 ))ms"
}

kill_cgroup_procs() {
  local f p
  while read -r f; do
    for p in $(cat "${f}" 2>/dev/null); do kill -KILL "${p}" 2>/dev/null || true; done
  done < <(find /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/memory/kubepods -name cgroup.procs 2>/dev/null)
}

status() {
  [[ -e "/run/netns/${NS}" ]] || { echo "down (no namespace ${NS})"; return 1; }
  local name pid
  while read -r name pid; do
    if own_pid "${pid}" "${name%%:*}"; then echo "${name} pid ${pid}: running"; else echo "${name} pid ${pid}: NOT running"; fi
  done <"${LC_DIR}/pids"
  BIN="$(cat "${LC_DIR}/bin-dir")"
  kc get nodes -o wide || true
  kc get pods -A -o wide || true
}

case "${1:-}" in
  up) shift; up ;;
  down) shift; down ;;
  status) shift; status ;;
  kubeconfig) echo "${LC_DIR}/admin.kubeconfig" ;;
  exec) shift; in_ns "$@" ;;
  bin-dir) cat "${LC_DIR}/bin-dir" ;;
  *) echo "usage: $0 up|down|status|kubeconfig|exec CMD…" >&2; exit 2 ;;
esac
