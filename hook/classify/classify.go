// Package classify decides a GPU container's class and limits from its annotations, under
// the policy's [classify] rules and [classes] bounds. A value policy does not accept is an
// AnnotationError: one sentence naming the annotation, for the person creating the container.
package classify

import (
	"fmt"
	"math"

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
			return "", lim, &AnnotationError{rules.MemoryAnnotation, fmt.Sprintf("value is %d bytes long, not a size like \"8GiB\"", len(v))}
		}
		n, err := annotations.ParseMemory(rules.MemoryAnnotation, v)
		if err != nil {
			return "", lim, err
		}
		if n == 0 {
			return "", lim, &AnnotationError{rules.MemoryAnnotation, fmt.Sprintf("%q is not a size above zero like \"8Gi\" or \"20GB\"", truncate(v))}
		}
		b := policy.Bytes(n)
		if bounds.MemoryLimit != 0 && b > bounds.MemoryLimit {
			return "", lim, &AnnotationError{rules.MemoryAnnotation, fmt.Sprintf("%v is above the %s class limit of %v", b, class, bounds.MemoryLimit)}
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
			return "", lim, &AnnotationError{rules.SMAnnotation, fmt.Sprintf("%d%% is outside the %s class's range %d%%..%d%%", n, class, lo, hi)}
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
