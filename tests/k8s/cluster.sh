#!/bin/bash
# cluster.sh REPO BUILD KBIN WORKDIR — the Kubernetes end-to-end test proper. run.sh starts
# it in a private mount and network namespace (unshare -m -n), so that the paths kubelet
# and containerd hard-code (/run/containerd, /var/lib/kubelet, /var/log/containers, ...),
# the CNI bridge and every port stay private. Each step is in docs/kubernetes.md.
set -euo pipefail
REPO=$1 BUILD=$2 KBIN=$3 W=$4
export PATH="$KBIN:$BUILD/bin:$BUILD/gpusim/bin:$PATH"
M=$REPO/tests/k8s/manifests
t0=$(date +%s)
log() { echo "k8s-e2e [$(( $(date +%s) - t0 ))s] $*"; }
fail() {
	echo "k8s-e2e FAIL: $*" >&2
	exit 1
}
pids=() names=()
bg() { # bg NAME CMD...: run CMD in the background, logging to $W/logs/NAME.log
	local name=$1
	shift
	"$@" > "$W/logs/$name.log" 2>&1 &
	pids+=($!) names+=("$name")
}
alive() { # fails naming the first background component that exited
	local i
	for i in "${!pids[@]}"; do
		kill -0 "${pids[$i]}" 2> /dev/null || fail "${names[$i]} exited: $(tail -5 "$W/logs/${names[$i]}.log")"
	done
}
waitfor() { # waitfor SECONDS WHAT CMD...: retry CMD every half second
	local limit=$1 what=$2 end=$(( $(date +%s) + $1 ))
	shift 2
	until "$@" > /dev/null 2>&1; do
		alive
		[ "$(date +%s)" -lt "$end" ] || fail "timed out after ${limit}s waiting for $what"
		sleep 0.5
	done
}
k() { kubectl --kubeconfig "$W/kubeconfig" "$@"; }

cleanup() {
	local rc=$?
	# Never stop half way: a cluster left running would keep managing /mfk8s's cgroups
	# and kill the next run's pods.
	set +e
	trap - EXIT
	if [ $rc -ne 0 ] || [ -n "${MUXFLOW_K8S_VERBOSE:-}" ]; then
		echo "---- diagnostics (logs in $W/logs) ----" >&2
		if [ -f "$W/kubeconfig" ] && k get --raw /readyz > /dev/null 2>&1; then
			k get pods -A -o wide 2>&1 | head -30 >&2 || true
			k get events -A --sort-by=.lastTimestamp 2>&1 | tail -30 >&2 || true
		fi
		for f in "$W"/logs/*.log; do echo "== ${f##*/}" >&2; tail -15 "$f" >&2; done
	fi
	log "stopping the cluster"
	# First everything in this mount namespace (kubelet, containerd, shims, muxd, ...), so
	# that nothing starts containers again; then what is left in kubelet's cgroups (the
	# pods' processes, in namespaces of their own).
	local me=$(readlink /proc/$$/ns/mnt) d p h
	for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
	sleep 1
	for d in /proc/[0-9]*; do
		p=${d#/proc/}
		[ "$p" = $$ ] && continue
		[ "$(readlink "$d/ns/mnt" 2> /dev/null)" = "$me" ] && kill -9 "$p" 2> /dev/null
	done
	for _ in 1 2 3; do
		for h in /sys/fs/cgroup/pids /sys/fs/cgroup/memory; do
			[ -d "$h/mfk8s" ] && find "$h/mfk8s" -name cgroup.procs -exec cat {} + 2> /dev/null | xargs -r kill -9 2> /dev/null
		done
		sleep 0.5
	done
	for h in /sys/fs/cgroup/*/; do
		[ -d "$h/mfk8s" ] && find "$h/mfk8s" -depth -type d -exec rmdir {} + 2> /dev/null
	done
	exit $rc
}
trap cleanup EXIT

mkdir -p "$W/logs"

# ---- 1. private paths, network and cgroups ----
mount --make-rprivate /
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/lock
for d in /var/lib/kubelet /var/log/pods /var/log/containers /etc/cni/net.d /etc/cdi; do
	mkdir -p "$W/root$d" "$d"
	mount --bind "$W/root$d" "$d"
done
ip link set lo up
ip link add mfk8s-node type bridge # (no dummy module on these VMs)
ip addr add 10.99.0.1/24 dev mfk8s-node
ip link set mfk8s-node up
ip route add default dev mfk8s-node
for h in /sys/fs/cgroup/*/; do
	case $h in */unified/) continue ;; esac
	mkdir -p "$h/mfk8s"
	if [ -f "$h/cpuset.cpus" ]; then
		cat "$h/cpuset.cpus" > "$h/mfk8s/cpuset.cpus"
		cat "$h/cpuset.mems" > "$h/mfk8s/cpuset.mems"
	fi
done

# ---- 2. images (no registry: built here, imported into containerd) ----
log "building images"
mkdir -p "$W/img/pause" "$W/img/work/bin" "$W/img/work/usr/local/bin" "$W/img/work/etc" "$W/img/work/tmp"
gcc -static -O2 -o "$W/img/pause/pause" "$REPO/tests/k8s/pause.c"
cp /bin/busybox "$W/img/work/bin/busybox"
for a in sh cat ls sleep echo env grep; do ln -sf busybox "$W/img/work/bin/$a"; done
cp "$BUILD/gpusim/bin/infer" "$BUILD/gpusim/bin/train" "$W/img/work/usr/local/bin/"
# The C workloads, libxcuda (preloaded into GPU containers) and the fake driver (mounted
# by the device plugin / CDI) need glibc: copy what ldd names.
for f in "$BUILD/gpusim/bin/infer" "$BUILD/gpusim/bin/train" "$BUILD/lib/libxcuda.so" "$BUILD/gpusim/lib/libcuda.so.1"; do
	ldd "$f" | grep -o '/[^ ]*' | while read -r lib; do
		mkdir -p "$W/img/work$(dirname "$lib")"
		cp -L "$lib" "$W/img/work$lib"
	done
done
chmod 1777 "$W/img/work/tmp"
"$REPO/tests/k8s/ociimage.sh" muxflow.local/pause:1 "$W/img/pause" "$W/img/pause.tar" /pause
"$REPO/tests/k8s/ociimage.sh" muxflow.local/gpusim-workloads:1 "$W/img/work" "$W/img/work.tar"

# ---- 3. gpusim: two simulated GPUs ----
log "starting gpusimd, containerd, etcd"
mkdir -p /run/gpusim
bg gpusimd gpusimd -gpus h100x2 -socket /run/gpusim/gpusimd.sock
waitfor 20 "gpusimd" test -S /run/gpusim/gpusimd.sock

# ---- 4. muxd ----
mkdir -p "$W/mps-pipe" "$W/mps-log" /etc/muxflow /var/run/secrets/kubernetes.io/serviceaccount
cat > /etc/muxflow/policy.toml <<TOML
[node]
name = "localhost"
state_dir = "$W/muxd-state"
run_dir = "/run/muxflow"
socket = "/run/muxflow/muxd.sock"
[mps]
control = "$BUILD/gpusim/bin/nvidia-cuda-mps-control"
pipe_dir = "$W/mps-pipe"
log_dir = "$W/mps-log"
[hook]
runtime = "runc"
libxcuda = "$BUILD/lib/libxcuda.so"
[monitor]
period = "200ms"
hysteresis = 2
throttled_max = "3s"
recovery = "20s"
[evict]
grace = "5s"
backoff = "5s"
kubernetes = true
containerd_address = "/run/containerd/containerd.sock"
TOML
export MUXFLOW_POLICY=/etc/muxflow/policy.toml

# ---- 5. containerd with the muxflow runtime ----
cat > "$W/cni.conflist" <<JSON
{"cniVersion":"0.4.0","name":"mfk8s","plugins":[{"type":"bridge","bridge":"mfk8s0","isGateway":true,"ipMasq":false,
 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"$W/cni-ipam"}}]}
JSON
cp "$W/cni.conflist" /etc/cni/net.d/10-mfk8s.conflist
# The device plugin's strategy (MUXFLOW_K8S_STRATEGY: envvar, volume-mounts or
# cdi-annotations, as the NVIDIA device plugin's deviceListStrategy). With CDI annotations
# containerd must pass them to the runtime too.
STRATEGY=${MUXFLOW_K8S_STRATEGY:-envvar}
CDI_ANNOTATIONS=""
[ "$STRATEGY" = cdi-annotations ] && CDI_ANNOTATIONS=$'\n      container_annotations = ["cdi.k8s.io/*"]'
log "device plugin strategy: $STRATEGY"
cat > "$W/containerd.toml" <<TOML
version = 2
root = "$W/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "muxflow.local/pause:1"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.muxflow]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["muxflow.io/*"]$CDI_ANNOTATIONS
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.muxflow.options]
        BinaryName = "$BUILD/bin/muxflow-runtime"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
TOML
bg containerd containerd --config "$W/containerd.toml"
waitfor 30 "containerd" ctr --address /run/containerd/containerd.sock version
for i in pause work; do ctr --address /run/containerd/containerd.sock -n k8s.io images import "$W/img/$i.tar" > /dev/null; done

# ---- 6. control plane: etcd, kube-apiserver, controller-manager ----
P=$W/pki
mkdir -p "$P"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$P/ca.key" -out "$P/ca.crt" -days 2 -subj /CN=mfk8s-ca 2> /dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$P/apiserver.key" -out "$P/apiserver.csr" -subj /CN=kube-apiserver 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:10.99.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' > "$P/san.ext"
openssl x509 -req -in "$P/apiserver.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 2 -extfile "$P/san.ext" -out "$P/apiserver.crt" 2> /dev/null
openssl genrsa -out "$P/sa.key" 2048 2> /dev/null
openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2> /dev/null
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$TOKEN,admin,admin,system:masters" > "$P/tokens.csv"
echo -n "$TOKEN" > "$P/token"
cat > "$W/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: mfk8s, cluster: {server: "https://127.0.0.1:6443", certificate-authority: "$P/ca.crt"}}]
users: [{name: admin, user: {tokenFile: "$P/token"}}]
contexts: [{name: mfk8s, context: {cluster: mfk8s, user: admin}}]
current-context: mfk8s
YAML
# muxd evicts through the Eviction API as it does in a pod: the service account files
# and KUBERNETES_SERVICE_* (here the admin token; a real node uses muxd's RBAC).
cp "$P/token" /var/run/secrets/kubernetes.io/serviceaccount/token
cp "$P/ca.crt" /var/run/secrets/kubernetes.io/serviceaccount/ca.crt

bg etcd etcd --data-dir "$W/etcd" --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
bg kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 --secure-port=6443 \
	--advertise-address=10.99.0.1 \
	--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --token-auth-file="$P/tokens.csv" \
	--authorization-mode=RBAC --service-account-issuer=https://kubernetes.default.svc \
	--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
	--service-cluster-ip-range=10.96.0.0/24 --kubelet-preferred-address-types=Hostname,InternalIP
log "waiting for kube-apiserver"
waitfor 120 "kube-apiserver" k get --raw /readyz
bg kube-controller-manager kube-controller-manager --kubeconfig="$W/kubeconfig" --leader-elect=false \
	--bind-address=127.0.0.1 --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt"

# ---- 7. the muxflow scheduler: kube-scheduler with muxmatch as its extender ----
bg muxd env KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=6443 muxd --policy /etc/muxflow/policy.toml --gpus gpusim:/run/gpusim/gpusimd.sock
waitfor 20 "muxd" muxctl status
bg muxmatch muxmatch serve --listen 127.0.0.1:8888 --nodes /run/muxflow/muxd.sock --interval 1s --measured "$W/measured.json" \
	--bind --kube-server https://127.0.0.1:6443 --kube-token-file "$P/token" --kube-ca "$P/ca.crt"
cat > "$W/scheduler.yaml" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$W/kubeconfig"}
leaderElection: {leaderElect: false}
profiles:
  - schedulerName: default-scheduler
  - schedulerName: muxflow-scheduler
extenders:
  - urlPrefix: http://127.0.0.1:8888
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: 1
YAML
bg kube-scheduler kube-scheduler --config="$W/scheduler.yaml" --bind-address=127.0.0.1

# ---- 8. kubelet and the device plugin ----
cat > "$W/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /mfk8s
failSwapOn: false
failCgroupV1: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
resolvConf: ""
YAML
bg kubelet kubelet --config="$W/kubelet.yaml" --kubeconfig="$W/kubeconfig" --hostname-override=localhost \
	--node-ip=10.99.0.1 --root-dir=/var/lib/kubelet
bg device-plugin muxflow-device-plugin --gpus gpusim:/run/gpusim/gpusimd.sock --gpusim-lib "$BUILD/gpusim/lib" --cdi-dir /var/run/cdi \
	--device-list-strategy "$STRATEGY"
log "waiting for the node"
waitfor 120 "node localhost Ready" sh -c "kubectl --kubeconfig $W/kubeconfig get node localhost -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
waitfor 60 "2 nvidia.com/gpu on the node" sh -c "kubectl --kubeconfig $W/kubeconfig get node localhost -o jsonpath='{.status.allocatable.nvidia\.com/gpu}' | grep -qx 2"
waitfor 60 "service account default" k get serviceaccount default
log "node Ready with 2 GPUs from the device plugin"

# ---- 9. online pods ----
k apply -f "$M/runtimeclass.yaml" > /dev/null
k apply -f "$M/online.yaml" > /dev/null
waitfor 120 "2 online pods Running" sh -c "kubectl --kubeconfig $W/kubeconfig get pods -l app=infer -o jsonpath='{.items[*].status.phase}' | grep -qx 'Running Running'"
status() { muxctl status -o json; }
waitfor 30 "2 online containers registered with muxd, launching kernels" sh -c "muxctl status -o json | jq -e '[.containers[] | select(.class==\"online\" and .usage.launches > 0)] | length == 2'"
log "online pods Running, each on a GPU from the device plugin, registered with muxd"

# ---- 10. offline jobs, paired by the plan ----
k apply -f "$M/offline-a.yaml" -f "$M/offline-b.yaml" > /dev/null
waitfor 120 "2 offline pods Running" sh -c "kubectl --kubeconfig $W/kubeconfig get pods -l app=train --field-selector=status.phase=Running -o name | wc -l | grep -qx 2"
st=$(muxctl status -o json)
[ "$(jq -r .node.mps.state <<< "$st")" = running ] || fail "muxd's MPS is not running: $(jq -c .node.mps <<< "$st")"
for pod in $(k get pods -l app=train -o jsonpath='{.items[*].metadata.name}'); do
	gpu=$(k get pod "$pod" -o jsonpath='{.metadata.annotations.muxflow\.io/gpu}')
	gen=$(k get pod "$pod" -o jsonpath='{.metadata.annotations.muxflow\.io/plan-generation}')
	[ -n "$gpu" ] || fail "offline pod $pod has no muxflow.io/gpu annotation: the extender's bind did not record the plan"
	grep -q "bound offline pod to its planned GPU pod=default/$pod node=localhost gpu=$gpu plan=$gen" "$W/logs/muxmatch.log" ||
		fail "muxmatch did not log binding $pod to $gpu"
	c=$(jq -c --arg p "default/$pod" '.containers[] | select(.pod==$p)' <<< "$st")
	[ -n "$c" ] || fail "offline pod $pod is not registered with muxd (not a GPU container)"
	[ "$(jq -r '.class + " " + (.gpus|join(","))' <<< "$c")" = "offline $gpu" ] || fail "offline pod $pod: muxd has $(jq -c '{class,gpus}' <<< "$c"), want offline on $gpu"
	online=$(jq -r --arg g "$gpu" '[.containers[] | select(.class=="online" and (.gpus|index($g)))] | .[0].pod // ""' <<< "$st")
	[ -n "$online" ] || fail "offline pod $pod on $gpu shares it with no online pod: $(jq -c '[.containers[]|{pod,class,gpus}]' <<< "$st")"
	# libxcuda in the container reports its kernel launches and reserved memory (train
	# reserves 1 GiB) in the control block: the pod really runs on that GPU, through MPS.
	waitfor 30 "offline pod $pod launching kernels through libxcuda" sh -c \
		"muxctl status -o json | jq -e --arg p default/$pod '.containers[] | select(.pod==\$p) | .usage.launches > 0 and .usage.reserved_bytes >= 1073741824'"
	log "offline pod $pod: plan generation $gen chose $gpu; it runs there under MPS next to online pod $online"
done
# muxd measures each job's kernels through libxcuda and reports them in GET /v1/node;
# muxmatch keeps them under the pod's Job (from the owner reference kube-scheduler's filter
# call carried) for the Job's next pod (GET /v1/measured; --measured keeps them in a file).
for job in train-a train-b; do
	waitfor 30 "muxmatch keeping $job's measured kernel length (2 ms kernels)" sh -c \
		"curl -sf http://127.0.0.1:8888/v1/measured | jq -e '.measured[\"default/Job/$job\"].profile.kernel_us > 1000'"
done
log "muxmatch keeps the jobs' kernel lengths muxd measured: $(curl -sf http://127.0.0.1:8888/v1/measured | jq -c '[.measured | to_entries[] | {(.key): .value.profile.kernel_us}] | add') µs"

# onlinelines POD: the JSON lines its infer rounds printed so far.
onlinelines() { k logs "$1" 2> /dev/null | grep '^{' || true; }
online_pods=$(k get pods -l app=infer -o jsonpath='{.items[*].metadata.name}')

# ---- 11. kubectl delete of an offline pod: SIGTERM, grace period, 0 online errors ----
victim=$(k get pods -l job=train-a -o jsonpath='{.items[0].metadata.name}')
declare -A before
for p in $online_pods; do before[$p]=$(onlinelines "$p" | wc -l); done
k delete pod "$victim" --wait=true --timeout=60s > /dev/null
sleep 7 # two more infer rounds
for p in $online_pods; do
	new=$(onlinelines "$p" | tail -n +$(( ${before[$p]} + 1 )))
	[ -n "$new" ] || fail "online pod $p printed nothing after the offline pod's deletion"
	bad=$(jq -c 'select(.errors != 0)' <<< "$new")
	[ -z "$bad" ] || fail "online pod $p saw errors after $victim was deleted: $bad"
done
[ "$(k get pods -l app=infer -o jsonpath='{.items[*].status.containerStatuses[0].restartCount}')" = "0 0" ] || fail "an online container restarted"
log "kubectl delete $victim: online pods kept serving with 0 errors"
# The Job replaces its pod (backoffLimit 1); muxmatch plans the new pod with what muxd
# measured of the deleted one, kept under their Job.
waitfor 60 "muxmatch planning train-a's next pod with what muxd measured of $victim" sh -c \
	"grep 'pending pod planned with what the nodes measured of its controller' $W/logs/muxmatch.log | grep 'controller=default/Job/train-a' | grep -q 'measured_pod=default/$victim'"
log "train-a's next pod planned with its Job's measured kernels: $(grep -o 'pending pod planned with what the nodes measured of its controller pod=default/train-a-[^ ]* .*' "$W/logs/muxmatch.log" | head -1)"

# ---- 12. GPU fault: offline pods evicted through the Eviction API, online keeps running ----
waitfor 120 "train-b Running" sh -c "kubectl --kubeconfig $W/kubeconfig get pods -l job=train-b --field-selector=status.phase=Running -o name | grep -q ."
target=$(k get pods -l job=train-b -o jsonpath='{.items[0].metadata.name}')
tuid=$(k get pod "$target" -o jsonpath='{.metadata.uid}')
tgpu=$(k get pod "$target" -o jsonpath='{.metadata.annotations.muxflow\.io/gpu}')
idx=$(muxctl status -o json | jq -r --arg g "$tgpu" '.gpus[] | select(.uuid==$g) | .index')
onl=$(muxctl status -o json | jq -r --arg g "$tgpu" '[.containers[] | select(.class=="online" and (.gpus|index($g)))][0].pod | sub("^default/"; "")')
gpusimctl -socket /run/gpusim/gpusimd.sock power-limit "$idx" 80 > /dev/null
log "GPU $idx ($tgpu) held throttled at 80 W"
# The GPU turns unhealthy after throttled_max; muxd then evicts its offline pod through the
# Eviction API, which marks the pod DisruptionTarget/EvictionByEvictionAPI while it
# terminates. (Without its offline load the GPU soon recovers, so its state is not polled.)
end=$(( $(date +%s) + 60 )) reason=""
while k get pod "$target" -o jsonpath='{.metadata.uid}' 2> /dev/null | grep -q "$tuid"; do
	r=$(k get pod "$target" -o jsonpath='{.status.conditions[?(@.type=="DisruptionTarget")].reason}' 2> /dev/null || true)
	[ -n "$r" ] && reason=$r
	alive
	[ "$(date +%s)" -lt "$end" ] || fail "offline pod $target on the throttled GPU was not evicted within 60 s"
	sleep 0.3
done
[ "$reason" = EvictionByEvictionAPI ] || fail "offline pod $target went without the Eviction API (DisruptionTarget reason \"$reason\")"
grep -q "\"msg\":\"evicted offline work\".*\"gpu\":\"$tgpu\",\"reason\":\"GPU unhealthy" "$W/logs/muxd.log" || fail "muxd did not log evicting offline work from $tgpu as unhealthy"
[ "$(k get pod "$onl" -o jsonpath='{.status.phase} {.status.containerStatuses[0].restartCount}')" = "Running 0" ] || fail "online pod $onl on the faulty GPU is not running unharmed"
log "GPU fault: offline pod $target evicted through the Eviction API; online pod $onl still Running"
gpusimctl -socket /run/gpusim/gpusimd.sock power-limit "$idx" 0 > /dev/null

# ---- 13. an offline pod whose planned GPU is not on the node gets a clear event ----
cat <<YAML | k apply -f - > /dev/null
apiVersion: v1
kind: Pod
metadata:
  name: ghost
  annotations:
    muxflow.io/class: offline
    muxflow.io/gpu: GPU-00000000-0000-4000-8000-00000000dead
spec:
  nodeName: localhost
  runtimeClassName: muxflow
  restartPolicy: Never
  automountServiceAccountToken: false
  enableServiceLinks: false
  containers:
    - {name: train, image: "muxflow.local/gpusim-workloads:1", imagePullPolicy: Never, command: ["train", "--duration", "5"]}
YAML
want="GPU GPU-00000000-0000-4000-8000-00000000dead, which the muxflow scheduler chose for this pod (annotation muxflow.io/gpu), is not on this node"
waitfor 60 "the event naming the missing GPU" sh -c "kubectl --kubeconfig $W/kubeconfig get events --field-selector involvedObject.name=ghost -o jsonpath='{.items[*].message}' | grep -qF '$want'"
log "pod ghost: event says: $want"

# ---- 14. an offline pod planned onto an unhealthy GPU is refused with a clear event ----
# Last, because a double-bit ECC error (Xid 48) fails every context on the GPU, online too;
# muxd's monitor holds the GPU faulted, then recovering (policy recovery 20s), admitting no
# offline work meanwhile.
gpusimctl -socket /run/gpusim/gpusimd.sock fault "$idx" 48 > /dev/null
waitfor 30 "GPU $idx faulted after Xid 48" sh -c "muxctl status -o json | jq -e --argjson i $idx '.gpus[] | select(.index==\$i) | .admits_offline == false'"
cat <<YAML | k apply -f - > /dev/null
apiVersion: v1
kind: Pod
metadata:
  name: sick
  annotations:
    muxflow.io/class: offline
    muxflow.io/gpu: $tgpu
spec:
  nodeName: localhost
  runtimeClassName: muxflow
  restartPolicy: Never
  automountServiceAccountToken: false
  enableServiceLinks: false
  containers:
    - {name: train, image: "muxflow.local/gpusim-workloads:1", imagePullPolicy: Never, command: ["train", "--duration", "5"]}
YAML
want="takes no offline work while"
waitfor 60 "the event saying GPU $idx takes no offline work" sh -c "kubectl --kubeconfig $W/kubeconfig get events --field-selector involvedObject.name=sick -o jsonpath='{.items[*].message}' | grep -qF '$want'"
log "pod sick: event says: $(k get events --field-selector involvedObject.name=sick -o jsonpath='{.items[*].message}' | grep -oE 'offline container [^:]+ not admitted: GPU [^:]+: [^"]*' | head -1 | cut -c1-200)"

log "PASS"
