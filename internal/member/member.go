package member

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"pollux/cluster"
	topo "pollux/optimizer/topology"
)

// Place is the gossip metadata of a member's place: its topology (or
// the older rack alone) and GPU type, checked for syntax. Whether the
// topology fits the cluster's levels is checked once the member has
// joined, and by the leader.
func Place(topology, rack, gpuType string) (cluster.Meta, error) {
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

// joinRetry is how long JoinUntil waits between attempts.
const joinRetry = 500 * time.Millisecond

// JoinUntil retries joining m to the cluster through addrs until one
// address answers or ctx ends (its error).
func JoinUntil(ctx context.Context, m *cluster.Membership, addrs []string, log *slog.Logger) error {
	for {
		n, err := m.Join(addrs)
		if err == nil {
			log.Info("agent: joined the cluster", "via", n)
			return nil
		}
		log.Warn("agent: join failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(joinRetry):
		}
	}
}

// LogEvents logs m's membership changes at debug level until m shuts
// down.
func LogEvents(m *cluster.Membership, log *slog.Logger) {
	for ev := range m.Events() {
		log.Debug("membership", "event", ev.Kind.String(), "member", ev.Member.Name, "role", ev.Member.Meta.Role)
	}
}
