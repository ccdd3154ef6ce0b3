// Package classify owns what a container's class and limit annotations mean: it is the one
// place that turns them, under the policy's [classify] rules and [classes] bounds, into a
// container's class and limits, and the only place that checks them. The three entries
// read the same values from different sources and give the same sentence for the same bad
// value, naming where it came from:
//
//   - the annotations of a GPU container's spec (Classify; Register for muxd's runtime
//     create request),
//   - the MUXFLOW_* variables that stand in for them where the container engine cannot set
//     annotations (Spec, Register),
//   - the class and limits of a POST /v1/containers request (Request), which is untrusted.
//
// What they make is a Registration: muxd registers it (registry, control block, wiring) as
// it is, without checking its class or limits again. docs/architecture.md, "Which file owns
// which rule".
package classify

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
// and the scheduler extender alike. Errors about values from a variable (EnvError) or a
// request (FieldError) wrap one, with the same reason.
type AnnotationError = annotations.Error

// value is one class or limit value and where it came from. An annotation or a variable
// is text that policy/annotations parses; a request's number is already typed.
type value struct {
	set   bool
	text  string
	num   int64 // a request's number, when typed
	typed bool
	// name turns the reason, stated against the annotation, into an error that names the
	// value's source; nil for an annotation.
	name func(*AnnotationError) error
}

func (v value) fail(err error) error {
	var ae *AnnotationError
	if v.name != nil && errors.As(err, &ae) {
		return v.name(ae)
	}
	return err
}

// values are the three inputs of decide.
type values struct{ class, memory, sm value }

// decide is the one check: a container's class and limits from their values, under the
// policy. A missing class means the policy's default class; missing limits mean the class
// defaults (0). Every reason is stated against the annotation (as an AnnotationError) and
// renamed by the value's source.
func decide(in values, p *policy.Policy) (api.Class, api.Limits, error) {
	var lim api.Limits
	rules := p.Classify
	class := api.Class(rules.Default)
	if v := in.class; v.set {
		c, err := annotations.ParseClass(rules.ClassAnnotation, v.text)
		if err != nil {
			return "", lim, v.fail(err)
		}
		class = api.Class(c)
	}
	bounds, ok := p.ClassLimits(string(class))
	if !ok {
		return "", lim, fmt.Errorf("policy: classify.default %q is not a class", class)
	}
	if v := in.memory; v.set {
		n, err := memory(rules.MemoryAnnotation, v)
		if err != nil {
			return "", lim, v.fail(err)
		}
		if b := policy.Bytes(n); bounds.MemoryLimit != 0 && b > bounds.MemoryLimit {
			return "", lim, v.fail(&AnnotationError{Key: rules.MemoryAnnotation, Reason: fmt.Sprintf("%v is above the %s class limit of %v", b, class, bounds.MemoryLimit)})
		}
		lim.GPUMemory = n
	}
	if v := in.sm; v.set {
		n := v.num
		if !v.typed {
			w, err := annotations.ParseWholePercent(rules.SMAnnotation, v.text)
			if err != nil {
				return "", lim, v.fail(err)
			}
			n = int64(w)
		}
		// The class's range, within the 1..100 an MPS active-thread percentage can be.
		lo := max(1, int64(math.Ceil(float64(bounds.SMMin))))
		hi := min(100, int64(math.Floor(float64(bounds.SMMax))))
		if n < lo || n > hi {
			return "", lim, v.fail(&AnnotationError{Key: rules.SMAnnotation, Reason: fmt.Sprintf("%d%% is outside the %s class's range %d%%..%d%%", n, class, lo, hi)})
		}
		lim.SMPercent = int(n)
	}
	return class, lim, nil
}

// memory reads a memory cap: a request's bytes as they are, an annotation's text through
// policy/annotations, where it must be above zero (a request says "no cap" with 0, an
// annotation by its absence).
func memory(key string, v value) (uint64, error) {
	if v.typed {
		return uint64(v.num), nil
	}
	if len(v.text) > maxAnnotationLen {
		return 0, &AnnotationError{Key: key, Reason: fmt.Sprintf("value is %d bytes long, not a size like \"8GiB\"", len(v.text))}
	}
	n, err := annotations.ParseMemory(key, v.text)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, &AnnotationError{Key: key, Reason: fmt.Sprintf("%q is not a size above zero like \"8Gi\" or \"20GB\"", annotations.Truncate(v.text))}
	}
	return n, nil
}

// Classify reads a GPU container's class and limits from its annotations. A missing class
// annotation means the policy's default class; missing limits mean the class defaults (0).
// Every value is checked against the class bounds in p.
func Classify(ann map[string]string, p *policy.Policy) (api.Class, api.Limits, error) {
	return Spec(ann, nil, p)
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
	in := values{}
	for _, s := range []struct {
		v        *value
		key, env string
	}{
		{&in.class, rules.ClassAnnotation, EnvClass},
		{&in.memory, rules.MemoryAnnotation, EnvGPUMemory},
		{&in.sm, rules.SMAnnotation, EnvSMPercent},
	} {
		if t, ok := ann[s.key]; ok {
			*s.v = value{set: true, text: t}
			continue
		}
		for _, kv := range env {
			if k, t, ok := strings.Cut(kv, "="); ok && k == s.env {
				name := s.env
				*s.v = value{set: true, text: t, name: func(ae *AnnotationError) error { return &EnvError{Var: name, Err: ae} }}
			}
		}
	}
	return decide(in, p)
}

// FieldError is an AnnotationError about a value that came from a field of a POST
// /v1/containers request; its sentence names the field, and it is an api.ErrInvalid.
type FieldError struct {
	Field string
	Err   *AnnotationError
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: %s: %s", api.ErrInvalid, e.Field, e.Err.Reason)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Is makes a FieldError an api.ErrInvalid (HTTP 400).
func (e *FieldError) Is(target error) bool { return target == api.ErrInvalid }

// The request fields that carry a class and limits.
const (
	FieldClass     = "class"
	FieldGPUMemory = "limits.gpu_memory"
	FieldSMPercent = "limits.sm_percent"
)

// Registration is a container registration whose class and limits the policy accepted
// and whose id, GPUs and names are well formed. Only Register and Request make one; muxd
// stores it, gives it its control block and wires it as it is.
type Registration struct{ req api.RegisterRequest }

// Request is the registration as muxd stores it.
func (r Registration) Request() api.RegisterRequest {
	out := r.req
	out.GPUs = slices.Clone(r.req.GPUs)
	return out
}

// ID is the container's id.
func (r Registration) ID() string { return r.req.ID }

// Class is the container's class.
func (r Registration) Class() api.Class { return r.req.Class }

// GPUs are the GPUs the container may use.
func (r Registration) GPUs() []string { return slices.Clone(r.req.GPUs) }

// Register makes the registration of a GPU container from its spec: its id, GPUs,
// containerd namespace and pod, and its class and limits from the annotations or their
// standing-in variables (see Spec).
func Register(id string, gpus []string, namespace, pod string, ann map[string]string, env []string, p *policy.Policy) (Registration, error) {
	class, lim, err := Spec(ann, env, p)
	if err != nil {
		return Registration{}, err
	}
	return wellFormed(api.RegisterRequest{ID: id, Class: class, GPUs: gpus, Limits: lim, Namespace: namespace, Pod: pod})
}

// Request checks a registration sent to POST /v1/containers: its class (required) and
// limits go through the same check as annotations, with errors that name the field.
func Request(req api.RegisterRequest, p *policy.Policy) (Registration, error) {
	field := func(f string) func(*AnnotationError) error {
		return func(ae *AnnotationError) error { return &FieldError{Field: f, Err: ae} }
	}
	in := values{class: value{set: true, text: string(req.Class), name: field(FieldClass)}}
	if req.Limits.GPUMemory != 0 {
		if req.Limits.GPUMemory > math.MaxInt64 {
			return Registration{}, &FieldError{Field: FieldGPUMemory, Err: &AnnotationError{Key: p.Classify.MemoryAnnotation, Reason: fmt.Sprintf("%d is too large", req.Limits.GPUMemory)}}
		}
		in.memory = value{set: true, typed: true, num: int64(req.Limits.GPUMemory), name: field(FieldGPUMemory)}
	}
	if req.Limits.SMPercent != 0 {
		in.sm = value{set: true, typed: true, num: int64(req.Limits.SMPercent), name: field(FieldSMPercent)}
	}
	class, lim, err := decide(in, p)
	if err != nil {
		return Registration{}, err
	}
	req.Class, req.Limits = class, lim
	return wellFormed(req)
}

func wellFormed(req api.RegisterRequest) (Registration, error) {
	if err := req.Validate(); err != nil {
		return Registration{}, err
	}
	req.GPUs = slices.Clone(req.GPUs)
	return Registration{req}, nil
}
