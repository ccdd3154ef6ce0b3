package specedit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// maxPreloadSize bounds an image's /etc/ld.so.preload.
const maxPreloadSize = 64 << 10

// imagePreload returns the image's own /etc/ld.so.preload, or "" when it has none, so that
// the container keeps preloading what its image asks for after muxflow's file replaces it.
// The rootfs is opened as an os.Root: a symlink in the image that leads out of it is
// refused, never followed to a host file.
func imagePreload(bundle string, s *specs.Spec) (string, error) {
	if s.Root == nil || s.Root.Path == "" {
		return "", nil
	}
	rootfs := s.Root.Path
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(bundle, rootfs)
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

// ContainerdNamespace reads the containerd namespace (k8s.io, moby, ...) from the bundle
// path containerd's runc shim uses, <state>/io.containerd.runtime.v2.task/<namespace>/<id>;
// muxd needs it to stop the container through containerd. Other callers have none.
func ContainerdNamespace(bundle string) string {
	parent := filepath.Dir(bundle)
	if filepath.Base(filepath.Dir(parent)) != "io.containerd.runtime.v2.task" {
		return ""
	}
	ns := filepath.Base(parent)
	if len(ns) > 76 || !validNamespace(ns) {
		return ""
	}
	return ns
}

// validNamespace follows containerd's rule: labels of letters and digits, joined by '.',
// '_' or '-' inside a label.
func validNamespace(ns string) bool {
	if ns == "" {
		return false
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(ns)-1 || (c != '.' && c != '_' && c != '-')) {
			return false
		}
	}
	return true
}

// PodName is "namespace/name" from the annotations containerd's CRI plugin sets.
func PodName(ann map[string]string) string {
	ns, name := annotation(ann, "io.kubernetes.cri.sandbox-namespace", 253), annotation(ann, "io.kubernetes.cri.sandbox-name", 253)
	if ns == "" || name == "" {
		return ""
	}
	return ns + "/" + name
}

// annotation returns a bounded annotation value; oversized values are dropped, not cut.
func annotation(ann map[string]string, key string, limit int) string {
	v := ann[key]
	if len(v) > limit {
		return ""
	}
	return v
}
