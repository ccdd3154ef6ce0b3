// Package hookstate reads the container state that an OCI runtime gives its hooks. muxd uses
// it for what muxflow-hook forwards from the createRuntime hook (the container's host pid
// now exists, in the runtime's namespace) and the poststop hook (the container is gone).
package hookstate

import (
	"encoding/json"
	"fmt"
	"io"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/muxd/api"
)

// MaxStateSize bounds a state document; real ones are under 4 KiB, but annotations are
// user-controlled.
const MaxStateSize = 1 << 20

// ParseState reads and checks the state document: its id must be a valid container id and
// its pid a plausible process id.
func ParseState(r io.Reader) (specs.State, error) {
	var st specs.State
	data, err := io.ReadAll(io.LimitReader(r, MaxStateSize+1))
	if err != nil {
		return st, fmt.Errorf("read container state: %w", err)
	}
	if len(data) > MaxStateSize {
		return st, fmt.Errorf("container state is larger than %d bytes", MaxStateSize)
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
