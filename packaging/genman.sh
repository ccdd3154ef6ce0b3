#!/bin/sh
# genman.sh BINARY SECTION SUMMARY OUT [node]: writes a man page for BINARY built from
# its own --help text, so the manual shipped in the packages never drifts from the program.
# "node" adds the FILES section of the node tools (policy file, muxd's socket).
# SUMMARY is the NAME line's description, used when --help's first line is not of the
# form "name — summary". The page is plain roff; the caller compresses it.
set -eu

if [ $# -ne 4 ] && { [ $# -ne 5 ] || [ "$5" != node ]; }; then
	echo "usage: genman.sh BINARY SECTION SUMMARY OUT [node]" >&2
	exit 2
fi
bin=$1 section=$2 summary=$3 out=$4 node=${5:-}
name=$(basename "$bin")
case $section in
[1-8]) ;;
*) echo "genman.sh: section must be 1-8, got '$section'" >&2; exit 2 ;;
esac
if [ ! -x "$bin" ]; then
	echo "genman.sh: $bin is missing or not executable" >&2
	exit 1
fi

help=$(mktemp)
trap 'rm -f "$help"' EXIT
# Some flag parsers print --help on stderr, and some exit 2 after it; what matters is text.
"$bin" --help >"$help" 2>&1 || true
if [ ! -s "$help" ]; then
	echo "genman.sh: $bin --help printed nothing" >&2
	exit 1
fi

first=$(head -n 1 "$help")
case $first in
"$name — "*) summary=${first#"$name — "}; summary=${summary%.} ;;
esac

# roff: a leading "." or "'" starts a request and "\" an escape; quote them.
esc() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

{
	printf '.TH %s %s "" "muxflow" "muxflow manual"\n' "$(echo "$name" | tr '[:lower:]' '[:upper:]')" "$section"
	printf '.SH NAME\n%s \\- %s\n' "$name" "$(printf '%s' "$summary" | esc)"
	printf '.SH DESCRIPTION\nThe text below is what\n.B %s \\-\\-help\nprints.\n.PP\n.nf\n' "$name"
	esc <"$help"
	printf '.fi\n'
	if [ "$node" = node ]; then
		printf '.SH FILES\n.TP\n.I /etc/muxflow/policy.toml\nthe node policy (see the comments in the file)\n'
		printf '.TP\n.I /run/muxflow/muxd.sock\nmuxd'"'"'s API socket\n'
	fi
	printf '.SH SEE ALSO\n.BR muxd (8),\n.BR muxctl (1),\n.BR muxflow-runtime (8),\n.BR muxflow-hook (8);\n'
	printf '.I /usr/share/doc/muxflow/install.md\n'
} >"$out"
