// Package ocihook is muxflow-hook, the OCI hook that muxflow-runtime adds to every GPU
// container: as a createRuntime hook it tells muxd the container's host pid (the process
// now exists, in the runtime's namespace); as a poststop hook it unregisters the container.
package ocihook

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/hook/muxdconn"
	"github.com/muxflow/muxflow/hook/wiring"
	"github.com/muxflow/muxflow/muxd/api"
)

// maxStateSize bounds the state document read from stdin; real ones are under 4 KiB,
// but annotations are user-controlled.
const maxStateSize = 1 << 20

// Reporter is the part of muxd's client the hook uses.
type Reporter interface {
	Start(ctx context.Context, id string, pid int) (api.Container, error)
	Unregister(ctx context.Context, id string) error
}

// Options configure one hook run; Run fills them from the command line.
type Options struct {
	Socket  string
	Timeout time.Duration
	// Client defaults to muxd's client on Socket.
	Client Reporter
	Stdin  io.Reader
	Log    *slog.Logger
}

// Run is muxflow-hook's main: args are the command line without argv[0]:
// create-runtime|poststop --socket PATH [--timeout D], with the OCI state on stdin.
func Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("muxflow-hook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o Options
	fs.StringVar(&o.Socket, "socket", api.DefaultSocket, "muxd's unix socket")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "bound on the call to muxd")
	if len(args) == 0 {
		return fmt.Errorf("muxflow-hook: usage: muxflow-hook %s|%s --socket PATH [--timeout D] < state.json", wiring.HookStart, wiring.HookStop)
	}
	cmd := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("muxflow-hook: %w", err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("muxflow-hook: unexpected arguments %q", fs.Args())
	}
	o.Stdin = os.Stdin
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	return o.Run(ctx, cmd)
}

// ParseState reads and checks an OCI state document.
func ParseState(r io.Reader) (specs.State, error) {
	var st specs.State
	data, err := io.ReadAll(io.LimitReader(r, maxStateSize+1))
	if err != nil {
		return st, fmt.Errorf("read container state: %w", err)
	}
	if len(data) > maxStateSize {
		return st, fmt.Errorf("container state is larger than %d bytes", maxStateSize)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("decode container state: %w", err)
	}
	if err := api.ValidateID(st.ID); err != nil {
		return st, fmt.Errorf("container state: %w", err)
	}
	if st.Pid < 0 || st.Pid > 1<<22 {
		return st, fmt.Errorf("container state: pid %d is not a process id", st.Pid)
	}
	return st, nil
}

// Run executes one hook command.
func (o Options) Run(ctx context.Context, cmd string) error {
	if cmd != wiring.HookStart && cmd != wiring.HookStop {
		return fmt.Errorf("muxflow-hook: unknown command %q; want %s or %s", cmd, wiring.HookStart, wiring.HookStop)
	}
	st, err := ParseState(o.Stdin)
	if err != nil {
		return fmt.Errorf("muxflow-hook %s: %w", cmd, err)
	}
	if o.Client == nil {
		o.Client = muxdconn.New(o.Socket, o.Timeout)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	switch cmd {
	case wiring.HookStart:
		if st.Pid <= 0 {
			return fmt.Errorf("muxflow-hook %s: container %s: the runtime gave no pid", cmd, st.ID)
		}
		if _, err := o.Client.Start(ctx, st.ID, st.Pid); err != nil {
			return fmt.Errorf("muxflow-hook: cannot report container %s (pid %d) to muxd: %w", st.ID, st.Pid, err)
		}
	case wiring.HookStop:
		err := o.Client.Unregister(ctx, st.ID)
		if errors.Is(err, muxdconn.ErrUnreachable) {
			// muxd forgets containers whose processes are gone when it comes back; the
			// container's stop must not fail because muxd is down.
			o.Log.Warn("muxflow-hook: muxd is not running; it will drop the container when it restarts", "container", st.ID)
			return nil
		}
		if err != nil {
			return fmt.Errorf("muxflow-hook: cannot unregister container %s: %w", st.ID, err)
		}
	}
	return nil
}
