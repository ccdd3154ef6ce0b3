#!/bin/bash
# build.sh builds the Kubernetes and etcd binaries the Kubernetes end-to-end test runs, from
# the Go module in tests/k8s/build, into a cache outside the clone:
#   ${MUXFLOW_K8S_CACHE:-/var/cache/muxflow-k8s}/<key>/bin/{etcd,kube-apiserver,...}
# <key> is a hash of build/go.mod, build/go.sum and this script, so a changed pin rebuilds and
# an unchanged one costs nothing. Prints the bin directory on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${MUXFLOW_K8S_CACHE:-/var/cache/muxflow-k8s}
key=$(cat "$here/build/go.mod" "$here/build/go.sum" "$here/build/etcd/main.go" "$0" | sha256sum | cut -c1-16)
bin=$cache/$key/bin
cmds="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
ok=1
for c in etcd $cmds; do [ -x "$bin/$c" ] || ok=0; done
if [ $ok = 1 ]; then echo "$bin"; exit 0; fi

ver=$(awk '$1=="k8s.io/kubernetes" {print $2}' "$here/build/go.mod" | head -1)
[ -n "$ver" ] || ver=$(grep -o 'k8s.io/kubernetes v[0-9.]*' "$here/build/go.mod" | awk '{print $2}' | head -1)
minor=$(echo "$ver" | cut -d. -f2)
pkg=k8s.io/component-base/version
ld="-s -w -X $pkg.gitVersion=$ver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
tmp=$cache/$key/tmp.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cd "$here/build"
start=$(date +%s)
echo "building etcd and Kubernetes $ver into $bin (cold: several minutes on 2 cores)" >&2
# CGO off: static binaries that do not depend on the host's libc; kubelet and the rest need none.
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$tmp/" ./etcd \
	$(for c in $cmds; do echo k8s.io/kubernetes/cmd/$c; done) >&2
mkdir -p "$bin"
for c in etcd $cmds; do mv "$tmp/$c" "$bin/$c"; done
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
