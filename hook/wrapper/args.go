package wrapper

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Invocation is what the wrapper needs to know about one runtime command line. The command
// line itself is handed to the real runtime exactly as it came.
type Invocation struct {
	// Command is the subcommand (create, run, start, delete...); empty for global-only
	// invocations such as --version.
	Command string
	// Log and LogFormat are the runtime's --log and --log-format: where containerd expects
	// the runtime's log lines and in which format (text or json).
	Log, LogFormat string
	// Bundle is the absolute bundle directory of create and run.
	Bundle string
	// ID is the container id of create and run.
	ID string
	// Config is crun's --config (-f): a spec file other than the bundle's config.json.
	Config string
}

// Flags of runc and crun that take a value: knowing them is how the subcommand and the
// container id are told apart from flag values. A flag not listed is taken as boolean
// unless written --flag=value.
var valueFlags = map[string]bool{
	// global
	"log": true, "log-format": true, "log-level": true, "root": true, "criu": true,
	"rootless": true, "cgroup-manager": true,
	// create / run
	"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true,
	"config": true, "f": true, // crun only
}

// ParseArgs reads a runc-style command line (without argv[0]). cwd resolves a relative
// --bundle (default "."), as runc does.
func ParseArgs(args []string, cwd string) (Invocation, error) {
	var inv Invocation
	var positional []string
	bundle := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if inv.Command == "" {
				inv.Command = a
				continue
			}
			positional = append(positional, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasVal && valueFlags[name] {
			if i+1 >= len(args) {
				return inv, fmt.Errorf("flag %s needs a value", a)
			}
			i++
			val, hasVal = args[i], true
		}
		if !hasVal {
			continue
		}
		switch name {
		case "log":
			inv.Log = val
		case "log-format":
			inv.LogFormat = val
		case "bundle", "b":
			bundle = val
		case "config", "f":
			inv.Config = val
		}
	}
	if inv.Command != "create" && inv.Command != "run" {
		return inv, nil
	}
	if len(positional) != 1 {
		return inv, fmt.Errorf("%s needs exactly one container id, got %d arguments", inv.Command, len(positional))
	}
	inv.ID = positional[0]
	if bundle == "" {
		bundle = "."
	}
	if !filepath.IsAbs(bundle) {
		bundle = filepath.Join(cwd, bundle)
	}
	inv.Bundle = filepath.Clean(bundle)
	return inv, nil
}
