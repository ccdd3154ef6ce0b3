package wrapper

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// maxSpecSize bounds config.json; real specs are tens of KiB.
const maxSpecSize = 16 << 20

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
