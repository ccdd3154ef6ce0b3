package ocihook

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/hook/muxdconn"
	"github.com/muxflow/muxflow/muxd/api"
)

type fakeMuxd struct {
	err     error
	calls   []string
	stopErr error
}

func (f *fakeMuxd) Start(_ context.Context, id string, pid int) (api.Container, error) {
	f.calls = append(f.calls, fmt.Sprintf("start %s %d", id, pid))
	return api.Container{}, f.err
}

func (f *fakeMuxd) Unregister(_ context.Context, id string) error {
	f.calls = append(f.calls, "unregister "+id)
	return f.stopErr
}

func TestRun(t *testing.T) {
	unreachable := fmt.Errorf("%w: dial", muxdconn.ErrUnreachable)
	for _, tc := range []struct {
		name      string
		cmd       string
		state     string
		muxd      fakeMuxd
		wantCalls []string
		wantErr   string
	}{
		{"start", "create-runtime", `{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":4242,"bundle":"/b"}`, fakeMuxd{}, []string{"start c1 4242"}, ""},
		{"start refused", "create-runtime", `{"id":"c1","pid":4242}`, fakeMuxd{err: &muxdconn.StatusError{Code: 404, Message: "not found"}}, []string{"start c1 4242"}, "cannot report container c1"},
		{"start without pid", "create-runtime", `{"id":"c1"}`, fakeMuxd{}, nil, "gave no pid"},
		{"stop", "poststop", `{"id":"c1","status":"stopped"}`, fakeMuxd{}, []string{"unregister c1"}, ""},
		{"stop, muxd down", "poststop", `{"id":"c1"}`, fakeMuxd{stopErr: unreachable}, []string{"unregister c1"}, ""},
		{"stop fails", "poststop", `{"id":"c1"}`, fakeMuxd{stopErr: &muxdconn.StatusError{Code: 500, Message: "disk"}}, []string{"unregister c1"}, "cannot unregister"},
		{"hostile id", "poststop", `{"id":"../../etc/passwd"}`, fakeMuxd{}, nil, "container id"},
		{"id with slash", "create-runtime", `{"id":"a/b","pid":1}`, fakeMuxd{}, nil, "container id"},
		{"negative pid", "create-runtime", `{"id":"c1","pid":-1}`, fakeMuxd{}, nil, "not a process id"},
		{"not json", "poststop", `id=c1`, fakeMuxd{}, nil, "decode container state"},
		{"huge", "poststop", `{"id":"c1","annotations":{"a":"` + strings.Repeat("x", 2<<20) + `"}}`, fakeMuxd{}, nil, "larger than"},
		{"unknown command", "prestart", `{"id":"c1"}`, fakeMuxd{}, nil, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.muxd
			err := Options{Client: &m, Stdin: strings.NewReader(tc.state)}.Run(context.Background(), tc.cmd)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantCalls, m.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunFlags(t *testing.T) {
	for _, args := range [][]string{nil, {"poststop", "--bogus"}, {"poststop", "extra"}, {"poststop", "--timeout", "soon"}} {
		if err := Run(context.Background(), args); err == nil {
			t.Errorf("Run(%q) accepted it", args)
		}
	}
}

// FuzzParseState: whatever the runtime (or a hostile annotation) puts on stdin, a state
// that parses has an id safe to use in a path and a plausible pid.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":4242,"bundle":"/b"}`))
	f.Add([]byte(`{"id":"..","pid":0}`))
	f.Add([]byte(`{"id":"a\u002fb"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseState(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if strings.ContainsAny(st.ID, "/\x00") || st.ID == "." || st.ID == ".." || strings.HasPrefix(st.ID, ".") {
			t.Fatalf("unsafe id %q accepted", st.ID)
		}
		if st.Pid < 0 || st.Pid > 1<<22 {
			t.Fatalf("pid %d accepted", st.Pid)
		}
	})
}
