package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/server/api"
	"pollux/cluster"
	"pollux/consensus/state"
	"pollux/optimizer"
	topo "pollux/optimizer/topology"
)

// placeMeta is the gossip metadata of a member's place: its --topology
// (or the older --rack, the rack alone) and --gpu-type, checked for
// syntax. Whether the topology fits the cluster's levels is checked when
// the member has joined (checkJoinTopology) and by the leader.
func placeMeta(topology, rack, gpuType string) (cluster.Meta, error) {
	if rack != "" {
		r := "rack=" + rack
		if topology != "" && topology != r && !strings.HasPrefix(topology, r+",") {
			return cluster.Meta{}, fmt.Errorf("--rack %q and --topology %q disagree: give --topology alone", rack, topology)
		}
		if topology == "" {
			topology = r
		}
	}
	var m cluster.Meta
	levels, domains, err := cluster.ParseTopology(topology)
	if err != nil {
		return m, fmt.Errorf("--topology: %w", err)
	}
	if len(domains) > 0 {
		m.Rack, m.Topology = domains[0], cluster.FormatTopology(levels, domains)
	}
	if gpuType != "" {
		if err := topo.CheckName("GPU type", gpuType); err != nil {
			return m, fmt.Errorf("--gpu-type: %w", err)
		}
		m.GPUType = gpuType
	}
	return m, nil
}

// levelsMember is what checkJoinTopology needs of a membership.
type levelsMember interface{ Members() []cluster.Member }

// checkJoinTopology waits until a server advertises the cluster's
// topology levels and checks the member's declared topology against
// them; a topology that does not fit (a level missing, unknown or out
// of order) stops the member through fail: the leader would refuse to
// register it anyway.
func checkJoinTopology(ctx context.Context, m levelsMember, topology string, fail context.CancelCauseFunc) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		for _, mb := range m.Members() {
			if mb.Meta.Role != cluster.RoleServer || mb.Meta.Levels == "" {
				continue
			}
			levels := strings.Split(mb.Meta.Levels, ",")
			if _, err := cluster.CheckTopology(topology, levels); err != nil {
				fail(fmt.Errorf("refused at join: the cluster's topology levels are %s (server %s): %w",
					mb.Meta.Levels, mb.Name, err))
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serverPolicies are the names `pollux server --policy` accepts: auto
// (pollux on one GPU type, pollux-het on several) and the policies of the
// registry that run live.
var serverPolicies = []string{"auto", "pollux", "pollux-het", "sia", "pollux-unaware"}

// serverPolicy is the allocator's policy of `pollux server --policy`: the
// one for rounds on one GPU type and the one for several.
func serverPolicy(name string) (single, typed optimizer.Policy, err error) {
	if !slices.Contains(serverPolicies, name) {
		last := len(serverPolicies) - 1
		return nil, nil, fmt.Errorf("server: --policy %q: want %s or %s", name, strings.Join(serverPolicies[:last], ", "), serverPolicies[last])
	}
	singleName, typedName := name, name
	if name == "auto" {
		singleName, typedName = "pollux", "pollux-het"
	}
	if single, err = optimizer.Lookup(singleName, optimizer.Options{}); err != nil {
		return nil, nil, fmt.Errorf("server: --policy: %w", err)
	}
	if typed, err = optimizer.Lookup(typedName, optimizer.Options{}); err != nil {
		return nil, nil, fmt.Errorf("server: --policy: %w", err)
	}
	return single, typed, nil
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
				fail(usageError{fmt.Errorf("server: --topology-levels %s: the cluster's levels are %s (set at bootstrap)",
					strings.Join(given, ","), strings.Join(levels, ","))})
				return
			}
			meta := m.Local().Meta
			if _, err := cluster.CheckTopology(meta.Topology, cfg.Levels); err != nil {
				fail(usageError{fmt.Errorf("server: --topology: %w", err)})
				return
			}
			meta.Levels = strings.Join(levels, ",")
			if err := m.UpdateMeta(meta, 5*time.Second); err != nil {
				log.Warn("server: advertising the topology levels", "err", err)
			}
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

// warnRackMajority warns, once every voter is seen in the gossip (or
// after wait), when a majority of the voters share one rack: losing that
// rack would lose the quorum.
func warnRackMajority(ctx context.Context, rs raftServers, members levelsMember, wait time.Duration, log *slog.Logger) {
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
			rack[m.Name] = cmp.Or(m.Meta.Rack, topo.DefaultDomain)
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
