package consensus

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"golang.org/x/sys/unix"
)

// Files of a data directory.
const (
	boltFile     = "raft.db"
	snapshotDir  = "snapshots"
	keepSnapshot = 2
)

// privateDir creates dir (and its parents) for its owner alone and
// tightens an existing one to 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("consensus: data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("consensus: data dir: %w", err)
	}
	return nil
}

// OpenDisk starts a server whose Raft log and stable store are a bolt
// database (raft-boltdb) in dir and whose snapshots are files under
// dir/snapshots. The directory is created if needed and kept to its owner
// (directories 0700, files 0600: the snapshots hold the report key); a
// server reopened on the directory of a stopped one rejoins its cluster
// with its state. The server owns transport and closes it, and the
// database, on Shutdown.
func OpenDisk(cfg Config, dir string, transport raft.Transport, fwd Forwarder) (*Server, error) {
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, boltFile)})
	if err != nil {
		return nil, fmt.Errorf("consensus: opening %s: %w", boltFile, err)
	}
	files, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, snapshotDir), keepSnapshot, newHCLogger(cfg.Logger, cfg.RaftLogLevel))
	if err != nil {
		_ = bolt.Close()
		return nil, fmt.Errorf("consensus: opening snapshots: %w", err)
	}
	snaps, err := newPrivateSnapshots(files, filepath.Join(dir, snapshotDir))
	if err != nil {
		_ = bolt.Close()
		return nil, err
	}
	s, err := NewServer(cfg, Stores{
		Transport: transport, Logs: bolt, Stable: bolt, Snapshots: snaps,
		Forwarder: fwd, Closers: []io.Closer{bolt},
		FreeSpace: func() (uint64, error) {
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				return 0, err
			}
			return st.Bavail * uint64(st.Bsize), nil
		},
	})
	if err != nil {
		_ = bolt.Close()
		return nil, err
	}
	return s, nil
}
