package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"pollux/cluster"
	"pollux/optimizer"
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
		if err := optimizer.CheckName("GPU type", gpuType); err != nil {
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
