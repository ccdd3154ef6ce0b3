package hookstate

import (
	"strings"
	"testing"
)

func TestParseState(t *testing.T) {
	for _, tc := range []struct {
		name, in, wantErr string
		wantPid           int
	}{
		{"runc's state", `{"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/b","annotations":{"a":"\"pid\":1"}}`, "", 4242},
		{"no pid yet", `{"id":"c1"}`, "", 0},
		{"hostile id", `{"id":"../etc","pid":1}`, "container id", 0},
		{"slash escaped", `{"id":"a\u002fb","pid":1}`, "container id", 0},
		{"negative pid", `{"id":"c1","pid":-1}`, "not a process id", 0},
		{"huge pid", `{"id":"c1","pid":99999999}`, "not a process id", 0},
		{"not JSON", `pid=1`, "decode container state", 0},
		{"too large", `{"id":"c1","x":"` + strings.Repeat("a", MaxStateSize) + `"}`, "larger than", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseState(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || st.Pid != tc.wantPid || st.ID != "c1" {
				t.Fatalf("got %+v, %v", st, err)
			}
		})
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
