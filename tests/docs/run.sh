#!/usr/bin/env bash
# run.sh: the docs test (`make docs-test`, part of `make test`). It extracts the shell
# blocks marked runnable (a fence whose info string is "sh runnable", see README.md) from
# the operator documents and runs each document's blocks, in order and in one shell, in a
# throwaway root of its own where the freshly built packages lie in the working directory
# and a stand-in systemd runs the units they ship. A block that fails fails the test.
#
# The machine's real installation and configuration are never touched: as in the package
# test (packaging/test.sh), everything runs in a private mount and pid namespace,
# chrooted into an overlay of / whose writable layer is a tmpfs of that namespace; /run
# and /tmp are empty there; when a document is done the namespace, its processes and every
# write are gone. The test refuses to run where muxflow is installed.
#
#   tests/docs/run.sh [DOC...]      default: docs/install.md docs/try-without-a-gpu.md docs/kubernetes.md
#   DIST=DIR                        use the packages in DIR instead of building them
#   KEEP=1                          keep the work directory (logs) after success too
# Needs root, overlayfs, unshare; BUILD (default build/) as `make build` left it.
set -euo pipefail

ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
HERE=$ROOT/tests/docs

fail() { echo "docs test: FAIL: $*" >&2; exit 1; }

# extract DOC: the runnable blocks of DOC as one bash script; each block announces itself
# with the document's line number, so a failure points at the manual.
extract() {
	awk -v doc="$1" '
		/^```/ {
			if (inblk) { inblk = 0; print "echo \"--- end of block at " doc ":" start " ($((SECONDS - docs_t))s)\""; next }
			info = substr($0, 4); gsub(/^[ \t]+|[ \t]+$/, "", info)
			n = split(info, w, /[ \t]+/)
			run = 0
			for (i = 2; i <= n; i++) if (w[i] == "runnable") run = 1
			if (w[1] == "sh" && run) {
				inblk = 1; start = NR + 1; blocks++
				print "echo; echo \"--- block at " doc ":" start "\"; docs_t=$SECONDS"
				next
			}
			skip = !skip
			next
		}
		inblk { print }
		END { if (inblk) { print "echo \"unterminated runnable block at " doc ":" start "\" >&2; exit 1" } }
	' "$2"
}

case ${1:-} in
--inside) # DOC SCRIPT: in the throwaway root (see below)
	rootfs=$(awk '$5 == "/" { for (i = 7; i < NF; i++) if ($i == "-") print $(i + 1), $(i + 2) }' /proc/self/mountinfo | tail -1)
	[ "$rootfs" = "overlay muxflow-docstest" ] || fail "run.sh --inside runs only in the throwaway root run.sh makes (/ here is '$rootfs')"
	# The stand-in systemd: /run/systemd/system says "systemd runs" to the maintainer
	# scripts, and systemctl/journalctl come before the real ones on PATH. Debian images forbid service
	# starts with policy-rc.d; this root allows them.
	# (/usr/sbin: apt runs maintainer scripts with PATH=/usr/sbin:/usr/bin:/sbin:/bin.)
	mkdir -p /run/systemd/system
	install -m 0755 "$HERE/systemctl" "$HERE/journalctl" /usr/sbin/
	rm -f /usr/sbin/policy-rc.d
	rm -rf /etc/muxflow /var/lib/muxflow /var/log/muxflow
	cd "$W/pkgs"
	# sudo is the manual's way to say "as root"; here everything already is.
	sudo() { "$@"; }
	export -f sudo
	exec bash -eo pipefail "$3"
	;;
esac

[ "$(id -u)" -eq 0 ] || fail "must run as root (it installs the packages in a throwaway root of its own)"
for c in unshare chroot mount dpkg apt-get; do
	command -v "$c" >/dev/null 2>&1 || fail "$c is not installed; run tests/deps.sh as root"
done
how=$(bash "$ROOT/packaging/test.sh" --check-installed 2>&1) || fail "muxflow is installed on this machine; the docs test refuses to run next to it: $how"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
grep -qw overlay /proc/filesystems || fail "the kernel has no overlayfs"

W=$(mktemp -d /tmp/muxflow-docstest.XXXXXX)
trap 'rc=$?; if [ $rc -ne 0 ] || [ -n "${KEEP:-}" ]; then echo "docs test: work files kept in $W" >&2; else rm -rf "$W"; fi; exit $rc' EXIT
mkdir -p "$W/pkgs"
if [ -n "${DIST:-}" ]; then
	cp "$DIST"/*.deb "$W/pkgs/"
else
	start=$SECONDS
	if ! PACKAGERS=deb make -s -C "$ROOT/packaging" package BUILD="$BUILD" DIST="$W/pkgs" >"$W/package.log" 2>&1; then
		cat "$W/package.log" >&2
		fail "make package failed"
	fi
	echo "docs test: built $(ls "$W/pkgs" | tr '\n' ' ')in $((SECONDS - start))s"
fi

docs=("$@")
[ ${#docs[@]} -gt 0 ] || docs=(docs/install.md docs/try-without-a-gpu.md docs/kubernetes.md)
total=0
for doc in "${docs[@]}"; do
	[ -f "$ROOT/$doc" ] || fail "$doc does not exist"
	script=$W/$(basename "$doc" .md).sh
	extract "$doc" "$ROOT/$doc" >"$script"
	n=$(grep -c '^echo; echo "--- block at ' "$script" || true)
	if [ "$n" -eq 0 ]; then
		echo "docs test: $doc: no runnable blocks"
		continue
	fi
	total=$((total + n))
	start=$SECONDS
	export ROOT W HERE
	if ! unshare --mount --pid --fork --propagation private bash -euo pipefail -c '
		R=$W/root
		U=$W/upper
		mkdir -p "$R" "$U"
		mount -t tmpfs -o mode=0700 muxflow-docstest "$U"
		layer() {
			local n
			n=$(echo "$1" | tr / _)
			mkdir -p "$U/up$n" "$U/work$n"
			mount -t overlay muxflow-docstest -o "lowerdir=$1,upperdir=$U/up$n,workdir=$U/work$n" "$R${1%/}"
		}
		layer /
		for d in /usr /var /etc /opt; do
			if mountpoint -q "$d"; then layer "$d"; fi
		done
		mount -t proc proc "$R/proc"
		mount --rbind /dev "$R/dev"
		mount --rbind /sys "$R/sys"
		mount -t tmpfs -o mode=0755 run "$R/run"
		mount -t tmpfs -o mode=1777 tmp "$R/tmp"
		mkdir -p "$R$W" "$R$ROOT"
		mount --bind "$W" "$R$W"
		mount --bind "$ROOT" "$R$ROOT" && mount -o remount,bind,ro "$R$ROOT"
		exec chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			LANG=C.UTF-8 HOME=/root TERM=dumb ROOT="$ROOT" W="$W" HERE="$HERE" \
			bash "$HERE/run.sh" --inside "$0" "$1"
	' "$doc" "$script" 2>&1 | tee "$W/$(basename "$doc" .md).log" | sed "s|^|  $(basename "$doc"): |"; then
		fail "$doc: a runnable block failed (the last '--- block at' line above names it; log in $W)"
	fi
	echo "docs test: ok - $doc: $n runnable blocks in $((SECONDS - start))s"
done
echo "docs test: all runnable blocks passed ($total blocks in ${#docs[@]} documents); this machine was not touched"
