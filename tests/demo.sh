#!/usr/bin/env bash
# The README's main command (`make demo`): the gpusim-backed demonstration on a machine
# without a GPU. gpusim/demo.sh runs the workloads on one simulated GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export BUILD=${BUILD:-$root/build}
exec "$root/gpusim/demo.sh" "$@"
