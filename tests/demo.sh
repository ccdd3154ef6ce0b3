#!/usr/bin/env bash
# The README's main command (`make demo`): a compressed day of a diurnal online service
# plus offline training on one simulated GPU (gpusim, with the real muxd and libxcuda),
# run under each sharing strategy — online alone, time-sharing, priority time-sharing,
# plain MPS, muxflow with a static share, muxflow — printing one comparison table and
# writing the muxflow run's timeline to $BUILD/demo-timeline.png. About two minutes.
# DEMO_DURATION (default 15s) sets each run's length; extra arguments go to muxexp.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
export MUXFLOW_BUILD=${MUXFLOW_BUILD:-$build}
[ -x "$build/bin/muxexp" ] || { echo "demo: $build/bin/muxexp is missing; run 'make build' first" >&2; exit 1; }
exec "$build/bin/muxexp" run "$root/tests/scenarios/diurnal.toml" --duration "${DEMO_DURATION:-15s}" \
  --plot "$build/demo-timeline.png" "$@"
