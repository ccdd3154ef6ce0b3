#!/bin/bash
# run.sh — `make k8s-e2e`: a real single-node Kubernetes cluster on simulated GPUs.
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler (muxmatch as its
# extender), kubelet, Debian's containerd through CRI with the muxflow runtime and a
# RuntimeClass, muxd, muxflow-device-plugin and gpusimd; no mocks. The Kubernetes binaries
# come from tests/k8s/build.sh (cached outside the clone); everything runs in a private
# mount and network namespace (cluster.sh), and the host sysctls kubelet sets are put back.
# Needs root and `make build` (BUILD, default ./build). MUXFLOW_K8S_KEEP=1 keeps the work
# directory; MUXFLOW_K8S_VERBOSE=1 prints the components' log tails even on success.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$repo/build}
[ "$(id -u)" = 0 ] || { echo "k8s-e2e: needs root (it runs containerd and kubelet)" >&2; exit 1; }
for t in containerd containerd-shim-runc-v2 runc ctr unshare openssl jq curl gcc ip /usr/lib/cni/bridge /bin/busybox; do
	command -v "$t" > /dev/null || [ -x "$t" ] || { echo "k8s-e2e: $t is missing; run tests/deps.sh" >&2; exit 1; }
done
for f in bin/muxd bin/muxctl bin/muxmatch bin/muxflow-runtime bin/muxflow-device-plugin bin/gpusimd lib/libxcuda.so \
	gpusim/lib/libcuda.so.1 gpusim/bin/infer gpusim/bin/train gpusim/bin/nvidia-cuda-mps-control gpusim/bin/gpusimctl; do
	[ -e "$BUILD/$f" ] || { echo "k8s-e2e: $BUILD/$f is missing; run make build" >&2; exit 1; }
done
start=$(date +%s)
kbin=$("$repo/tests/k8s/build.sh")
echo "k8s-e2e: Kubernetes binaries ready in $(( $(date +%s) - start )) s ($kbin)"
W=$(mktemp -d /tmp/mfk8s.XXXXXX)
# kubelet sets these host sysctls at start; they are not namespaced.
sysctls="vm.overcommit_memory kernel.panic kernel.panic_on_oops vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
saved=()
for s in $sysctls; do saved+=("$s=$(sysctl -n "$s")"); done
restore() {
	for kv in "${saved[@]}"; do sysctl -q -w "$kv" > /dev/null || true; done
	if [ -z "${MUXFLOW_K8S_KEEP:-}" ]; then rm -rf "$W"; else echo "k8s-e2e: work directory kept: $W"; fi
}
trap restore EXIT
rc=0
unshare --mount --net --propagation private "$repo/tests/k8s/cluster.sh" "$repo" "$BUILD" "$kbin" "$W" || rc=$?
echo "k8s-e2e: $([ $rc = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
exit $rc
