package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/tests/testvec"
)

// The vectors below are shared with muxflow-runtime's C (hook/native/tests/vectors.c
// reads the same files): a case written once checks both languages.

// TestParseArgs holds ParseArgs to testdata/args.vec.
func TestParseArgs(t *testing.T) {
	for _, r := range testvec.Load(t, "args.vec") {
		t.Run(r.Name(), func(t *testing.T) {
			args, _ := r.Get("args")
			got, err := ParseArgs(args, r.Str("cwd", "/cwd"))
			if want := r.Str("err", ""); want != "" {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("%s: err = %v, want one containing %q", r.At, err, want)
				}
				if got.Command != r.Str("command", "") {
					t.Errorf("%s: command %q, want %q", r.At, got.Command, r.Str("command", ""))
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", r.At, err)
			}
			want := Invocation{
				Command: r.Str("command", ""), Log: r.Str("log", ""), LogFormat: r.Str("log_format", ""),
				Bundle: r.Str("bundle", ""), ID: r.Str("id", ""), Config: r.Str("config", ""),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: (-want +got):\n%s", r.At, diff)
			}
		})
	}
}

// TestCleanPathVectors proves testdata/cleanpath.vec right against filepath.Clean, which
// ParseArgs uses for the bundle.
func TestCleanPathVectors(t *testing.T) {
	for _, l := range testvec.Lines(testvec.Load(t, "cleanpath.vec"), "clean") {
		if got := filepath.Clean(l.Vals[0]); got != l.Vals[1] {
			t.Errorf("%s: Clean(%q) = %q, want %q", l.At, l.Vals[0], got, l.Vals[1])
		}
	}
}

// TestRunLogVectors holds the runtime's log lines to testdata/runlog.vec: the escapes are
// encoding/json's and strconv.Quote's, and a line of runcLogHandler decodes to the same
// fields as the line muxflow-runtime writes for the same record.
func TestRunLogVectors(t *testing.T) {
	recs := testvec.Load(t, "runlog.vec")
	for _, r := range recs {
		switch r.Kind() {
		case "escape":
			in := r.Name()
			if want, ok := r.Get("json"); ok {
				b, err := json.Marshal(in)
				if err != nil || string(b) != `"`+want[0]+`"` {
					t.Errorf("%s: json.Marshal(%q) = %s, %v; want \"%s\"", r.At, in, b, err, want[0])
				}
			}
			if want, ok := r.Get("text"); ok {
				if got := strconv.Quote(in); got != want[0] {
					t.Errorf("%s: strconv.Quote(%q) = %s, want %s", r.At, in, got, want[0])
				}
			}
		case "stamp":
			for _, l := range r.Lines {
				ns, err := strconv.ParseInt(l.Vals[0], 10, 64)
				if err != nil {
					t.Fatalf("%s: %v", l.At, err)
				}
				if got := time.Unix(0, ns).UTC().Format(time.RFC3339Nano); got != l.Vals[1] {
					t.Errorf("%s: %d formats as %s, want %s", l.At, ns, got, l.Vals[1])
				}
			}
		case "line":
			format := r.Str("format", "")
			want, err := decodeLogLine(format, r.Str("want", ""))
			if err != nil {
				t.Fatalf("%s: the vector's line: %v", r.At, err)
			}
			levels := map[string]slog.Level{"info": slog.LevelInfo, "warning": slog.LevelWarn, "error": slog.LevelError}
			lvl, ok := levels[r.Str("level", "")]
			if !ok {
				t.Fatalf("%s: level %q is not one the wrapper writes", r.At, r.Str("level", ""))
			}
			rec := slog.NewRecord(time.Unix(0, r.Int(t, "time")), lvl, r.Str("msg", ""), 0)
			if c, ok := r.Get("container"); ok {
				rec.AddAttrs(slog.String("container", c[0]))
			}
			var out bytes.Buffer
			if err := runcLogHandler(&out, format, slog.LevelInfo).Handle(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
			got, err := decodeLogLine(format, out.String())
			if err != nil {
				t.Fatalf("%s: Go's line %q: %v", r.At, out.String(), err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: Go's line %q decodes differently from C's (-C +Go):\n%s", r.At, out.String(), diff)
			}
		default:
			t.Fatalf("%s: unknown record %q", r.At, r.Kind())
		}
	}
}

// decodeLogLine reads one line as containerd would (JSON, or logfmt for text), with the
// time as an instant in UTC so that the time zone a writer used does not matter.
func decodeLogLine(format, line string) (map[string]string, error) {
	line, ok := strings.CutSuffix(line, "\n")
	if !ok || strings.Contains(line, "\n") {
		return nil, strconv.ErrSyntax
	}
	fields := map[string]string{}
	if format == "json" {
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			return nil, err
		}
	} else {
		for rest := line; rest != ""; {
			key, val, ok := strings.Cut(rest, "=")
			if !ok || key == "" {
				return nil, strconv.ErrSyntax
			}
			if strings.HasPrefix(val, `"`) {
				q, err := strconv.QuotedPrefix(val)
				if err != nil {
					return nil, err
				}
				v, _ := strconv.Unquote(q)
				fields[key], rest = v, val[len(q):]
			} else {
				v, tail, _ := strings.Cut(val, " ")
				fields[key], rest = v, " "+tail
				if tail == "" {
					rest = ""
				}
			}
			rest = strings.TrimPrefix(rest, " ")
		}
	}
	if ts, ok := fields["time"]; ok {
		tm, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return nil, err
		}
		fields["time"] = tm.UTC().Format(time.RFC3339Nano)
	}
	return fields, nil
}
