#!/usr/bin/env bash
# test.sh: the package tests (`make -C packaging test`, run by the top-level `make test`).
# Builds the deb and rpm twice (two versions) from $BUILD, lints and lists them, checks
# the units with systemd-analyze, then, in a throwaway root, installs the deb with dpkg,
# upgrades it, removes and purges it, checks the rpm's upgrade and erase, and replays the
# deb's life cycle with a stand-in systemd to check the maintainer scripts' calls.
#
# The machine's real installation is never touched: everything that installs runs in a
# private mount and pid namespace, chrooted into an overlay of / whose writable layer is a
# tmpfs that vanishes with the namespace (dpkg's database, /etc, /usr and /var included).
# And the test refuses to start at all where muxflow is installed (by dpkg, rpm or by
# hand), rather than work next to a real installation.
# Needs root (namespaces, overlayfs, chroot; CI runs make test as root).
set -euo pipefail

ROOT=${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
T=$BUILD/packaging-test
V1=0.0.1~pkgtest1
V2=0.0.1~pkgtest2
checks=${CHECKS:-0}

fail() {
	echo "packaging test: FAIL: $*" >&2
	exit 1
}
start=$((SECONDS - ${ELAPSED:-0}))
ok() {
	checks=$((checks + 1))
	echo "ok $checks - $* [$((SECONDS - start))s]"
}

expect_same() { # name want got
	if ! diff -u "$2" "$3" >"$T/diff.out"; then
		cat "$T/diff.out" >&2
		fail "$1 differs from what is expected (- expected, + got)"
	fi
}

# installed_muxflow prints how muxflow is installed on this machine, if it is.
installed_muxflow() {
	local st
	st=$(dpkg-query -W -f='${Status}' muxflow 2>/dev/null || true)
	case $st in "" | "unknown ok not-installed") ;; *) echo "dpkg: muxflow is '$st'" ;; esac
	if command -v rpm >/dev/null 2>&1 && rpm -q muxflow >/dev/null 2>&1; then
		echo "rpm: $(rpm -q muxflow)"
	fi
	local f
	for f in /usr/bin/muxd /usr/bin/muxflow-runtime /usr/lib/muxflow/libxcuda.so; do
		[ ! -e "$f" ] || echo "$f exists"
	done
	return 0
}
refuse_if_installed() {
	local how
	how=$(installed_muxflow)
	[ -z "$how" ] || fail "muxflow is installed on this machine ($(echo "$how" | paste -sd';' | sed 's/;/; /g')): the package test refuses to run next to a real installation (it would need to install, upgrade and purge muxflow). Run it on a machine without muxflow."
}

case ${1:-} in
--check-installed) # the refusal alone (the test checks it with a stand-in dpkg-query)
	refuse_if_installed
	exit 0
	;;
--inside) # the installing part, in the throwaway root (see below)
	inside=yes
	;;
"") inside=no ;;
*) fail "unknown argument '$1' (test.sh takes none)" ;;
esac

if [ "$inside" = no ]; then

[ "$(id -u)" -eq 0 ] || fail "must run as root: it installs the .deb with dpkg -i in a throwaway root of its own (CI runs make test as root)"
for c in dpkg dpkg-deb dpkg-query lintian rpm systemd-analyze unshare chroot mount strip objdump gzip man; do
	command -v "$c" >/dev/null 2>&1 || fail "$c is not installed; run tests/deps.sh as root"
done
refuse_if_installed
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
grep -qw overlay /proc/filesystems || fail "the kernel has no overlayfs: the throwaway root the install checks run in needs it"

rm -rf "$T"
mkdir -p "$T"
trap 'rc=$?; [ $rc -eq 0 ] || echo "packaging test: work files kept in $T" >&2; exit $rc' EXIT

# --- Build two versions ---------------------------------------------------------------

GO=${GO:-go}
DEBARCH=$("$GO" env GOARCH)
case $DEBARCH in
amd64) RPMARCH=x86_64 ;;
arm64) RPMARCH=aarch64 ;;
*) RPMARCH=$DEBARCH ;;
esac
for v in 1 2; do
	ver=$V1
	[ "$v" = 2 ] && ver=$V2
	if ! STAGE="$T/stage$v" PACKAGERS="deb rpm" make -s -C "$ROOT/packaging" package \
		PKG_VERSION="$ver" DIST="$T/v$v" BUILD="$BUILD" >"$T/build$v.log" 2>&1; then
		cat "$T/build$v.log" >&2
		fail "make package (version $ver) failed"
	fi
done
DEB1=$T/v1/muxflow_${V1}-1_${DEBARCH}.deb
DEB2=$T/v2/muxflow_${V2}-1_${DEBARCH}.deb
RPM1=$T/v1/muxflow-${V1}-1.${RPMARCH}.rpm
RPM2=$T/v2/muxflow-${V2}-1.${RPMARCH}.rpm
GDEB1=$T/v1/muxflow-gpusim_${V1}-1_${DEBARCH}.deb
GDEB2=$T/v2/muxflow-gpusim_${V2}-1_${DEBARCH}.deb
GRPM2=$T/v2/muxflow-gpusim-${V2}-1.${RPMARCH}.rpm
for f in "$DEB1" "$DEB2" "$RPM1" "$RPM2" "$GDEB1" "$GDEB2" "$GRPM2"; do
	[ -f "$f" ] || fail "make package did not write $f (got: $(ls "$T/v1" "$T/v2" | tr '\n' ' '))"
done
ok "make package builds the debs and the rpms (muxflow, muxflow-gpusim) for versions $V1 and $V2"

# --- Static checks ----------------------------------------------------------------------

# Lintian: no errors (warnings are printed; overrides ship in the package with reasons).
# "running with root privileges" is lintian's note about being run as root.
if ! lintian --fail-on error "$DEB2" >"$T/lintian.out" 2>&1; then
	cat "$T/lintian.out" >&2
	fail "lintian reports errors on $(basename "$DEB2")"
fi
grep -q '^E:' "$T/lintian.out" && { cat "$T/lintian.out" >&2; fail "lintian printed errors"; }
sed -e '/running with root privileges/d' -e 's/^/  lintian: /' "$T/lintian.out"
ok "lintian: no errors ($(grep -c '^W:' "$T/lintian.out" || true) warnings)"

# The files each package must hold, with their modes; nothing more, nothing less.
expected_files() {
	cat <<'EOF'
-rw-r--r-- /etc/muxflow/policy.toml
-rwxr-xr-x /usr/bin/muxctl
-rwxr-xr-x /usr/bin/muxd
-rwxr-xr-x /usr/bin/muxflow-hook
-rwxr-xr-x /usr/bin/muxflow-runtime
-rwxr-xr-x /usr/bin/muxflow-wrapper
-rwxr-xr-x /usr/bin/muxmatch
-rw-r--r-- /usr/lib/muxflow/libxcuda.so
-rw-r--r-- /usr/lib/systemd/system/muxd.service
-rw-r--r-- /usr/lib/systemd/system/muxd.socket
-rw-r--r-- /usr/share/doc/muxflow/README.md
-rw-r--r-- /usr/share/doc/muxflow/errors.md
-rw-r--r-- /usr/share/doc/muxflow/install.md
-rw-r--r-- /usr/share/doc/muxflow/kubernetes.md
-rw-r--r-- /usr/share/doc/muxflow/try-without-a-gpu.md
-rw-r--r-- /usr/share/man/man1/muxctl.1.gz
-rw-r--r-- /usr/share/man/man1/muxmatch.1.gz
-rw-r--r-- /usr/share/man/man8/muxd.8.gz
-rw-r--r-- /usr/share/man/man8/muxflow-hook.8.gz
-rw-r--r-- /usr/share/man/man8/muxflow-runtime.8.gz
EOF
	# kubernetes.md's example manifests, whichever there are.
	for f in "$ROOT"/docs/examples/*.yaml; do echo "-rw-r--r-- /usr/share/doc/muxflow/examples/$(basename "$f")"; done
	case $1 in
	deb)
		cat <<'EOF'
-rw-r--r-- /usr/share/doc/muxflow/changelog.Debian.gz
-rw-r--r-- /usr/share/doc/muxflow/copyright
-rw-r--r-- /usr/share/doc/muxflow/third-party-notices.txt.gz
-rw-r--r-- /usr/share/lintian/overrides/muxflow
EOF
		;;
	rpm)
		cat <<'EOF'
-rw-r--r-- /usr/share/licenses/muxflow/LICENSE
-rw-r--r-- /usr/share/licenses/muxflow/third-party-notices.txt.gz
drwxr-xr-x /etc/muxflow
drwxr-xr-x /usr/lib/muxflow
drwxr-xr-x /usr/share/doc/muxflow
drwxr-xr-x /usr/share/doc/muxflow/examples
drwxr-xr-x /usr/share/licenses/muxflow
EOF
		;;
	esac
}

expected_files deb | sort -k2 >"$T/want-deb"
# Directories are dpkg's business (it lists every parent); they must all be root 0755.
dpkg-deb -c "$DEB2" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $1, $6 }' | sort -k2 >"$T/got-deb"
expect_same "dpkg-deb -c (files)" "$T/want-deb" "$T/got-deb"
bad_dirs=$(dpkg-deb -c "$DEB2" | awk '$1 ~ /^d/ && ($1 != "drwxr-xr-x" || $2 != "root/root")')
[ -z "$bad_dirs" ] || fail "directories in the deb that are not root:root 0755: $bad_dirs"
bad_owner=$(dpkg-deb -c "$DEB2" | awk '$2 != "root/root"')
[ -z "$bad_owner" ] || fail "files in the deb not owned by root: $bad_owner"
ok "dpkg-deb -c lists exactly the expected files and modes, all root-owned"

expected_files rpm | sort -k2 >"$T/want-rpm"
rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$RPM2" 2>/dev/null | sort -k2 >"$T/got-rpm"
expect_same "rpm -qp file list" "$T/want-rpm" "$T/got-rpm"
rpm -qpl "$RPM2" 2>/dev/null | sort >"$T/got-rpm-l"
awk '{print $2}' "$T/want-rpm" | sort >"$T/want-rpm-l"
expect_same "rpm -qpl" "$T/want-rpm-l" "$T/got-rpm-l"
owners=$(rpm -qp --qf '[%{FILEUSERNAME}:%{FILEGROUPNAME}\n]' "$RPM2" 2>/dev/null | sort -u)
[ "$owners" = "root:root" ] || fail "rpm files not all owned by root:root: $owners"
ok "rpm -qpl lists exactly the expected files and modes, all root-owned"

# muxflow-gpusim: exactly its files, depending on the muxflow of the same version.
expected_gpusim() {
	cat <<'EOF'
-rw-r--r-- /etc/default/muxflow-gpusim
-rwxr-xr-x /usr/bin/gpusimctl
-rwxr-xr-x /usr/bin/gpusimd
-rwxr-xr-x /usr/bin/muxflow-gpusim
-rwxr-xr-x /usr/lib/muxflow-gpusim/bin/infer
-rwxr-xr-x /usr/lib/muxflow-gpusim/bin/nvidia-cuda-mps-control
-rwxr-xr-x /usr/lib/muxflow-gpusim/bin/train
-rw-r--r-- /usr/lib/muxflow-gpusim/lib/libcuda.so.1
-rw-r--r-- /usr/lib/systemd/system/gpusimd.service
-rw-r--r-- /usr/lib/systemd/system/muxd.service.d/muxflow-gpusim.conf
EOF
	case $1 in
	deb)
		cat <<'EOF'
-rw-r--r-- /usr/share/doc/muxflow-gpusim/changelog.Debian.gz
-rw-r--r-- /usr/share/doc/muxflow-gpusim/copyright
-rw-r--r-- /usr/share/lintian/overrides/muxflow-gpusim
EOF
		;;
	rpm)
		cat <<'EOF'
-rw-r--r-- /usr/share/licenses/muxflow-gpusim/LICENSE
drwxr-xr-x /usr/lib/muxflow-gpusim
drwxr-xr-x /usr/lib/muxflow-gpusim/bin
drwxr-xr-x /usr/lib/muxflow-gpusim/lib
drwxr-xr-x /usr/lib/systemd/system/muxd.service.d
drwxr-xr-x /usr/share/doc/muxflow-gpusim
drwxr-xr-x /usr/share/licenses/muxflow-gpusim
EOF
		;;
	esac
}
expected_gpusim deb | sort -k2 >"$T/want-gpusim-deb"
dpkg-deb -c "$GDEB2" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $1, $6 }' | sort -k2 >"$T/got-gpusim-deb"
expect_same "dpkg-deb -c muxflow-gpusim (files)" "$T/want-gpusim-deb" "$T/got-gpusim-deb"
expected_gpusim rpm | sort -k2 >"$T/want-gpusim-rpm"
rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$GRPM2" 2>/dev/null | sort -k2 >"$T/got-gpusim-rpm"
expect_same "rpm -qp muxflow-gpusim file list" "$T/want-gpusim-rpm" "$T/got-gpusim-rpm"
dpkg-deb -f "$GDEB2" Depends | grep -q "muxflow (= $V2-1)" || fail "muxflow-gpusim Depends is '$(dpkg-deb -f "$GDEB2" Depends)', want muxflow (= $V2-1)"
rpm -qp --requires "$GRPM2" 2>/dev/null | grep -q "^muxflow = $V2-1" || fail "the muxflow-gpusim rpm does not require muxflow = $V2-1"
if ! lintian --fail-on error "$GDEB2" >"$T/lintian-gpusim.out" 2>&1; then
	cat "$T/lintian-gpusim.out" >&2
	fail "lintian reports errors on $(basename "$GDEB2")"
fi
for s in "$ROOT"/packaging/scripts/gpusim-deb/* "$ROOT"/packaging/scripts/gpusim-rpm/* "$ROOT"/packaging/gpusim/muxflow-gpusim; do
	sh -n "$s" || fail "$s is not valid sh"
done
ok "muxflow-gpusim: exactly its files (deb and rpm), depends on muxflow $V2-1, lintian without errors ($(grep -c '^W:' "$T/lintian-gpusim.out" || true) warnings)"

# The policy is a configuration file the package manager keeps when it was changed.
conffiles=$(dpkg-deb -f "$DEB2" Package >/dev/null && dpkg-deb --ctrl-tarfile "$DEB2" | tar -xO ./conffiles)
[ "$conffiles" = "/etc/muxflow/policy.toml" ] || fail "deb conffiles is '$conffiles', want /etc/muxflow/policy.toml"
flags=$(rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$RPM2" 2>/dev/null | awk '$2 == "/etc/muxflow/policy.toml" {print $1}')
[ "$flags" = "cn" ] || fail "rpm flags of /etc/muxflow/policy.toml are '$flags', want cn (config, noreplace)"
ok "policy.toml is a conffile (deb) and %config(noreplace) (rpm)"

[ "$(dpkg-deb -f "$DEB2" Version)" = "$V2-1" ] || fail "deb version is $(dpkg-deb -f "$DEB2" Version), want $V2-1"
[ "$(rpm -qp --qf '%{VERSION}-%{RELEASE}' "$RPM2" 2>/dev/null)" = "$V2-1" ] || fail "rpm version is not $V2-1"
dpkg-deb -f "$DEB2" Depends | grep -Eq '^libc6 \(>= 2\.[0-9]+\)$' || fail "deb Depends is '$(dpkg-deb -f "$DEB2" Depends)', want libc6 (>= 2.N)"
dpkg --compare-versions "$V1-1" lt "$V2-1" || fail "dpkg orders $V1 after $V2"
ok "versions, ordering and the libc dependency are right"

# Maintainer scripts: shell syntax, and the rpm ones are attached to the right slots.
for s in "$ROOT"/packaging/scripts/deb/* "$ROOT"/packaging/scripts/rpm/*; do
	sh -n "$s" || fail "$s is not valid sh"
done
rpm -qp --scripts "$RPM2" 2>/dev/null >"$T/rpm-scripts"
for slot in 'postinstall scriptlet' 'preuninstall scriptlet' 'postuninstall scriptlet'; do
	grep -q "^$slot" "$T/rpm-scripts" || fail "the rpm has no $slot"
done
grep -q 'muxctl runtime configure' "$T/rpm-scripts" || fail "the rpm's %post does not print the runtime configuration step"
if grep -Eq '(sed|tee|>+) *[^ ]*(containerd/config\.toml|docker/daemon\.json)' "$T/rpm-scripts" "$ROOT"/packaging/scripts/deb/*; then
	fail "a maintainer script writes containerd or Docker configuration"
fi
ok "maintainer scripts parse, sit in the right rpm slots and never write engine configuration"

# Contents: the shipped policy is the embedded default, the units are systemd/'s, the
# programs run, are stripped and report their version.
mkdir -p "$T/x"
dpkg-deb -x "$DEB2" "$T/x"
if ! cmp -s "$T/x/etc/muxflow/policy.toml" "$ROOT/policy/default.toml"; then
	hint=
	[ "$ROOT/policy/default.toml" -nt "$DEB2" ] && hint=" (policy/default.toml changed after the package was built: run again)"
	fail "the shipped policy.toml is not policy/default.toml$hint"
fi
cmp -s "$T/x/usr/lib/systemd/system/muxd.service" "$ROOT/systemd/muxd.service" || fail "the shipped muxd.service is not systemd/muxd.service"
cmp -s "$T/x/usr/lib/systemd/system/muxd.socket" "$ROOT/systemd/muxd.socket" || fail "the shipped muxd.socket is not systemd/muxd.socket"
for b in muxd muxctl muxflow-runtime muxflow-hook muxflow-wrapper muxmatch; do
	if [ "$(head -c 4 "$T/x/usr/bin/$b" | od -An -c | tr -d ' ')" = '177ELF' ] &&
		objdump -h "$T/x/usr/bin/$b" | grep -q '\.debug_'; then
		fail "/usr/bin/$b is not stripped"
	fi
done
for m in man8/muxd.8 man1/muxctl.1 man1/muxmatch.1 man8/muxflow-runtime.8 man8/muxflow-hook.8; do
	w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$T/x/usr/share/man/$m.gz" 2>&1 >/dev/null)
	[ -z "$w" ] || fail "man page $m has roff warnings: $w"
done
zcat "$T/x/usr/share/man/man8/muxd.8.gz" | grep -q -- '-policy' || fail "muxd.8 does not carry muxd --help (no -policy flag)"
# Every Go module linked into the programs has its license text in the notices.
zcat "$T/x/usr/share/doc/muxflow/third-party-notices.txt.gz" >"$T/notices"
grep -q '^==> Go standard library' "$T/notices" || fail "third-party notices lack the Go standard library"
for b in muxd muxctl muxflow-wrapper muxmatch; do
	"$GO" version -m "$BUILD/bin/$b" 2>/dev/null | awk -F'\t' '$2 == "dep" {print $3}'
done | sort -u >"$T/modules"
[ -s "$T/modules" ] || fail "go version -m found no modules in the programs"
while read -r mod; do
	grep -q "^==> $mod " "$T/notices" || fail "third-party notices lack $mod"
done <"$T/modules"
! grep -q '^(no license file found' "$T/notices" || fail "modules without a license text: $(grep -B1 '^(no license file found' "$T/notices" | grep '^==>' | tr '\n' ' ')"
ok "payload: default policy, units, stripped programs, man pages without roff warnings, notices for all $(wc -l <"$T/modules") Go modules"


# --- The refusal to run next to an installed muxflow ----------------------------------

mkdir -p "$T/fakebin"
printf '#!/bin/sh\necho "install ok installed"\n' >"$T/fakebin/dpkg-query"
chmod 0755 "$T/fakebin/dpkg-query"
if out=$(PATH="$T/fakebin:$PATH" bash "$0" --check-installed 2>&1); then
	fail "test.sh --check-installed accepted a machine where dpkg reports muxflow installed"
fi
case $out in *"refuses to run next to a real installation"*"install ok installed"* | *"install ok installed"*"refuses to run next to a real installation"*) ;;
*) fail "the refusal does not say why: $out" ;; esac
bash "$0" --check-installed >/dev/null 2>&1 || fail "test.sh --check-installed refuses this machine, which has no muxflow"
ok "refuses to run where muxflow is installed (checked with a stand-in dpkg-query)"

# --- Into the throwaway root -----------------------------------------------------------
# A private mount and pid namespace; R is an overlay of / (and of /usr, /var, /etc where
# they are mounts of their own) whose upper layers live on a tmpfs of the namespace; /run
# and /tmp are empty tmpfs there (no systemd as PID 1, no sockets of the host's daemons).
# $T is bind-mounted at its own path so that the packages come in and the logs come out.
# When the namespace's last process exits, every mount and write in it is gone.

# What this machine has at the paths the package uses, to compare after.
host_paths=(/etc/muxflow /var/lib/muxflow /var/log/muxflow /usr/lib/muxflow /usr/share/doc/muxflow
	/usr/bin/muxd /usr/bin/muxctl /usr/lib/systemd/system/muxd.service /usr/lib/systemd/system/muxd.socket
	/etc/systemd/system/multi-user.target.wants/muxd.service /var/lib/dpkg/status)
host_state() {
	local p
	for p in "${host_paths[@]}"; do
		if [ -e "$p" ] || [ -L "$p" ]; then
			find "$p" -printf '%M %u:%g %s %T@ %p\n' 2>/dev/null | sort -k6
			[ ! -f "$p" ] || sha256sum "$p"
		else
			echo "absent $p"
		fi
	done
}
host_state >"$T/host.before"

R=$T/root
mkdir -p "$R"
cp "$0" "$T/test.sh"
export T R ROOT BUILD DEB1 DEB2 RPM1 RPM2 GDEB1 GDEB2
export CHECKS=$checks ELAPSED=$((SECONDS - start))
unshare --mount --pid --fork --propagation private bash -euo pipefail -c '
	U=$T/upper
	mkdir -p "$U"
	mount -t tmpfs -o mode=0700 muxflow-pkgtest "$U"
	layer() { # an overlay of $1 at $R$1 whose writes go to the tmpfs
		local n
		n=$(echo "$1" | tr / _)
		mkdir -p "$U/up$n" "$U/work$n"
		mount -t overlay muxflow-pkgtest -o "lowerdir=$1,upperdir=$U/up$n,workdir=$U/work$n" "$R${1%/}"
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
	mkdir -p "$R$T"
	mount --bind "$T" "$R$T"
	exec chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		LANG=C.UTF-8 T="$T" ROOT="$ROOT" BUILD="$BUILD" DEB1="$DEB1" DEB2="$DEB2" RPM1="$RPM1" RPM2="$RPM2" \
		GDEB1="$GDEB1" GDEB2="$GDEB2" \
		CHECKS="$CHECKS" ELAPSED="$ELAPSED" bash "$T/test.sh" --inside
'
# Nothing of the installation may have reached this machine.
how=$(installed_muxflow)
[ -z "$how" ] || fail "after the throwaway root was gone, muxflow shows on this machine: $how"
host_state >"$T/host.after"
expect_same "this machine's muxflow paths and dpkg database after the test (the throwaway root leaked)" "$T/host.before" "$T/host.after"
echo "packaging test: this machine was not touched (dpkg database, muxflow paths and unit links as before)"
exit 0
fi

# --- Inside the throwaway root ----------------------------------------------------------

# Only ever here: --inside run on the machine itself would install there.
rootfs=$(awk '$5 == "/" { for (i = 7; i < NF; i++) if ($i == "-") print $(i + 1), $(i + 2) }' /proc/self/mountinfo | tail -1)
[ "$rootfs" = "overlay muxflow-pkgtest" ] ||
	fail "test.sh --inside runs only in the throwaway root test.sh makes (/ here is '$rootfs', not its overlay)"
# The overlay's view of / may hold muxflow files that are not a package (a hand-made
# /etc/muxflow, left by a developer): clear them here, where it changes nothing outside.
rm -rf /etc/muxflow /var/lib/muxflow /var/log/muxflow

# --- The deb in the throwaway root (no systemd as PID 1) -----------------------------

[ ! -d /run/systemd/system ] || fail "/run/systemd/system exists in the throwaway root: the maintainer scripts would start muxd for real"
engine_sums() {
	for f in /etc/containerd/config.toml /etc/docker/daemon.json; do
		if [ -e "$f" ]; then sha256sum "$f"; else echo "absent $f"; fi
	done
}
engine_sums >"$T/engine.before"
dpkg -i "$DEB1" >"$T/install.out" 2>&1 || { cat "$T/install.out" >&2; fail "dpkg -i $(basename "$DEB1") failed"; }
grep -q 'muxctl runtime configure --runtime=containerd' "$T/install.out" ||
	fail "installing did not print the next step (muxctl runtime configure); got: $(cat "$T/install.out")"
tr '\n' ' ' <"$T/install.out" | grep -q 'muxd is enabled for.*is NOT running now' && grep -q 'nohup muxd --policy /etc/muxflow/policy.toml' "$T/install.out" ||
	fail "installing without systemd did not say that muxd is not running and how to start it; got: $(cat "$T/install.out")"
[ "$(dpkg-query -W -f='${Status} ${Version}' muxflow)" = "install ok installed $V1-1" ] || fail "dpkg does not record muxflow $V1-1 as installed"
# Every expected file is in place with its mode, except what this machine's dpkg is told
# not to install (slim images exclude /usr/share/man and /usr/share/doc with path-exclude).
excluded() {
	local glob
	while read -r glob; do
		# shellcheck disable=SC2053 # the dpkg pattern is a glob on purpose
		[[ $1 == $glob ]] && return 0
	done < <(cat /etc/dpkg/dpkg.cfg.d/* 2>/dev/null | sed -n 's/^path-exclude[= ]//p')
	return 1
}
man_check=yes
while read -r mode path; do
	if [ ! -e "$path" ] && excluded "$path"; then
		echo "packaging test: note: $path not installed: this machine's dpkg excludes it (path-exclude)"
		case $path in /usr/share/man/*) man_check=no ;; esac
		continue
	fi
	[ -e "$path" ] || fail "$path is missing after dpkg -i"
	got=$(stat -c '%A %U:%G' "$path")
	[ "$got" = "$mode root:root" ] || fail "$path is '$got', want '$mode root:root'"
done <"$T/want-deb"
dpkg-deb --fsys-tarfile "$DEB1" | tar -xO ./etc/muxflow/policy.toml >"$T/policy1.toml"
cmp -s /etc/muxflow/policy.toml "$T/policy1.toml" || fail "the installed policy is not the packaged default"
ok "dpkg -i installs every file with its mode and prints the next step"

out=$(/usr/bin/muxd --version 2>&1) || fail "muxd --version failed: $out"
case $out in "muxd "?*) ;; *) fail "muxd --version printed '$out', want 'muxd VERSION'" ;; esac
out=$(/usr/bin/muxctl policy check /etc/muxflow/policy.toml 2>&1) || fail "muxctl policy check /etc/muxflow/policy.toml failed: $out"
printf '[monitor]\nperiod = "soon"\n' >"$T/bad.toml"
if /usr/bin/muxctl policy check "$T/bad.toml" >/dev/null 2>&1; then
	fail "muxctl policy check accepts an invalid policy, so its success above proves nothing"
fi
# The printed next step is a real command of the installed muxctl (tried on a scratch
# file), and installing left the engines' real configuration untouched.
printf 'version = 2\n' >"$T/containerd.toml"
out=$(/usr/bin/muxctl runtime configure --runtime=containerd --config "$T/containerd.toml" --dry-run 2>&1) ||
	fail "the next step printed on install fails: muxctl runtime configure: $out"
case $out in *"BinaryName = '/usr/bin/muxflow-runtime'"*) ;; *) fail "muxctl runtime configure --dry-run does not name /usr/bin/muxflow-runtime: $out" ;; esac
engine_sums >"$T/engine.after"
expect_same "containerd/Docker configuration after dpkg -i" "$T/engine.before" "$T/engine.after"
ok "installed muxd --version ('$(/usr/bin/muxd --version 2>&1)'), muxctl policy check and runtime configure work; engine configs untouched"

# Enabled for the next boot even without a running systemd; the socket stays optional.
link=/etc/systemd/system/multi-user.target.wants/muxd.service
# The link may name /lib/systemd/system (deb-systemd-helper's path; the same file on
# merged-/usr systems).
[ -L "$link" ] && [ "$(readlink -f "$link")" = "$(readlink -f /usr/lib/systemd/system/muxd.service)" ] ||
	fail "muxd.service is not enabled ($link missing or pointing elsewhere: $(readlink "$link" 2>&1))"
[ ! -e /etc/systemd/system/sockets.target.wants/muxd.socket ] || fail "muxd.socket was enabled; it is optional"
if ! systemd-analyze verify --man="$man_check" /usr/lib/systemd/system/muxd.service /usr/lib/systemd/system/muxd.socket >"$T/verify.out" 2>&1 ||
	[ -s "$T/verify.out" ]; then
	cat "$T/verify.out" >&2
	fail "systemd-analyze verify rejects or warns about the installed units"
fi
ok "muxd.service enabled, muxd.socket not; systemd-analyze verify accepts both units"

# Upgrade: the operator's policy survives, nothing is left beside it.
sed -i 's/^log_level = "info"/log_level = "debug"/' /etc/muxflow/policy.toml
grep -q '^log_level = "debug"' /etc/muxflow/policy.toml || fail "could not edit the installed policy (log_level line not found)"
mkdir -p /var/lib/muxflow/containers /var/log/muxflow/mps
echo '{}' >/var/lib/muxflow/containers/pkgtest.json
echo 'log' >/var/log/muxflow/mps/control.log
dpkg -i "$DEB2" >"$T/upgrade.out" 2>&1 </dev/null || { cat "$T/upgrade.out" >&2; fail "upgrading with dpkg -i $(basename "$DEB2") failed"; }
[ "$(dpkg-query -W -f='${Status} ${Version}' muxflow)" = "install ok installed $V2-1" ] || fail "dpkg does not record muxflow $V2-1 after the upgrade"
grep -q '^log_level = "debug"' /etc/muxflow/policy.toml || fail "the upgrade replaced the modified /etc/muxflow/policy.toml"
ls /etc/muxflow/policy.toml.dpkg-* >/dev/null 2>&1 && fail "the upgrade left $(ls /etc/muxflow/policy.toml.dpkg-*)"
/usr/bin/muxctl policy check /etc/muxflow/policy.toml >/dev/null 2>&1 || fail "the kept policy no longer passes muxctl policy check"
! grep -q 'muxctl runtime configure' "$T/upgrade.out" || fail "the upgrade printed the first-install next step again"
[ -L "$link" ] || fail "the upgrade disabled muxd.service"
ok "upgrade $V1 -> $V2 keeps the modified policy and the enablement"

# Removal stops a muxd started by hand, and quits the MPS control daemon named by path in
# the policy's [mps] control, but never while a client uses it. The stand-in control
# logs its commands; "clients" in its pipe directory lists the clients of server 4242.
mkdir -p /opt/fakemps /run/fakemps
cat >/opt/fakemps/ctl <<'EOS'
#!/bin/sh
read -r line
echo "$line" >>/run/fakemps/commands
case "$line" in
get_server_list) echo 4242 ;;
"get_client_list 4242") cat /run/fakemps/clients 2>/dev/null ;;
esac
EOS
chmod 0755 /opt/fakemps/ctl
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/run/fakemps/control")'
sed -i -e 's|^control = "nvidia-cuda-mps-control"|control = "/opt/fakemps/ctl"|' -e 's|^pipe_dir = "/run/muxflow/mps"|pipe_dir = "/run/fakemps"|' /etc/muxflow/policy.toml
grep -q '^control = "/opt/fakemps/ctl"' /etc/muxflow/policy.toml || fail "could not point the policy's [mps] control at the stand-in"
echo 777 >/run/fakemps/clients
out=$(sh /var/lib/dpkg/info/muxflow.prerm remove 2>&1) || fail "prerm remove failed: $out"
! grep -qx quit /run/fakemps/commands || fail "prerm quit the MPS control daemon while a client (777) used it"
case $out in *"leaving the MPS control daemon"*777*) ;; *) fail "prerm did not say why it left MPS running: $out" ;; esac
: >/run/fakemps/clients
: >/run/fakemps/commands
mkdir -p /run/muxflow
/usr/bin/muxd --policy /etc/muxflow/policy.toml --gpus none >"$T/handmuxd.log" 2>&1 &
hand=$!
for _ in $(seq 100); do /usr/bin/muxctl status >/dev/null 2>&1 && break; sleep 0.1; done
/usr/bin/muxctl status >/dev/null 2>&1 || fail "a hand-started muxd did not come up: $(cat "$T/handmuxd.log")"

dpkg -r muxflow >"$T/remove.out" 2>&1 || { cat "$T/remove.out" >&2; fail "dpkg -r muxflow failed"; }
grep -qx quit /run/fakemps/commands || fail "dpkg -r did not quit the idle MPS control daemon named by path in [mps] control; commands: $(cat /run/fakemps/commands)"
st=$(sed 's/.*) //' "/proc/$hand/stat" 2>/dev/null | cut -d' ' -f1) || st=
[ -z "$st" ] || [ "$st" = Z ] || fail "dpkg -r left the hand-started muxd (pid $hand) running (state $st)"
grep -q "stopping muxd started outside systemd (pid $hand)" "$T/remove.out" || fail "dpkg -r did not say it stopped the hand-started muxd: $(cat "$T/remove.out")"
wait "$hand" 2>/dev/null || true
[ "$(dpkg-query -W -f='${Status}' muxflow)" = "deinstall ok config-files" ] || fail "after dpkg -r, status is $(dpkg-query -W -f='${Status}' muxflow)"
while read -r mode path; do
	[ "$path" = /etc/muxflow/policy.toml ] && continue
	[ ! -e "$path" ] || fail "$path is still there after dpkg -r"
done <"$T/want-deb"
[ ! -e /usr/lib/muxflow ] || fail "/usr/lib/muxflow is still there after dpkg -r"
grep -q '^log_level = "debug"' /etc/muxflow/policy.toml || fail "dpkg -r did not keep the modified policy"
[ -f /var/lib/muxflow/containers/pkgtest.json ] || fail "dpkg -r removed muxd's state; only purge may"
ok "dpkg -r stops a hand-started muxd, quits MPS ([mps] control by path) only without clients, removes the programs and keeps the policy and state"

# Purge: nothing of muxflow left, including systemd links and helper records.
dpkg -P muxflow >"$T/purge.out" 2>&1 || { cat "$T/purge.out" >&2; fail "dpkg -P muxflow failed"; }
dpkg-query -W muxflow >/dev/null 2>&1 && [ "$(dpkg-query -W -f='${Status}' muxflow)" != "unknown ok not-installed" ] &&
	fail "dpkg still knows muxflow after purge: $(dpkg-query -W -f='${Status}' muxflow)"
for p in /etc/muxflow /var/lib/muxflow /var/log/muxflow /usr/lib/muxflow /usr/share/doc/muxflow \
	/usr/lib/systemd/system/muxd.service /usr/lib/systemd/system/muxd.socket; do
	[ ! -e "$p" ] || fail "$p is still there after dpkg -P"
done
left=$(find /etc/systemd /var/lib/systemd/deb-systemd-helper-enabled /var/lib/systemd/deb-systemd-helper-masked \
	-name 'muxd.*' 2>/dev/null || true)
[ -z "$left" ] || fail "systemd links or deb-systemd-helper records left after purge: $left"
engine_sums >"$T/engine.after"
expect_same "containerd/Docker configuration after upgrade, remove and purge" "$T/engine.before" "$T/engine.after"
ok "dpkg -P leaves no file, directory, unit link or helper record"

# muxflow-gpusim with muxflow: a node on simulated GPUs, without systemd as PID 1.
dpkg -i "$DEB2" "$GDEB2" >"$T/gpusim-install.out" 2>&1 || { cat "$T/gpusim-install.out" >&2; fail "dpkg -i muxflow muxflow-gpusim failed"; }
grep -q 'muxflow-gpusim start' "$T/gpusim-install.out" || fail "installing muxflow-gpusim without systemd did not say how to start it: $(cat "$T/gpusim-install.out")"
[ -L /etc/systemd/system/multi-user.target.wants/gpusimd.service ] || fail "gpusimd.service is not enabled"
if ! systemd-analyze verify --man=no /usr/lib/systemd/system/gpusimd.service /usr/lib/systemd/system/muxd.service >"$T/verify-gpusim.out" 2>&1 || [ -s "$T/verify-gpusim.out" ]; then
	cat "$T/verify-gpusim.out" >&2
	fail "systemd-analyze verify rejects or warns about gpusimd.service or muxd.service with its gpusim drop-in"
fi
out=$(/usr/bin/muxflow-gpusim start 2>&1) || fail "muxflow-gpusim start failed: $out; $(tail -20 /var/log/muxflow/*.log 2>/dev/null)"
st=$(/usr/bin/muxctl status 2>&1) || fail "muxctl status after muxflow-gpusim start: $st"
case $st in *"mps running"*"H100"*) ;; *) fail "muxd does not run on a simulated H100 with MPS: $st" ;; esac
/usr/bin/muxflow-gpusim rootfs "$T/gpusim-rootfs" >/dev/null || fail "muxflow-gpusim rootfs failed"
/usr/bin/muxflow-gpusim ctr-args | grep -q 'GPUSIM_SOCKET=/run/gpusim/gpusimd.sock' || fail "muxflow-gpusim ctr-args lacks GPUSIM_SOCKET"
# A workload runs on the simulated GPU through the packaged driver.
out=$(GPUSIM_SOCKET=/run/gpusim/gpusimd.sock LD_LIBRARY_PATH=/usr/lib/muxflow-gpusim/lib /usr/lib/muxflow-gpusim/bin/train --duration 1 2>&1) ||
	fail "train on the packaged fake driver failed: $out"
case $out in *it_per_s*) ;; *) fail "train printed no result: $out" ;; esac
dpkg -P muxflow-gpusim >"$T/gpusim-purge.out" 2>&1 || { cat "$T/gpusim-purge.out" >&2; fail "dpkg -P muxflow-gpusim failed"; }
! /usr/bin/muxctl status >/dev/null 2>&1 || fail "removing muxflow-gpusim left its muxd running"
for p in /usr/bin/gpusimd /usr/lib/muxflow-gpusim /usr/lib/systemd/system/muxd.service.d /etc/default/muxflow-gpusim; do
	[ ! -e "$p" ] || fail "$p is still there after dpkg -P muxflow-gpusim"
done
dpkg -P muxflow >/dev/null 2>&1 || fail "dpkg -P muxflow after muxflow-gpusim failed"
ok "muxflow-gpusim: installs beside muxflow, says how to start without systemd, muxflow-gpusim start gives muxd a simulated H100 with MPS, purge stops it and leaves nothing"

# --- rpm: upgrade keeps the policy, erase removes the rest (scratch root) ----------------

R=$T/rpmroot
rpmx() { rpm --root "$R" --dbpath /rpmdb "$@" 2> >(grep -v -e 'Alien' -e 'assuming you know' -e 'saved as .*rpmsave' >&2); }
mkdir -p "$R"
rpmx -i --nodeps --noscripts "$RPM1" || fail "rpm -i $(basename "$RPM1") into a scratch root failed"
[ -x "$R/usr/bin/muxd" ] && [ -f "$R/etc/muxflow/policy.toml" ] || fail "rpm -i did not install the files"
echo '# changed by the operator' >>"$R/etc/muxflow/policy.toml"
rpmx -U --nodeps --noscripts "$RPM2" || fail "rpm -U to $(basename "$RPM2") failed"
[ "$(rpmx -q --qf '%{VERSION}' muxflow)" = "$V2" ] || fail "rpm does not record $V2 after the upgrade"
grep -q '^# changed by the operator' "$R/etc/muxflow/policy.toml" || fail "rpm -U replaced the modified policy"
[ ! -e "$R/etc/muxflow/policy.toml.rpmnew" ] || fail "rpm -U wrote policy.toml.rpmnew although the packaged policy did not change"
rpmx -e --nodeps --noscripts muxflow || fail "rpm -e muxflow failed"
left=$(cd "$R" && find . -path ./rpmdb -prune -o -type f -print)
[ "$left" = "./etc/muxflow/policy.toml.rpmsave" ] || fail "after rpm -e, want only the saved modified policy left; got: $left"
ok "rpm: upgrade keeps the modified policy, erase removes everything else (.rpmsave kept)"

# --- Maintainer scripts with a stand-in systemd ------------------------------------------
# In a private mount namespace, /run/systemd/system exists (as when systemd is PID 1) and
# systemctl and deb-systemd-invoke are stubs that log their arguments: this checks what the
# scripts ask systemd to do on install, upgrade, remove and purge.

# /run/systemd itself is only a mount point here; the tmpfs over it is private.
mkdir -p "$T/stubs" /run/systemd
for c in systemctl deb-systemd-invoke; do
	printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$c" "$T/calls" >"$T/stubs/$c"
	chmod 0755 "$T/stubs/$c"
done
run_ns() { # phase command...
	: >"$T/calls"
	unshare -m --propagation private sh -c '
		mount -t tmpfs -o mode=0755 tmpfs /run/systemd && mkdir /run/systemd/system && exec "$@"
	' sh env PATH="$T/stubs:$PATH" "$@" >"$T/ns.out" 2>&1 </dev/null ||
		{ cat "$T/ns.out" >&2; fail "with a stand-in systemd: $* failed"; }
}
want_call() { # phase pattern
	grep -qx -- "$2" "$T/calls" || fail "$1: the scripts did not call '$2'; calls were: $(tr '\n' ';' <"$T/calls")"
}
no_call() {
	! grep -qx -- "$2" "$T/calls" || fail "$1: the scripts called '$2'; calls were: $(tr '\n' ';' <"$T/calls")"
}
run_ns dpkg -i "$DEB1"
want_call install 'deb-systemd-invoke start muxd.service'
want_call install 'systemctl --system daemon-reload'
run_ns dpkg -i "$DEB2"
want_call upgrade 'deb-systemd-invoke restart muxd.service'
no_call upgrade 'deb-systemd-invoke stop.*'
run_ns dpkg -r muxflow
want_call remove 'deb-systemd-invoke stop muxd.socket muxd.service'
no_call remove 'deb-systemd-invoke \(start\|restart\).*'
run_ns dpkg -P muxflow
want_call purge 'systemctl --system daemon-reload'
left=$(find /etc/systemd /var/lib/systemd/deb-systemd-helper-enabled /var/lib/systemd/deb-systemd-helper-masked \
	-name 'muxd.*' 2>/dev/null || true)
[ -z "$left" ] || fail "with a stand-in systemd: links or records left after purge: $left"
ok "with systemd running: install starts, upgrade restarts, remove stops muxd, purge cleans up"

# The rpm scriptlets, run as rpm runs them ($1 counts the installed versions).
rpm -qp --qf '%{POSTIN}' "$RPM2" 2>/dev/null >"$T/rpm-post"
rpm -qp --qf '%{PREUN}' "$RPM2" 2>/dev/null >"$T/rpm-preun"
rpm -qp --qf '%{POSTUN}' "$RPM2" 2>/dev/null >"$T/rpm-postun"
run_ns sh "$T/rpm-post" 1
want_call "rpm install" 'systemctl --no-reload enable muxd.service'
want_call "rpm install" 'systemctl start muxd.service'
grep -q 'muxctl runtime configure' "$T/ns.out" || fail "rpm install: %post did not print the next step"
run_ns sh "$T/rpm-post" 2
want_call "rpm upgrade" 'systemctl try-restart muxd.service'
no_call "rpm upgrade" 'systemctl .*enable.*'
run_ns sh "$T/rpm-preun" 1
[ ! -s "$T/calls" ] || fail "rpm upgrade: %preun of the old version called systemd: $(cat "$T/calls")"
run_ns sh "$T/rpm-preun" 0
want_call "rpm erase" 'systemctl --no-reload disable --now muxd.socket muxd.service'
mkdir -p /var/lib/muxflow/containers
run_ns sh "$T/rpm-postun" 1
[ -d /var/lib/muxflow/containers ] || fail "rpm upgrade: %postun of the old version removed muxd's state"
run_ns sh "$T/rpm-postun" 0
[ ! -e /var/lib/muxflow ] || fail "rpm erase: %postun left /var/lib/muxflow"
want_call "rpm erase" 'systemctl daemon-reload'
ok "rpm scriptlets: install enables and starts, upgrade try-restarts, erase stops, disables and cleans up"

echo "packaging test: all $checks checks passed (installation checks in a throwaway root)"
