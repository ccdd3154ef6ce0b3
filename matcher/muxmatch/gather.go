package muxmatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/muxflow/muxflow/matcher/plan"
	"github.com/muxflow/muxflow/matcher/profile"
)

// Source yields the cluster's node reports for a round.
type Source interface {
	Reports(ctx context.Context) ([]profile.NodeReport, error)
}

// FileSource reads reports from a JSON file: an array of node reports, a
// single one, or {"nodes": [...]}. The file is re-read every round, so an
// external collector can keep it current.
type FileSource struct{ Path string }

// Reports implements Source.
func (f FileSource) Reports(context.Context) ([]profile.NodeReport, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("read reports: %w", err)
	}
	return decodeReports(b)
}

func decodeReports(b []byte) ([]profile.NodeReport, error) {
	trimmed := strings.TrimSpace(string(b))
	var out []profile.NodeReport
	switch {
	case strings.HasPrefix(trimmed, "["):
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("decode reports: %w", err)
		}
	default:
		var wrap struct {
			Nodes []profile.NodeReport `json:"nodes"`
			Node  *profile.NodeInfo    `json:"node"`
		}
		if err := json.Unmarshal(b, &wrap); err != nil {
			return nil, fmt.Errorf("decode reports: %w", err)
		}
		if wrap.Node != nil {
			var one profile.NodeReport
			if err := json.Unmarshal(b, &one); err != nil {
				return nil, fmt.Errorf("decode report: %w", err)
			}
			out = []profile.NodeReport{one}
		} else {
			out = wrap.Nodes
		}
	}
	for _, r := range out {
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// NodeSource asks every muxd for GET /v1/node. An endpoint is an http(s)
// URL (the /v1/node path is appended) or the path of muxd's unix socket.
// A node that does not answer is left out of the round with a warning; the
// round fails only when none answers.
type NodeSource struct {
	Endpoints []string
	Timeout   time.Duration
	Log       *slog.Logger
}

// Reports implements Source.
func (n NodeSource) Reports(ctx context.Context) ([]profile.NodeReport, error) {
	if len(n.Endpoints) == 0 {
		return nil, errors.New("no node endpoints given")
	}
	timeout := n.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	log := n.Log
	if log == nil {
		log = slog.Default()
	}
	type result struct {
		r   profile.NodeReport
		err error
	}
	res := make([]result, len(n.Endpoints))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32) // bound concurrent connections
	for i, ep := range n.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r, err := fetchNode(cctx, ep)
			res[i] = result{r, err}
		}()
	}
	wg.Wait()
	var out []profile.NodeReport
	var errs []error
	for i, r := range res {
		if r.err != nil {
			log.Warn("node report missing from this round", "endpoint", n.Endpoints[i], "err", r.err)
			errs = append(errs, r.err)
			continue
		}
		out = append(out, r.r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no node answered: %w", errors.Join(errs...))
	}
	return out, nil
}

func fetchNode(ctx context.Context, endpoint string) (profile.NodeReport, error) {
	client := http.DefaultClient
	url := strings.TrimSuffix(endpoint, "/") + "/v1/node"
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		sock := endpoint
		// One request per round: no keep-alive, so no idle connection
		// outlives the transport.
		client = &http.Client{Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
		}}
		url = "http://muxd/v1/node"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return profile.NodeReport{}, fmt.Errorf("node %s: %w", endpoint, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return profile.NodeReport{}, fmt.Errorf("node %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return profile.NodeReport{}, fmt.Errorf("node %s: read: %w", endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return profile.NodeReport{}, fmt.Errorf("node %s: GET /v1/node: %s: %.200s", endpoint, resp.Status, body)
	}
	var r profile.NodeReport
	if err := json.Unmarshal(body, &r); err != nil {
		return profile.NodeReport{}, fmt.Errorf("node %s: decode /v1/node: %w", endpoint, err)
	}
	if err := r.Validate(); err != nil {
		return profile.NodeReport{}, fmt.Errorf("node %s: %w", endpoint, err)
	}
	return r, nil
}

// readJobs reads a JSON array of jobs.
func readJobs(path string) ([]plan.Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read jobs: %w", err)
	}
	var jobs []plan.Job
	if err := json.Unmarshal(b, &jobs); err != nil {
		return nil, fmt.Errorf("decode jobs %s: %w", path, err)
	}
	for _, j := range jobs {
		if err := j.Validate(); err != nil {
			return nil, fmt.Errorf("jobs %s: %w", path, err)
		}
	}
	return jobs, nil
}
