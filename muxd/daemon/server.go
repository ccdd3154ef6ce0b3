package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/registry"
	"github.com/muxflow/muxflow/policy/classify"
)

// maxBody bounds request bodies; a registration is a few hundred bytes.
const maxBody = 64 << 10

func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(*http.Request) (int, any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := authorize(r.Context(), d.policy().Node.AllowUIDs); err != nil {
				d.log.Warn("api request refused", "path", r.URL.Path, "err", err)
				d.reply(w, pattern, http.StatusForbidden, nil, err)
				return
			}
			code, body, err := h(r)
			d.reply(w, pattern, code, body, err)
		})
	}
	p := api.Prefix
	handle("GET "+p+"/node", func(r *http.Request) (int, any, error) { return 200, d.nodeReport(), nil })
	handle("GET "+p+"/gpus", func(r *http.Request) (int, any, error) {
		gpus, err := d.gpus(r.Context())
		if err != nil {
			return 500, nil, err
		}
		return 200, gpus, nil
	})
	handle("GET "+p+"/containers", func(r *http.Request) (int, any, error) {
		list := d.reg.List()
		for i := range list {
			list[i].Usage = d.usage(list[i].ID)
			list[i].Ceiling = d.ceiling(list[i].ID)
		}
		return 200, list, nil
	})
	handle("POST "+p+"/containers", d.register)
	handle("GET "+p+"/containers/{id}", func(r *http.Request) (int, any, error) {
		c, err := d.reg.Get(r.PathValue("id"))
		if err == nil {
			c.Usage = d.usage(c.ID)
			c.Ceiling = d.ceiling(c.ID)
		}
		return statusOf(err, 200), c, err
	})
	handle("POST "+p+"/containers/{id}/start", func(r *http.Request) (int, any, error) {
		var req api.StartRequest
		if err := decodeStrict(r, &req); err != nil {
			return statusOf(err, 0), nil, err
		}
		c, err := d.startContainer(r.PathValue("id"), req.PID)
		return statusOf(err, 200), c, err
	})
	handle("DELETE "+api.ContainersPath+"{id}", d.unregister)
	d.runtimeRoutes(mux)
	handle("GET "+p+"/events", func(r *http.Request) (int, any, error) {
		if d.mon == nil {
			return 200, []monitor.Event{}, nil
		}
		return 200, d.mon.Events(time.Time{}), nil
	})
	handle("GET "+p+"/policy", func(r *http.Request) (int, any, error) { return 200, d.policyInfo(), nil })
	handle("POST "+p+"/policy/reload", func(r *http.Request) (int, any, error) {
		if err := d.reload(); err != nil {
			return 422, nil, err
		}
		return 200, d.policyInfo(), nil
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.reply(w, "other", http.StatusNotFound, nil, fmt.Errorf("no endpoint %s %s (see GET %s/node)", r.Method, r.URL.Path, api.Prefix))
	})
	return mux
}

func (d *Daemon) register(r *http.Request) (int, any, error) {
	var req api.RegisterRequest
	if err := decodeStrict(r, &req); err != nil {
		return statusOf(err, 0), nil, err
	}
	// Untrusted: the same check as a container's annotations (policy/classify).
	reg, err := classify.Request(req, d.policy())
	if err != nil {
		return statusOf(err, 0), nil, err
	}
	c, code, err := d.registerContainer(reg)
	return code, c, err
}

// registerContainer admits and registers a container and creates its control block; it is
// shared by POST /v1/containers and the runtime's create request, which both made reg with
// policy/classify. The code is the HTTP status that reports the outcome.
func (d *Daemon) registerContainer(reg classify.Registration) (api.Container, int, error) {
	req := reg.Request()
	// The entry and the control block change together: an unregistration of the same id
	// cannot run between the two steps (see idLocks).
	defer d.ids.lock(req.ID)()
	if req.Class == api.Offline && d.guard != nil {
		if _, err := d.reg.Get(req.ID); err != nil { // a retry of an admitted one is fine
			if err := d.guard.Admit(req.GPUs); err != nil {
				return api.Container{}, 409, fmt.Errorf("offline container %s not admitted: %w", req.ID, err)
			}
		}
	}
	c, created, err := d.reg.Add(reg, d.controls.Paths(req.ID))
	if err != nil {
		return api.Container{}, statusOf(err, 200), err
	}
	// Also for a repeated registration: a registered container always has its block.
	if err := d.controls.Ensure(c, d.policy()); err != nil {
		if !created {
			return api.Container{}, 500, err
		}
		// Without its control block the container cannot be wired: undo the registration.
		if rerr := d.reg.Remove(c.ID); rerr != nil {
			d.log.Error("cannot undo registration", "id", c.ID, "err", rerr)
		}
		return api.Container{}, 500, err
	}
	if !created {
		return c, 200, nil
	}
	d.log.Info("container registered", "id", c.ID, "class", c.Class, "gpus", c.GPUs, "namespace", c.Namespace)
	return c, 201, nil
}

func (d *Daemon) unregister(r *http.Request) (int, any, error) {
	if err := d.unregisterContainer(r.PathValue("id"), "asked"); err != nil {
		return statusOf(err, 204), nil, err
	}
	return 204, nil, nil
}

// decodeStrict reads a JSON request body of at most maxBody bytes with api.DecodeStrict;
// every endpoint that takes a JSON body goes through it.
func decodeStrict(r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return fmt.Errorf("%w: request body is larger than %d bytes", api.ErrInvalid, maxBody)
		}
		return fmt.Errorf("%w: cannot read the request body: %v", api.ErrInvalid, err)
	}
	return api.DecodeStrict(data, v)
}

// ceiling is an offline container's effective SM ceiling as the guard last set it.
func (d *Daemon) ceiling(id string) *api.Ceiling {
	if d.guard == nil {
		return nil
	}
	if c, ok := d.guard.Ceiling(id); ok {
		return &c
	}
	return nil
}

// usage reads a container's usage under its id's lock, so that an unregistration cannot
// unmap the block while it is read.
func (d *Daemon) usage(id string) *api.Usage {
	defer d.ids.lock(id)()
	return d.controls.Usage(id)
}

// startContainer records a container's host pid and watches the process; the API's
// /start and the runtime's start report both come here.
func (d *Daemon) startContainer(id string, pid int) (api.Container, error) {
	if err := api.ValidateID(id); err != nil {
		return api.Container{}, err
	}
	if err := plausibleContainerPID(pid); err != nil {
		return api.Container{}, err
	}
	defer d.ids.lock(id)()
	c, err := d.reg.Start(id, pid)
	if err != nil {
		return c, err
	}
	d.log.Info("container started", "id", c.ID, "pid", c.PID, "class", c.Class)
	d.watchExit(c)
	return c, nil
}

// newAPIServer is an HTTP server with the API's timeouts: a client that sends its headers
// too slowly, never finishes its body, or leaves a keep-alive connection idle is cut off,
// so that idle or stalled connections cannot pile up in muxd.
func (d *Daemon) newAPIServer(h http.Handler) *http.Server {
	t := d.opts.Timeouts.orDefault()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.Header,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
}

func statusOf(err error, ok int) int {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, registry.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, registry.ErrConflict):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func (d *Daemon) reply(w http.ResponseWriter, route string, code int, body any, err error) {
	d.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		body = api.Error{Error: err.Error()}
	}
	w.WriteHeader(code)
	if code == http.StatusNoContent || body == nil {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(body)
}
