package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeStrictAccepts(t *testing.T) {
	var r RegisterRequest
	body := `{"id":"job-1","class":"offline","gpus":["0","GPU-5e9d0000"],"limits":{"gpu_memory":1024,"sm_percent":30},` +
		`"namespace":"k8s.io","pod":"default/tr\u00e4in-\ud83d\ude00"}`
	if err := DecodeStrict([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	want := RegisterRequest{ID: "job-1", Class: Offline, GPUs: []string{"0", "GPU-5e9d0000"},
		Limits: Limits{GPUMemory: 1024, SMPercent: 30}, Namespace: "k8s.io", Pod: "default/träin-😀"}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	if err := r.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	// Embedded structs are flattened as encoding/json does.
	var c Container
	if err := DecodeStrict([]byte(`{"id":"a","state":"running","registered":"2024-01-02T03:04:05Z","control":{"dir":"/x"}}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.ID != "a" || c.State != StateRunning || c.Control.Dir != "/x" {
		t.Errorf("container: %+v", c)
	}
}

// TestDecodeStrictRefuses: the JSON nits of issue 15 (keys matched case-insensitively,
// duplicate keys, invalid UTF-8) and the decoder's other limits. Each error says what is
// wrong, and the target is left untouched.
func TestDecodeStrictRefuses(t *testing.T) {
	tests := []struct {
		name, body, msg string
	}{
		{"upper-case key", `{"ID":"x","class":"offline","gpus":["0"]}`, `key "ID" in the request body must be written "id" (keys are case-sensitive)`},
		{"upper-case class", `{"id":"x","CLASS":"offline","gpus":["0"]}`, `key "CLASS" in the request body must be written "class"`},
		{"nested case", `{"id":"x","class":"offline","gpus":["0"],"limits":{"SM_Percent":3}}`, `key "SM_Percent" in limits must be written "sm_percent"`},
		{"duplicate key", `{"id":"x","class":"offline","id":"y","gpus":["0"]}`, `key "id" appears twice in the request body`},
		{"nested duplicate", `{"id":"x","class":"offline","gpus":["0"],"limits":{"sm_percent":3,"sm_percent":90}}`, `key "sm_percent" appears twice in limits`},
		{"unknown key", `{"id":"x","class":"offline","gpus":["0"],"evil":1}`, `unknown field "evil"`},
		{"invalid utf-8", "{\"id\":\"x\",\"class\":\"offline\",\"gpus\":[\"0\"],\"namespace\":\"k8s\xff\"}", "not valid UTF-8 (first bad byte at offset 57)"},
		{"overlong utf-8", "{\"id\":\"x\",\"namespace\":\"\xc0\xaf\"}", "not valid UTF-8"},
		{"lone high surrogate", `{"id":"x","namespace":"a\ud800b"}`, `unpaired UTF-16 surrogate \ud800`},
		{"lone low surrogate", `{"id":"x","namespace":"\udc00"}`, `unpaired UTF-16 surrogate \udc00`},
		{"trailing data", `{"id":"x"} {}`, "data after the object"},
		{"truncated", `{"id":`, "malformed JSON body"},
		{"wrong type", `{"id":7}`, "malformed JSON body: cannot unmarshal number"},
		{"too deep", `{"limits":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, "more than 16 deep"},
		{"empty", ``, "malformed JSON body"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := RegisterRequest{ID: "untouched"}
			err := DecodeStrict([]byte(tc.body), &r)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("DecodeStrict(%q) = %v; want ErrInvalid mentioning %q", tc.body, err, tc.msg)
			}
			if r.ID != "untouched" || r.Class != "" {
				t.Errorf("a refused body changed the target: %+v", r)
			}
		})
	}
	// An escaped backslash before "u" is not a \u escape.
	var r RegisterRequest
	if err := DecodeStrict([]byte(`{"pod":"a\\ud800"}`), &r); err != nil || r.Pod != `a\ud800` {
		t.Errorf(`escaped backslash: %q %v`, r.Pod, err)
	}
}

func TestValidateNames(t *testing.T) {
	base := RegisterRequest{ID: "x", Class: Online, GPUs: []string{"0"}}
	for _, tc := range []struct {
		ns, pod, msg string
	}{
		{"k8s.io", "default/web-0", ""},
		{"", "", ""},
		{"моби", "ns/имя", ""},
		{"k8s.io", "default/web\n0", `pod holds the non-printable character U+000A at offset 11`},
		{"k8s\x00io", "", `namespace holds the non-printable character U+0000`},
		{"k8s\tio", "", `namespace holds the non-printable character U+0009`},
		{"", "a\u202eb", `pod holds the non-printable character U+202E`},
		{"k8s\xffio", "", "namespace is not valid UTF-8"},
		{"", "a\uFFFDb", "pod holds U+FFFD"},
		{strings.Repeat("n", 257), "", "namespace is 257 bytes long, more than 256"},
	} {
		r := base
		r.Namespace, r.Pod = tc.ns, tc.pod
		err := r.Validate()
		if tc.msg == "" {
			if err != nil {
				t.Errorf("Validate(ns %q, pod %q) = %v", tc.ns, tc.pod, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Validate(ns %q, pod %q) = %v; want %q", tc.ns, tc.pod, err, tc.msg)
		}
	}
}

func TestStartRequestValidate(t *testing.T) {
	for pid, msg := range map[int]string{1: "pid 1 is the host's init", 0: "not a valid process id", -5: "not a valid process id", MaxPID + 1: "not a valid process id"} {
		if err := (&StartRequest{PID: pid}).Validate(); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("pid %d: %v, want %q", pid, err, msg)
		}
	}
	if err := (&StartRequest{PID: 2}).Validate(); err != nil {
		t.Errorf("pid 2: %v", err)
	}
}
