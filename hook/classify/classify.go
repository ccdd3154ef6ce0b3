// Package classify decides a GPU container's class and limits from its annotations, under
// the policy's [classify] rules and [classes] bounds. A value policy does not accept is an
// AnnotationError: one sentence naming the annotation, for the person creating the container.
package classify

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/policy/annotations"
)

// maxAnnotationLen bounds class and limit annotation values; real ones are a few bytes.
const maxAnnotationLen = 64

// AnnotationError is a class or limit annotation that policy does not accept. Its message
// is one sentence that names the annotation, meant for the person creating the container.
// It is the one error type of package annotations, which parses these values for the node
// and the scheduler extender alike.
type AnnotationError = annotations.Error

// Classify reads a GPU container's class and limits from its annotations. A missing class
// annotation means the policy's default class; missing limits mean the class defaults (0).
// Every value is checked against the class bounds in p.
func Classify(ann map[string]string, p *policy.Policy) (api.Class, api.Limits, error) {
	var lim api.Limits
	rules := p.Classify
	class := api.Class(rules.Default)
	if v, ok := ann[rules.ClassAnnotation]; ok {
		c, err := annotations.ParseClass(rules.ClassAnnotation, v)
		if err != nil {
			return "", lim, err
		}
		class = api.Class(c)
	}
	bounds, ok := p.ClassLimits(string(class))
	if !ok {
		return "", lim, fmt.Errorf("policy: classify.default %q is not a class", class)
	}
	if v, ok := ann[rules.MemoryAnnotation]; ok {
		if len(v) > maxAnnotationLen {
			return "", lim, &AnnotationError{Key: rules.MemoryAnnotation, Reason: fmt.Sprintf("value is %d bytes long, not a size like \"8GiB\"", len(v))}
		}
		n, err := annotations.ParseMemory(rules.MemoryAnnotation, v)
		if err != nil {
			return "", lim, err
		}
		if n == 0 {
			return "", lim, &AnnotationError{Key: rules.MemoryAnnotation, Reason: fmt.Sprintf("%q is not a size above zero like \"8Gi\" or \"20GB\"", truncate(v))}
		}
		b := policy.Bytes(n)
		if bounds.MemoryLimit != 0 && b > bounds.MemoryLimit {
			return "", lim, &AnnotationError{Key: rules.MemoryAnnotation, Reason: fmt.Sprintf("%v is above the %s class limit of %v", b, class, bounds.MemoryLimit)}
		}
		lim.GPUMemory = uint64(b)
	}
	if v, ok := ann[rules.SMAnnotation]; ok {
		n, err := annotations.ParseSMPercent(rules.SMAnnotation, v)
		if err != nil {
			return "", lim, err
		}
		lo, hi := int(math.Ceil(float64(bounds.SMMin))), int(math.Floor(float64(bounds.SMMax)))
		if n < lo || n > hi {
			return "", lim, &AnnotationError{Key: rules.SMAnnotation, Reason: fmt.Sprintf("%d%% is outside the %s class's range %d%%..%d%%", n, class, lo, hi)}
		}
		lim.SMPercent = n
	}
	return class, lim, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// The environment variables that stand in for the class and limit annotations where the
// container engine cannot set annotations (Docker before 24 has no `docker run
// --annotation`: `docker run -e MUXFLOW_CLASS=offline` instead). An annotation, when
// present, wins over its variable; the values are checked exactly as annotations are.
const (
	EnvClass     = "MUXFLOW_CLASS"
	EnvGPUMemory = "MUXFLOW_GPU_MEMORY"
	EnvSMPercent = "MUXFLOW_SM_PERCENT"
)

// EnvError is an AnnotationError about a value that came from a standing-in environment
// variable; its sentence names the variable.
type EnvError struct {
	Var string
	Err *AnnotationError
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("muxflow: environment variable %s: %s", e.Var, e.Err.Reason)
}

func (e *EnvError) Unwrap() error { return e.Err }

// Spec classifies a container from its annotations and, for each class or limit
// annotation it lacks, the standing-in variable in its process environment (env as in
// the OCI spec, "KEY=value"; the last setting of a variable wins, as in a process).
func Spec(ann map[string]string, env []string, p *policy.Policy) (api.Class, api.Limits, error) {
	rules := p.Classify
	vars := map[string]string{EnvClass: rules.ClassAnnotation, EnvGPUMemory: rules.MemoryAnnotation, EnvSMPercent: rules.SMAnnotation}
	merged := make(map[string]string, len(ann)+len(vars))
	for k, v := range ann {
		merged[k] = v
	}
	fromEnv := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		a, known := vars[k]
		if !ok || !known {
			continue
		}
		if _, has := ann[a]; !has {
			merged[a] = v
			fromEnv[a] = k
		}
	}
	class, lim, err := Classify(merged, p)
	var ae *AnnotationError
	if errors.As(err, &ae) {
		if name, ok := fromEnv[ae.Key]; ok {
			return class, lim, &EnvError{Var: name, Err: ae}
		}
	}
	return class, lim, err
}
