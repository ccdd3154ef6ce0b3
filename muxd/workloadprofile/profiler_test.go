package workloadprofile

import (
	"math"
	"testing"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
)

func TestSoloProfilesAndColocationRecord(t *testing.T) {
	p := New()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(cs ...Observation) {
		now = now.Add(100 * time.Millisecond)
		p.Observe(now, []GPUObservation{{UUID: "GPU-a", Type: "H100", Containers: cs}})
	}
	on := Observation{ID: "svc", Online: true, GPUUtil: 30, MemBWUtil: 10, MemoryBytes: 4 << 30, Speed: 1000}
	off := Observation{ID: "job", GPUUtil: 90, MemBWUtil: 50, MemoryBytes: 16 << 30, Speed: 200}
	for range 50 {
		step(on)
	}
	if _, _, ok := p.Profile("job"); ok {
		t.Fatal("a profile for a container never seen")
	}
	for range 50 {
		step(off)
	}
	pr, solo, ok := p.Profile("job")
	if !ok || !solo || math.Abs(pr.GPUUtil-90) > 1e-9 || math.Abs(pr.MemoryMiB-16384) > 1e-6 || pr.Speed != 200 {
		t.Fatalf("solo profile: %+v solo=%v ok=%v", pr, solo, ok)
	}
	// Shared: online keeps 95% of its speed, offline gets 60%.
	onS, offS := on, off
	onS.Speed, offS.Speed = 950, 120
	for range 50 {
		step(onS, offS)
	}
	if len(p.Records()) != 0 {
		t.Fatal("a record before the co-location ended")
	}
	step(on) // the offline job left
	recs := p.Records()
	if len(recs) != 1 {
		t.Fatalf("records: %+v", recs)
	}
	r := recs[0]
	if r.A.Name != "svc" || r.B.Name != "job" || r.GPUType != "H100" || math.Abs(r.ANormTput-0.95) > 0.01 || math.Abs(r.BNormTput-0.6) > 0.01 {
		t.Errorf("record: %+v", r)
	}
	if err := r.Validate(); err != nil {
		t.Errorf("record does not validate for the matcher: %v", err)
	}
}

// An online service first measured alone after its neighbour left still yields a record.
func TestRecordWaitsForLateSoloBaseline(t *testing.T) {
	p := New()
	now := time.Now()
	step := func(cs ...Observation) {
		now = now.Add(100 * time.Millisecond)
		p.Observe(now, []GPUObservation{{UUID: "g", Type: "T4", Containers: cs}})
	}
	on := Observation{ID: "svc", Online: true, GPUUtil: 20, Speed: 100}
	off := Observation{ID: "job", GPUUtil: 80, Speed: 50}
	for range 40 {
		step(off)
	}
	onS, offS := on, off
	onS.Speed, offS.Speed = 80, 25
	for range 40 {
		step(onS, offS)
	}
	p.Forget("job", now) // the offline job finished and was unregistered
	if len(p.Records()) != 0 {
		t.Fatal("a record before the online side has a baseline")
	}
	for range 40 {
		step(on)
	}
	recs := p.Records()
	if len(recs) != 1 || math.Abs(recs[0].ANormTput-0.8) > 0.01 || math.Abs(recs[0].BNormTput-0.5) > 0.01 {
		t.Fatalf("records: %+v", recs)
	}
	if _, ok := p.solo["job"]; ok {
		t.Error("the forgotten job's baseline is kept after its record was made")
	}
}

func TestNoRecordWithoutSoloBaselines(t *testing.T) {
	p := New()
	now := time.Now()
	for range 100 {
		now = now.Add(100 * time.Millisecond)
		p.Observe(now, []GPUObservation{{UUID: "g", Containers: []Observation{{ID: "a", Online: true, Speed: 10}, {ID: "b", Speed: 5}}}})
	}
	p.Forget("b", now)
	if len(p.Records()) != 0 {
		t.Errorf("a record without solo baselines: %+v", p.Records())
	}
	if pr, solo, ok := p.Profile("a"); !ok || solo || pr.Speed != 10 {
		t.Errorf("in-company profile: %+v %v %v", pr, solo, ok)
	}
	if _, _, ok := p.Profile("b"); ok {
		t.Error("a forgotten container still has a profile")
	}
}

// Kernel lengths are measured in company only: a job's solo profile takes its kernels'
// length from when it shared, and readings that do not know them (0) leave them as they
// were.
func TestKernelLengthsReachTheProfile(t *testing.T) {
	p := New()
	now := time.Now()
	step := func(cs ...Observation) {
		now = now.Add(100 * time.Millisecond)
		p.Observe(now, []GPUObservation{{UUID: "g", Type: "T4", Containers: cs}})
	}
	on := Observation{ID: "svc", Online: true, GPUUtil: 20, Speed: 5000, RequestUS: 240, WidthPct: 100}
	off := Observation{ID: "job", GPUUtil: 60, Speed: 300}
	for range 40 {
		step(off) // alone: nothing measured
	}
	shared := off
	shared.KernelUS = 3000
	for range 40 {
		step(on, shared)
	}
	for range 40 {
		step(off)
	}
	pr, solo, ok := p.Profile("job")
	if !ok || !solo || math.Abs(pr.KernelUS-3000) > 1 || pr.WidthPct != 0 {
		t.Errorf("job: %+v solo=%v ok=%v; want its solo profile with 3000 µs kernels", pr, solo, ok)
	}
	if pr, _, _ := p.Profile("svc"); math.Abs(pr.RequestUS-240) > 0.1 || math.Abs(pr.WidthPct-100) > 0.1 {
		t.Errorf("svc: %+v; want 240 µs requests of kernels 100%% wide", pr)
	}
	if !pr.DelaysOnline(profileOf(t, p, "svc")) {
		t.Error("the job's profile does not say it delays the service")
	}
}

func profileOf(t *testing.T, p *Profiler, id string) profile.Profile {
	t.Helper()
	pr, _, ok := p.Profile(id)
	if !ok {
		t.Fatalf("no profile for %s", id)
	}
	return pr
}
