package server

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/server/api"
	"pollux/cluster"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/internal/usage"
	"pollux/optimizer/topology"
)

// initCluster sets the cluster's configuration (a random cluster id and
// report key, the checkpoint root, the topology levels) once a leader can
// take it; if the cluster already has another checkpoint root or other
// levels it stops the server (fail): they are the cluster's, set at
// bootstrap, and jobs' checkpoints are under the root.
func initCluster(ctx context.Context, srv *consensus.Server, root string, levels []string, log *slog.Logger, fail context.CancelCauseFunc) {
	init := state.NewInitCluster(root, levels...)
	for {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := srv.InitCluster(c, init)
		cancel()
		switch {
		case err == nil:
			cfg := srv.LocalState().Config
			log.Info("server: cluster configuration", "cluster", cfg.ID, "checkpoint_root", root)
			return
		case errors.Is(err, state.ErrClusterConfig):
			fail(usage.Errorf("server: --checkpoint-root %q, --topology-levels %q: %w", root, strings.Join(levels, ","), err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// configSource is what watchLevels reads the replicated configuration
// from.
type configSource interface {
	LocalState() *state.State
}

// metaUpdater is the membership whose metadata watchLevels updates.
type metaUpdater interface {
	Local() cluster.Member
	UpdateMeta(cluster.Meta, time.Duration) error
}

// watchLevels waits until the replicated state holds the cluster's
// configuration, then checks this server against its topology levels
// (given, if this server was started with --topology-levels; its own
// --topology) and advertises them in its gossip metadata, so that agents
// can check their topology when they join. A mismatch stops the server
// through fail.
func watchLevels(ctx context.Context, src configSource, m metaUpdater, given []string, log *slog.Logger, fail context.CancelCauseFunc) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		if cfg := src.LocalState().Config; cfg.ID != "" {
			levels := cfg.TopologyLevels()
			if given != nil && !slices.Equal(given, levels) {
				fail(usage.Errorf("server: --topology-levels %s: the cluster's levels are %s (set at bootstrap)",
					strings.Join(given, ","), strings.Join(levels, ",")))
				return
			}
			meta := m.Local().Meta
			if _, err := cluster.CheckTopology(meta.Topology, cfg.Levels); err != nil {
				fail(usage.Errorf("server: --topology: %w", err))
				return
			}
			meta.Levels = strings.Join(levels, ",")
			if err := m.UpdateMeta(meta, 5*time.Second); err != nil {
				log.Warn("server: advertising the topology levels", "err", err)
				return
			}
			log.Info("server: topology levels checked and advertised", "levels", meta.Levels)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// raftServers lists the Raft configuration.
type raftServers interface {
	Servers() ([]raft.Server, error)
}

// memberLister lists the gossip's members.
type memberLister interface{ Members() []cluster.Member }

// warnRackMajority warns, once every voter is seen in the gossip (or
// after wait), when a majority of the voters share one rack: losing that
// rack would lose the quorum.
func warnRackMajority(ctx context.Context, rs raftServers, members memberLister, wait time.Duration, log *slog.Logger) {
	deadline := time.Now().Add(wait)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		servers, err := rs.Servers()
		if err == nil && len(servers) > 0 {
			peers, seen := racksOf(servers, members.Members())
			if seen || time.Now().After(deadline) {
				if rack, ids := api.RackMajority(peers); rack != "" {
					log.Warn("server: a majority of the voters share one rack: losing it loses the quorum; "+
						"run servers in other racks (--topology rack=R)", "rack", rack, "voters", strings.Join(ids, ","), "of", len(peers))
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// racksOf gives every server of the Raft configuration its rack as gossip
// tells, and reports whether gossip sees every voter.
func racksOf(servers []raft.Server, members []cluster.Member) ([]api.Peer, bool) {
	rack := map[string]string{}
	for _, m := range members {
		if m.Meta.Role == cluster.RoleServer {
			rack[m.Name] = cmp.Or(m.Meta.Rack, topology.DefaultDomain)
		}
	}
	all := true
	var peers []api.Peer
	for _, s := range servers {
		p := api.Peer{ID: string(s.ID), Voter: s.Suffrage == raft.Voter, Rack: rack[string(s.ID)]}
		if p.Voter && p.Rack == "" {
			all = false
		}
		peers = append(peers, p)
	}
	return peers, all
}
