// Package control manages the per-container directories under muxd's run directory that
// hold each container's control block: the limits muxd writes (mounted read-only into the
// container) and the usage libxcuda writes back.
package control

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/muxflow/muxflow/muxd/api"
)

// Manager owns <run_dir>/c/<id>/ for every registered container.
type Manager struct {
	root string // <run_dir>/c
}

// NewManager prepares <runDir>/c.
func NewManager(runDir string) (*Manager, error) {
	root := filepath.Join(runDir, "c")
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("create control directory: %w", err)
	}
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("control directory %s is not a directory (a symlink is refused)", root)
	}
	return &Manager{root: root}, nil
}

// Paths returns where a container's files live; id must already be validated.
func (m *Manager) Paths(id string) api.ControlPaths {
	dir := filepath.Join(m.root, id)
	return api.ControlPaths{Dir: dir}
}

// Ensure creates the container's directory (idempotent).
func (m *Manager) Ensure(c api.Container) error {
	if err := api.ValidateID(c.ID); err != nil {
		return err
	}
	dir := m.Paths(c.ID).Dir
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create control directory for %s: %w", c.ID, err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("control directory for %s is not a directory", c.ID)
	}
	return nil
}

// Remove deletes the container's directory and everything in it.
func (m *Manager) Remove(id string) error {
	if err := api.ValidateID(id); err != nil {
		return err
	}
	if err := os.RemoveAll(m.Paths(id).Dir); err != nil {
		return fmt.Errorf("remove control directory for %s: %w", id, err)
	}
	return nil
}
