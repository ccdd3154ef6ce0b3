#!/bin/sh
# version.sh prints the package version for the current commit (see Makefile).
set -eu
if d=$(git describe --tags --match 'v[0-9]*' --abbrev=7 2>/dev/null); then
	# v1.2.3 or v1.2.3-4-gabcdef0
	v=${d#v}
	case $v in
	*-*-g*) base=${v%-*-g*}; rest=${v#"$base"-}; n=${rest%%-*}; sha=${rest##*-g}; echo "$base+git$n.$sha" | tr -- - . ;;
	*) echo "$v" | tr -- - '~' ;;
	esac
else
	ts=$(git log -1 --format=%cd --date=format:%Y%m%d%H%M%S 2>/dev/null || echo 0)
	sha=$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)
	echo "0.0.0~git$ts.$sha"
fi | {
	# Programs built from a tree with uncommitted changes say so (Makefile VERSION).
	read -r v
	if [ "${VERSION_DIRTY:-}" != no ] && ! git diff --quiet HEAD 2>/dev/null; then v="$v+dirty"; fi
	echo "$v"
}
