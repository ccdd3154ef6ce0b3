package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/muxd/guard"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	text := fmt.Sprintf("[node]\nstate_dir = %q\nrun_dir = %q\nsocket = %q\nmetrics_address = %q\n[mps]\nenabled = false\n",
		filepath.Join(dir, "state"), filepath.Join(dir, "run"), filepath.Join(dir, "run", "muxd.sock"), addr)
	writeFile(t, pol, text)
	d, err := New(Options{PolicyPath: pol, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	c := client.New(filepath.Join(dir, "run", "muxd.sock"), time.Second)
	waitReady(t, c)
	c.Register(ctx, api.RegisterRequest{ID: "m1", Class: api.Offline, GPUs: []string{"0"}})
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp, err = http.Get("http://" + addr + "/v1/node")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("node report over TCP: %v %v", resp, err)
	}
	var rep api.NodeReport
	json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if rep.Node.Containers != 1 {
		t.Errorf("node report over TCP: %+v", rep.Node)
	}
	if resp, err := http.Post("http://"+addr+"/v1/containers", "application/json", strings.NewReader("{}")); err == nil && resp.StatusCode/100 == 2 {
		t.Error("the TCP listener accepts writes")
	}
	for _, want := range []string{
		`muxd_containers{class="offline"} 1`,
		`muxd_api_requests_total{code="201",route="POST /v1/containers"} 1`,
		`muxd_build_info{version=`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The kernel-risk gauge has a series for each container the guard names, at its ratio,
// and none for the others.
func TestKernelRiskMetric(t *testing.T) {
	statuses := []guard.Status{
		{UUID: "GPU-a", KernelRisks: []api.KernelRisk{{ID: "train", Ratio: 13.2}}},
		{UUID: "GPU-b"},
	}
	want := `
# HELP muxd_offline_kernel_risk_ratio Offline containers whose kernels keep the online requests waiting whatever their share: the kernel a request meets over a request (profile.KernelRisk).
# TYPE muxd_offline_kernel_risk_ratio gauge
muxd_offline_kernel_risk_ratio{container="train",gpu="GPU-a"} 13.2
`
	if err := testutil.CollectAndCompare(kernelRisks(func() []guard.Status { return statuses }), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
