#!/usr/bin/env bash
# Installs, on a fresh Debian machine, the system packages muxflow's tests need.
# Safe to run again: it installs only what is missing. Needs root for apt-get.
set -euo pipefail

pkgs=(gcc make libc6-dev containerd runc busybox-static python3 python3-scipy valgrind
      lintian rpm systemd iproute2 procps psmisc curl jq man-db binutils
      containernetworking-plugins openssl iptables util-linux)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "tests/deps.sh: missing packages (${missing[*]}); run as root or install them" >&2
  exit 1
fi
echo "tests/deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
