#!/bin/bash
# ociimage.sh NAME ROOTFS OUT.tar [CMD...]: packs the directory ROOTFS as a one-layer OCI
# image named NAME (e.g. muxflow.local/pause:1) in an OCI layout tarball that
# `ctr -n k8s.io images import` accepts; there is no registry in the test.
set -euo pipefail
name=$1 rootfs=$2 out=$3
shift 3
cmd='["/bin/sh"]'
if [ $# -gt 0 ]; then cmd=$(printf '%s\n' "$@" | jq -R . | jq -cs .); fi
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/blobs/sha256"
tar -C "$rootfs" --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -cf "$d/layer.tar" .
blob() { # moves or writes a blob; prints "digest size"
	local f=$1 dg
	dg=$(sha256sum "$f" | cut -c1-64)
	mv "$f" "$d/blobs/sha256/$dg"
	echo "$dg $(stat -c %s "$d/blobs/sha256/$dg")"
}
read -r ldig lsize < <(blob "$d/layer.tar")
jq -nc --argjson cmd "$cmd" --arg diff "sha256:$ldig" \
	'{architecture:"amd64",os:"linux",config:{Env:["PATH=/usr/local/bin:/usr/bin:/bin"],Cmd:$cmd},rootfs:{type:"layers",diff_ids:[$diff]}}' > "$d/config.json"
read -r cdig csize < <(blob "$d/config.json")
jq -nc --arg c "sha256:$cdig" --argjson cs "$csize" --arg l "sha256:$ldig" --argjson ls "$lsize" \
	'{schemaVersion:2,mediaType:"application/vnd.oci.image.manifest.v1+json",
	  config:{mediaType:"application/vnd.oci.image.config.v1+json",digest:$c,size:$cs},
	  layers:[{mediaType:"application/vnd.oci.image.layer.v1.tar",digest:$l,size:$ls}]}' > "$d/manifest.json"
read -r mdig msize < <(blob "$d/manifest.json")
jq -nc --arg m "sha256:$mdig" --argjson ms "$msize" --arg name "$name" --arg tag "${name##*:}" \
	'{schemaVersion:2,manifests:[{mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$m,size:$ms,
	  annotations:{"io.containerd.image.name":$name,"org.opencontainers.image.ref.name":$tag}}]}' > "$d/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$d/oci-layout"
tar -C "$d" -cf "$out" oci-layout index.json blobs
