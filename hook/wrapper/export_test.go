package wrapper

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/hook/classify"
	"github.com/muxflow/muxflow/hook/gpucontainer"
	"github.com/muxflow/muxflow/policy"
)

func detectAndClassify(s *specs.Spec, p *policy.Policy) ([]string, error) {
	gpus, err := gpucontainer.Detect(s)
	if err != nil || gpus == nil {
		return gpus, err
	}
	_, _, err = classify.Classify(s.Annotations, p)
	return gpus, err
}
