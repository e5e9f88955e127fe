package consensus

import (
	"fmt"
	"log/slog"
	"pollux/consensus/state"
	"time"

	"github.com/hashicorp/raft"
)

// Config tunes one server. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// ID names the server in the Raft configuration (required).
	ID raft.ServerID
	// HeartbeatTimeout and ElectionTimeout are how long a follower (or
	// candidate) goes without hearing from a leader before it starts an
	// election; LeaderLeaseTimeout is how long a leader stays leader
	// without hearing from a quorum (at most HeartbeatTimeout).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long a leader waits, when idle, before it tells
	// followers the commit index.
	CommitTimeout time.Duration
	// WriteTimeout bounds a write (including retries while a leader is
	// elected) whose context has no deadline.
	WriteTimeout time.Duration
	// MinFreeSpace is the free space the data directory's file system must
	// keep for the leader to accept writes (default 1 MiB; only with a
	// store that reports it, see Stores.FreeSpace).
	MinFreeSpace uint64
	// MaxAppendEntries is the most entries sent (and group-committed) at
	// once.
	MaxAppendEntries int
	// SnapshotInterval, SnapshotThreshold and TrailingLogs: check every
	// interval whether threshold entries have been logged since the last
	// snapshot; keep trailing entries after one.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// Logger receives the server's and Raft's logs (nil: slog.Default()).
	Logger *slog.Logger
	// RaftLogLevel is the least level of Raft's own messages that is
	// logged (DefaultConfig: warnings; the zero value is slog.LevelInfo).
	RaftLogLevel slog.Level
	// Now is the clock of the submitters' token buckets on the leader
	// (nil: time.Now).
	Now func() time.Time
}

// DefaultConfig returns LAN-tuned defaults: 200 ms heartbeat and election
// timeouts and a 100 ms leader lease, which on loopback re-elected in
// about 0.45 s after a leader's process died (Raft's own 1 s defaults:
// about 2 s), 0.2 s since a follower elects on the lease's timeouts
// once the dead leader's port refuses (leaderloss.go).
func DefaultConfig(id raft.ServerID) Config {
	return Config{
		ID:                 id,
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout:      10 * time.Millisecond,
		WriteTimeout:       5 * time.Second,
		MaxAppendEntries:   512,
		SnapshotInterval:   30 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		Logger:             slog.Default(),
		RaftLogLevel:       slog.LevelWarn,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig(c.ID)
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	set(&c.ElectionTimeout, d.ElectionTimeout)
	set(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	set(&c.CommitTimeout, d.CommitTimeout)
	set(&c.WriteTimeout, d.WriteTimeout)
	set(&c.SnapshotInterval, d.SnapshotInterval)
	if c.MinFreeSpace == 0 {
		c.MinFreeSpace = 1 << 20
	}
	if c.MaxAppendEntries == 0 {
		c.MaxAppendEntries = d.MaxAppendEntries
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// raftConfig translates c into Raft's configuration and validates it.
func (c Config) raftConfig() (*raft.Config, error) {
	rc := raft.DefaultConfig()
	rc.LocalID = c.ID
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.MaxAppendEntries = c.MaxAppendEntries
	rc.BatchApplyCh = true
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	rc.Logger = newHCLogger(c.Logger, c.RaftLogLevel)
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: raft config: %w", state.ErrInvalid, err)
	}
	return rc, nil
}
