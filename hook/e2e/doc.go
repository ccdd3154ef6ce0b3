// Package e2e holds muxflow's end-to-end tests of the OCI integration: real containerd and
// runc running busybox containers through muxflow-runtime and muxflow-hook against a real
// muxd, and the benchmark of what the wrapper adds to `runc run`. It has no code of its own;
// everything is in its tests, which need root, the built binaries (make build) and the
// Debian packages containerd, runc and busybox-static (tests/deps.sh).
package e2e
