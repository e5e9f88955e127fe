package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"pollux/cluster"
)

// memberLister lists the gossip's members.
type memberLister interface{ Members() []cluster.Member }

// checkJoinTopology waits until a server advertises the cluster's
// topology levels and checks the agent's declared topology against
// them; a topology that does not fit (a level missing, unknown or out
// of order) stops the agent through fail: the leader would refuse to
// register it anyway.
func checkJoinTopology(ctx context.Context, m memberLister, topology string, fail context.CancelCauseFunc) {
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
