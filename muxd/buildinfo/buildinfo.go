// Package buildinfo holds the version stamped into every muxflow binary at link time.
package buildinfo

// Version is set by the Makefile with -ldflags "-X .../buildinfo.Version=...".
var Version = "dev"
