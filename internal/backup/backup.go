package backup

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"pollux/consensus/state"
)

// WriteFile writes b to path (mode 0600) through a temporary file in
// the same directory, so that path holds the old backup or the new one,
// never a part.
func WriteFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".snapshot-*")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("backup: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("backup: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// ReadFile reads a backup and checks that it decodes (a state snapshot
// of at most state.MaxSnapshot bytes).
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, state.MaxSnapshot+1))
	if err != nil {
		return nil, fmt.Errorf("backup: %s: %w", path, err)
	}
	if len(b) > state.MaxSnapshot {
		return nil, fmt.Errorf("backup: %s: %w: over %d bytes", path, state.ErrMalformed, state.MaxSnapshot)
	}
	if _, err := state.DecodeState(b); err != nil {
		return nil, fmt.Errorf("backup: %s is not a snapshot of pollux operator snapshot save: %w", path, err)
	}
	return b, nil
}
