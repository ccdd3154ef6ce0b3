package daemon

// The endpoints on the container-creation path. muxflow-runtime and muxflow-hook are small
// C programs that call them with a raw config.json or OCI state, so that the work that
// needs Go (the runtime-spec types, the policy, the registry) runs here, in a warm process,
// instead of in a Go program started for every container. Their answers are meant for C
// clients: a 204 or a body with an explicit Content-Length on success, and one text/plain
// sentence on failure, which the runtime hands to containerd as its error.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/blocks"
	"github.com/muxflow/muxflow/muxd/hookstate"
	"github.com/muxflow/muxflow/muxd/registry"
	"github.com/muxflow/muxflow/muxd/specedit"
	"github.com/muxflow/muxflow/muxd/wiring"
)

func (d *Daemon) runtimeRoutes(mux *http.ServeMux) {
	handle := func(pattern string, h func(*http.Request) (int, []byte, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			// Root only, whatever node.allow_uids says: the runtime runs as root, and the
			// create request has muxd read files under the bundle path it names.
			if err := authorizeRoot(r.Context(), "muxd's runtime endpoints"); err != nil {
				d.log.Warn("api request refused", "path", r.URL.Path, "err", err)
				d.replyRaw(w, pattern, http.StatusForbidden, nil, err)
				return
			}
			code, body, err := h(r)
			d.replyRaw(w, pattern, code, body, err)
		})
	}
	handle("POST "+api.RuntimeCreatePath, d.runtimeCreate)
	handle("POST "+api.RuntimeHooksPath+"{hook}", d.runtimeHook)
}

// runtimeCreate answers muxflow-runtime's create request: the query names the container
// (id, bundle, and hook = muxflow-hook's path when the spec is to get the createRuntime hook
// that reports the pid, or pid_file = the absolute path of the runtime's pid file, which
// muxd then watches when it can: pidwatch.go) and the body is the bundle's config.json.
// 204: not a GPU container, run it unchanged; 200: the wired config.json, the container is
// registered, and the runtime reports its pid; 201: the same, and muxd watches the pid
// file (the runtime reports nothing).
// The three steps: package prepare inspects the spec and makes the registration
// (policy/classify), muxd registers it as POST /v1/containers does, and prepare wires the
// spec for the registered container; when the wiring fails, the registration is undone.
func (d *Daemon) runtimeCreate(r *http.Request) (int, []byte, error) {
	raw, code, err := readBody(r, specedit.MaxSpecSize, "config.json")
	if err != nil {
		return code, nil, err
	}
	q := r.URL.Query()
	req := specedit.Request{ID: q.Get("id"), Bundle: q.Get("bundle"), HookBinary: q.Get("hook"), Spec: raw}
	p := d.policy()
	pr, err := specedit.Inspect(req, p)
	switch {
	case errors.Is(err, specedit.ErrInvalid):
		return http.StatusBadRequest, nil, err
	case err != nil:
		return http.StatusInternalServerError, nil, err
	case pr == nil:
		return http.StatusNoContent, nil, nil
	}
	c, code, err := d.registerContainer(pr.Registration)
	if err != nil {
		return code, nil, fmt.Errorf("muxflow: muxd refused GPU container %s: %w", req.ID, err)
	}
	out, err := pr.Wire(p, c, blocks.MPSThreadCeiling(c, p))
	if err != nil {
		if uerr := d.unregisterContainer(c.ID, "its wiring failed"); uerr != nil {
			err = errors.Join(err, fmt.Errorf("undo the registration: %w", uerr))
		}
		return http.StatusInternalServerError, nil, err
	}
	code = http.StatusOK
	if pidFile := q.Get("pid_file"); pidFile != "" && req.HookBinary == "" {
		if err := d.watchPidFile(c.ID, pidFile, peerPID(r.Context())); err != nil {
			d.log.Info("not watching the runtime's pid file; the runtime reports the pid", "id", c.ID, "pid_file", pidFile, "err", err)
		} else {
			code = http.StatusCreated
		}
	}
	d.log.Info("GPU container wired", "id", c.ID, "class", c.Class, "bundle", req.Bundle)
	return code, out, nil
}

// runtimeHook receives the OCI state muxflow-hook read from its stdin: create-runtime
// records the container's host pid, poststop unregisters it.
func (d *Daemon) runtimeHook(r *http.Request) (int, []byte, error) {
	hook := r.PathValue("hook")
	if hook != wiring.HookStart && hook != wiring.HookStop {
		return http.StatusNotFound, nil, fmt.Errorf("muxd: no OCI hook %q; want %s or %s", hook, wiring.HookStart, wiring.HookStop)
	}
	raw, code, err := readBody(r, hookstate.MaxStateSize, "container state")
	if err != nil {
		return code, nil, err
	}
	st, err := hookstate.ParseState(bytes.NewReader(raw))
	if err != nil {
		return http.StatusBadRequest, nil, err
	}
	if hook == wiring.HookStart {
		if st.Pid <= 0 {
			return http.StatusBadRequest, nil, fmt.Errorf("container %s: the runtime gave no pid", st.ID)
		}
		if _, err := d.startContainer(st.ID, st.Pid); err != nil {
			return statusOf(err, 0), nil, fmt.Errorf("cannot record the start of container %s (pid %d): %w", st.ID, st.Pid, err)
		}
		return http.StatusNoContent, nil, nil
	}
	err = d.unregisterContainer(st.ID, "poststop hook")
	if err != nil && !errors.Is(err, registry.ErrNotFound) { // not found: already dropped
		return statusOf(err, 0), nil, fmt.Errorf("cannot unregister container %s: %w", st.ID, err)
	}
	return http.StatusNoContent, nil, nil
}

// readBody reads a request body of at most limit bytes.
func readBody(r *http.Request, limit int64, what string) ([]byte, int, error) {
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("%s is larger than %d bytes", what, limit)
	}
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("read %s: %w", what, err)
	}
	return data, 0, nil
}

// replyRaw answers a C client: no body (204), a JSON document with its length, or the
// error as one text/plain line.
func (d *Daemon) replyRaw(w http.ResponseWriter, route string, code int, body []byte, err error) {
	d.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	if err != nil {
		body = []byte(err.Error() + "\n")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else if code != http.StatusNoContent {
		w.Header().Set("Content-Type", "application/json")
	}
	if code != http.StatusNoContent {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(code)
	if code != http.StatusNoContent {
		_, _ = w.Write(body)
	}
}
