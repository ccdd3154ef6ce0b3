package wrapper

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    Invocation
		wantErr bool
	}{
		{"containerd create", []string{"--root", "/run/containerd/runc/k8s.io", "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "c1"},
			Invocation{Command: "create", Log: "/b/log.json", LogFormat: "json", Bundle: "/b", ID: "c1"}, false},
		{"equals and short", []string{"--log=/l", "run", "-b", "rel dir", "--detach", "c2"},
			Invocation{Command: "run", Log: "/l", Bundle: "/cwd/rel dir", ID: "c2"}, false},
		{"crun config", []string{"create", "-f", "/x.json", "--bundle", "/b", "c4"}, Invocation{Command: "create", Bundle: "/b", ID: "c4", Config: "/x.json"}, false},
		{"default bundle", []string{"create", "c3"}, Invocation{Command: "create", Bundle: "/cwd", ID: "c3"}, false},
		{"delete", []string{"--root", "/r", "delete", "--force", "c1"}, Invocation{Command: "delete"}, false},
		{"version", []string{"--version"}, Invocation{}, false},
		{"create without id", []string{"create", "--bundle", "/b"}, Invocation{Command: "create"}, true},
		{"create two ids", []string{"create", "a", "b"}, Invocation{Command: "create"}, true},
		{"dangling flag", []string{"--log"}, Invocation{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseArgs(tc.args, "/cwd")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}
