package wrapper

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// maxSpecSize bounds config.json; real specs are tens of KiB.
const maxSpecSize = 16 << 20

// maxPreloadSize bounds an image's /etc/ld.so.preload.
const maxPreloadSize = 64 << 10

// bundle is an OCI bundle directory opened as an os.Root: every file the wrapper reads or
// writes in it is resolved inside it, so a config.json or rootfs that is a symlink pointing
// out of the bundle cannot make the wrapper read or write elsewhere.
type bundle struct {
	dir  string
	root *os.Root
	raw  []byte
	mode fs.FileMode
}

func openBundle(dir string) (*bundle, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open bundle: %w", err)
	}
	b := &bundle{dir: dir, root: root}
	f, err := root.Open("config.json")
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("open bundle's config.json: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		root.Close()
		return nil, fmt.Errorf("bundle's config.json in %s is not a regular file", dir)
	}
	b.mode = st.Mode().Perm()
	b.raw, err = io.ReadAll(io.LimitReader(f, maxSpecSize+1))
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("read bundle's config.json: %w", err)
	}
	if len(b.raw) > maxSpecSize {
		root.Close()
		return nil, fmt.Errorf("bundle's config.json is larger than %d bytes", maxSpecSize)
	}
	return b, nil
}

func (b *bundle) Close() error { return b.root.Close() }

// readSpecFile reads a spec named outside any bundle (crun's --config), bounded.
func readSpecFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open spec: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("spec %s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSpecSize+1))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	if len(data) > maxSpecSize {
		return nil, fmt.Errorf("spec %s is larger than %d bytes", path, maxSpecSize)
	}
	return data, nil
}

// writeFile replaces name inside the bundle atomically (temporary file, then rename), so a
// crash never leaves a half-written config.json and a symlink at name is replaced, not
// followed.
func (b *bundle) writeFile(name string, data []byte, mode fs.FileMode) error {
	tmp := name + ".muxflow-tmp"
	_ = b.root.Remove(tmp)
	f, err := b.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s in bundle: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		_ = b.root.Remove(tmp)
		return fmt.Errorf("write %s in bundle: %w", name, err)
	}
	if err := f.Close(); err != nil {
		_ = b.root.Remove(tmp)
		return fmt.Errorf("write %s in bundle: %w", name, err)
	}
	if err := b.root.Rename(tmp, name); err != nil {
		_ = b.root.Remove(tmp)
		return fmt.Errorf("replace %s in bundle: %w", name, err)
	}
	return nil
}

// imagePreload returns the image's own /etc/ld.so.preload, or "" when it has none. The
// rootfs is opened as an os.Root so that an absolute symlink inside the image resolves
// inside the image, as it will for the container.
func (b *bundle) imagePreload(s *specs.Spec) (string, error) {
	if s.Root == nil || s.Root.Path == "" {
		return "", nil
	}
	rootfs := s.Root.Path
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(b.dir, rootfs)
	}
	r, err := os.OpenRoot(rootfs)
	if err != nil {
		return "", fmt.Errorf("open container rootfs: %w", err)
	}
	defer r.Close()
	f, err := r.Open("etc/ld.so.preload")
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read image's /etc/ld.so.preload: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPreloadSize+1))
	if err != nil {
		return "", fmt.Errorf("read image's /etc/ld.so.preload: %w", err)
	}
	if len(data) > maxPreloadSize {
		return "", fmt.Errorf("image's /etc/ld.so.preload is larger than %d bytes", maxPreloadSize)
	}
	return string(data), nil
}

// patchSpec writes the changed parts of s back into the original JSON. Only the keys the
// wiring touches are re-encoded; every other byte of every other field — including fields
// this runtime-spec version does not know — is kept as it was.
func patchSpec(raw []byte, s *specs.Spec) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("decode config.json: %w", err)
	}
	var proc map[string]json.RawMessage
	if err := json.Unmarshal(top["process"], &proc); err != nil || proc == nil {
		return nil, fmt.Errorf("config.json has no process object")
	}
	set := func(m map[string]json.RawMessage, key string, v any) error {
		enc, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode %s: %w", key, err)
		}
		if _, had := m[key]; !had && string(enc) == "null" {
			return nil // still absent: do not add "key": null
		}
		m[key] = enc
		return nil
	}
	for _, kv := range []struct {
		m   map[string]json.RawMessage
		key string
		v   any
	}{
		{proc, "env", s.Process.Env},
		{top, "mounts", s.Mounts},
		{top, "hooks", s.Hooks},
		{top, "annotations", s.Annotations},
	} {
		if err := set(kv.m, kv.key, kv.v); err != nil {
			return nil, err
		}
	}
	if err := set(top, "process", proc); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(top); err != nil {
		return nil, fmt.Errorf("encode config.json: %w", err)
	}
	return buf.Bytes(), nil
}
