#!/bin/sh
# package.sh: builds the muxflow deb and rpm from what `make build` left in $BUILD.
# Called by `make package` (see Makefile for the variables; PACKAGERS="deb rpm" by
# default picks the formats); it stages the generated files
# (man pages, Debian changelog) in $BUILD/packaging and writes the packages to $DIST.
set -eu

: "${ROOT:?}" "${BUILD:?}" "${DIST:?}" "${VERSION:?}" "${ARCH:?}"
GO=${GO:-go}
STAGE=${STAGE:-$BUILD/packaging}

# dpkg and rpm must both accept and order the version; the release ("-1") is nfpm's.
case $VERSION in
[0-9]*) ;;
*) echo "package: version '$VERSION' must start with a digit" >&2; exit 1 ;;
esac
if ! printf '%s' "$VERSION" | grep -Eq '^[0-9][A-Za-z0-9.+~]*$'; then
	echo "package: version '$VERSION' may only hold letters, digits and . + ~" >&2
	exit 1
fi

# Everything the packages ship must exist: a package missing a program is worse than none.
missing=
for f in bin/muxd bin/muxctl bin/muxflow-runtime bin/muxflow-hook bin/muxflow-wrapper bin/muxmatch lib/libxcuda.so; do
	[ -f "$BUILD/$f" ] || missing="$missing $BUILD/$f"
done
for f in policy/default.toml systemd/muxd.service systemd/muxd.socket README.md docs/install.md docs/kubernetes.md docs/try-without-a-gpu.md docs/errors.md LICENSE; do
	[ -f "$ROOT/$f" ] || missing="$missing $ROOT/$f"
done
# muxflow-gpusim (simulated GPUs): gpusimd, gpusimctl, the fake MPS tool and driver, the
# workload programs; built by the same `make build` (gpusim/Makefile).
PACKAGES=${PACKAGES:-muxflow muxflow-gpusim}
case " $PACKAGES " in *" muxflow-gpusim "*)
	for f in bin/gpusimd gpusim/bin/gpusimctl gpusim/bin/nvidia-cuda-mps-control gpusim/bin/infer gpusim/bin/train gpusim/lib/libcuda.so.1; do
		[ -f "$BUILD/$f" ] || missing="$missing $BUILD/$f"
	done
	;;
esac
if [ -n "$missing" ]; then
	echo "package: cannot build the packages; missing:" >&2
	for f in $missing; do echo "  $f" >&2; done
	echo "package: run 'make build' at the top level (libxcuda.so comes from libxcuda/, muxmatch from matcher/, muxflow-runtime and muxflow-hook from hook/native/)." >&2
	exit 1
fi

rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/man" "$DIST"

# Ship stripped copies (Debian policy; a quarter of the size). Go keeps its own symbol
# table for stack traces, and --strip-unneeded keeps libxcuda's dynamic symbols, which
# is all LD_PRELOAD interposition needs.
for b in muxd muxctl muxflow-runtime muxflow-hook muxflow-wrapper muxmatch; do
	cp "$BUILD/bin/$b" "$STAGE/bin/$b"
done
cp "$BUILD/lib/libxcuda.so" "$STAGE/lib/libxcuda.so"
mkdir -p "$STAGE/gpusim"
case " $PACKAGES " in *" muxflow-gpusim "*)
	cp "$BUILD/bin/gpusimd" "$BUILD/gpusim/bin/gpusimctl" "$BUILD/gpusim/bin/nvidia-cuda-mps-control" \
		"$BUILD/gpusim/bin/infer" "$BUILD/gpusim/bin/train" "$BUILD/gpusim/lib/libcuda.so.1" "$STAGE/gpusim/"
	;;
esac
for f in "$STAGE"/bin/* "$STAGE/lib/libxcuda.so" "$STAGE"/gpusim/*; do
	[ -f "$f" ] || continue
	# Only ELF files are stripped (a program may be a script during development).
	if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ]; then
		strip --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
	fi
done

reported=$("$STAGE/bin/muxd" --version 2>/dev/null | sed -n 's/^muxd //p' || true)
if [ "$reported" != "$VERSION" ]; then
	echo "package: note: package version $VERSION differs from the version the programs report (muxd --version: ${reported:-nothing}); build with the top-level make, or leave PKG_VERSION unset" >&2
fi

# Man pages: muxd, muxctl and muxmatch from their own --help; the runtime prints runc's
# help and the hook has none, so theirs are written by hand.
sh "$ROOT/packaging/genman.sh" "$STAGE/bin/muxd" 8 "the muxflow node daemon" "$STAGE/man/muxd.8" node
sh "$ROOT/packaging/genman.sh" "$STAGE/bin/muxctl" 1 "operate a muxflow node" "$STAGE/man/muxctl.1" node
sh "$ROOT/packaging/genman.sh" "$STAGE/bin/muxmatch" 1 "pair offline jobs with online GPUs across a cluster" "$STAGE/man/muxmatch.1"
cp "$ROOT/packaging/man/muxflow-runtime.8" "$ROOT/packaging/man/muxflow-hook.8" "$STAGE/man/"
# -n: no name or time stamp inside, so the same input gives the same package.
gzip -9n "$STAGE"/man/*

# Notices of everything linked into the Go programs: the Go standard library and each
# module (their BSD and MIT licenses ask that binary copies carry them).
modcache=$("$GO" env GOMODCACHE)
notices=$STAGE/third-party-notices.txt
{
	echo "Third-party software in the muxflow Go programs (muxd, muxctl, muxflow-wrapper,"
	echo "muxmatch), with the license each is distributed under. muxflow-runtime, muxflow-hook"
	echo "and libxcuda are C and link only the C library."
	echo
	echo "==> Go standard library and runtime ($("$GO" env GOVERSION))"
	cat "$("$GO" env GOROOT)/LICENSE"
} >"$notices"
for b in muxd muxctl muxflow-wrapper muxmatch; do
	"$GO" version -m "$BUILD/bin/$b" 2>/dev/null || true
done | awk -F'\t' '
	# A "dep" line may be followed by "=>", the replacement actually linked in.
	function flush() { if (p != "") print p; p = "" }
	$2 == "dep" { flush(); p = $3 " " $4; next }
	$2 == "=>" { p = $3 " " $4; next }
	{ flush() }
	END { flush() }' |
	sort -u | sort -k1,1 -u |
	while read -r mod ver; do
		# The module cache escapes capitals as "!" + lower case.
		dir=$modcache/$(printf '%s' "$mod" | sed 's/[A-Z]/!\L&/g')@$ver
		printf '\n==> %s %s\n' "$mod" "$ver"
		found=
		for f in "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* "$dir"/NOTICE*; do
			[ -f "$f" ] || continue
			cat "$f"
			found=yes
		done
		[ -n "$found" ] || echo "(no license file found in $dir; see https://$mod)"
	done >>"$notices"
gzip -9n "$notices"

# The Debian changelog dpkg and lintian expect; one entry naming the version and commit.
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
date=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}")
cat >"$STAGE/changelog.Debian" <<CHANGELOG
muxflow ($VERSION-1) unstable; urgency=medium

  * Built from commit $commit.

 -- muxflow developers <dev@muxflow.io>  $date
CHANGELOG
gzip -9n "$STAGE/changelog.Debian"
sed '1s/^muxflow /muxflow-gpusim /' <<CHANGELOG | gzip -9n >"$STAGE/gpusim/changelog.Debian.gz"
$(zcat "$STAGE/changelog.Debian.gz")
CHANGELOG

# The oldest glibc that has every symbol version the programs and the library need.
LIBC=$(for f in "$STAGE"/bin/* "$STAGE"/lib/* "$STAGE"/gpusim/*; do
	objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' || true
done | sed 's/GLIBC_//' | sort -uV | tail -n 1)
LIBC=${LIBC:-2.17}

export ROOT BUILD STAGE VERSION ARCH LIBC
cd "$ROOT"
for p in ${PACKAGERS:-deb rpm}; do
	case $p in deb|rpm) ;; *) echo "package: unknown packager '$p'; want deb or rpm" >&2; exit 1 ;; esac
	for pkg in $PACKAGES; do
		case $pkg in
		muxflow) cfg=packaging/nfpm.yaml ;;
		muxflow-gpusim) cfg=packaging/nfpm-gpusim.yaml ;;
		*) echo "package: unknown package '$pkg'; want muxflow or muxflow-gpusim" >&2; exit 1 ;;
		esac
		"$GO" tool nfpm package --config "$cfg" --packager "$p" --target "$DIST/"
	done
done
