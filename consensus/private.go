package consensus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// privateSnapshots is a raft.SnapshotStore that keeps hashicorp/raft's
// snapshot files (state.bin and meta.json, which hold the report key) to
// their owner, mode 0600 in 0700 directories: the file store writes them
// with the umask's modes.
type privateSnapshots struct {
	raft.SnapshotStore
	dir string
}

// newPrivateSnapshots opens the file snapshot store under dir and tightens
// the modes of whatever an earlier version left there.
func newPrivateSnapshots(store raft.SnapshotStore, dir string) (*privateSnapshots, error) {
	p := &privateSnapshots{SnapshotStore: store, dir: dir}
	if err := p.tighten(); err != nil {
		return nil, err
	}
	return p, nil
}

// Create starts a snapshot whose files are made private when it is closed.
func (p *privateSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := p.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	// The directory in progress is under dir; closing dir to others
	// keeps it private until Close tightens the files themselves.
	if err := os.Chmod(p.dir, 0o700); err != nil {
		_ = sink.Cancel()
		return nil, fmt.Errorf("consensus: snapshots: %w", err)
	}
	return &privateSink{SnapshotSink: sink, store: p}, nil
}

// tighten sets every directory under dir to 0700 and every file to 0600.
func (p *privateSnapshots) tighten() error {
	err := filepath.WalkDir(p.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // reaped meanwhile
			}
			return err
		}
		mode := fs.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		} else if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if info.Mode().Perm() == mode {
			return nil
		}
		if err := os.Chmod(path, mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("consensus: snapshot modes: %w", err)
	}
	return nil
}

// privateSink is a snapshot sink that tightens the store's modes once
// its snapshot is complete.
type privateSink struct {
	raft.SnapshotSink
	store *privateSnapshots
}

// Close completes the snapshot and makes its files private.
func (s *privateSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	return s.store.tighten()
}
