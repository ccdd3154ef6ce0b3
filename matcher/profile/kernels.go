package profile

import "time"

// Kernel lengths: the one pairing no offline share protects. No hold removes an offline
// block that is already running, so where an offline job's kernels may hold SMs the
// online kernels need, every online request that arrives while one runs waits for it.
// When the kernel a request meets is several times as long as the request, every request
// that meets one takes several times as long, however small the offline share: only
// confining the job's SMs (muxflow.io/sm-percent) or pairing it with another service
// helps. muxd reports such a pair (muxctl status), and the planner does not make one.

const (
	// RiskRatio is how many times as long as an online request the offline kernel a
	// request meets must be to be a risk: such a request then takes three times as long
	// or more. Both are as measured beside each other (the requests with the waits the
	// job's kernels caused them). Set on gpusim's forty random draws of seed 1
	// (docs/results.md, *Random scenarios*), where every job that missed the p99 line for
	// its SMs read 2.1 or more and every one that held 1.4 or less, and checked on seed
	// 2's twenty.
	RiskRatio = 2
	// RiskMinKernel: shorter offline kernels are never a risk; waiting for one costs
	// less than an online request's own launches and synchronisation.
	RiskMinKernel = 100 * time.Microsecond
	// MaxKernel bounds a measured GPU time per launch: no kernel runs for minutes, and a
	// container's usage block, where it comes from, is its own word.
	MaxKernel = 10 * time.Second
	// FillingPct is how wide (percent of the SMs) an online service's kernels must be for
	// the planner to count a job's kernels as in their way: muxd fits an offline job
	// on the SMs narrower online kernels leave (its default alloc.fit_min is 10%), so its
	// blocks then never hold theirs.
	FillingPct = 90
)

// KernelRisk says whether an offline kernel of length offline (the one a request meets:
// Profile.KernelUS) delays online requests of length request (Profile.RequestUS; both
// 0 when unknown) past what any offline share can prevent, where the two compete for the
// same SMs or memory bus; ratio is offline ÷ request.
func KernelRisk(offline, request time.Duration) (ratio float64, risky bool) {
	if offline <= 0 || request <= 0 {
		return 0, false
	}
	ratio = float64(offline) / float64(request)
	return ratio, offline >= RiskMinKernel && ratio >= RiskRatio
}

// DelaysOnline says whether a job of profile p, paired with an online service of profile
// online, would keep the service's requests waiting for its kernels whatever its share:
// the service's kernels fill the GPU (FillingPct) and the job's kernels are a KernelRisk
// beside its requests. Unknown lengths or widths are no risk.
func (p Profile) DelaysOnline(online Profile) bool {
	if online.WidthPct < FillingPct {
		return false
	}
	_, risky := KernelRisk(micros(p.KernelUS), micros(online.RequestUS))
	return risky
}

func micros(us float64) time.Duration { return time.Duration(us * float64(time.Microsecond)) }
