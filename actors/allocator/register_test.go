package allocator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"pollux/actors/allocator"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/internal/poll"
)

// batchCounter records the sizes of the allocators' registration
// batches.
type batchCounter struct {
	mu    sync.Mutex
	sizes []int
}

func (b *batchCounter) all() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...)
}

// countingStore is a server whose registration batches are counted.
type countingStore struct {
	*consensus.Server
	b *batchCounter
}

func (s countingStore) RegisterNodes(ctx context.Context, nodes []state.Node) ([]error, error) {
	s.b.mu.Lock()
	s.b.sizes = append(s.b.sizes, len(nodes))
	s.b.mu.Unlock()
	return s.Server.RegisterNodes(ctx, nodes)
}

func TestAgentsJoiningAtOnceRegisteredInOneBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	const nodes = 40
	b := &batchCounter{}
	c := newTCluster(t, clusterOpts{servers: 3, nodes: nodes, gpus: 1,
		store: func(s *consensus.Server) allocator.Store { return countingStore{s, b} }})
	poll.Until(t, 60*time.Second, "every agent registered", func() bool {
		st := c.leader().srv.LocalState()
		alive := 0
		for _, n := range st.Nodes {
			if n.Health == state.Alive {
				alive++
			}
		}
		return alive == nodes
	})
	sizes := b.all()
	// A batch is written again only if leadership moved before its
	// commit was known; the first holds every agent.
	if len(sizes) == 0 || sizes[0] != nodes {
		t.Fatalf("registration batches %v: want the first of all %d agents", sizes, nodes)
	}
	// Registered nodes are not written again.
	n := len(b.all())
	c.waitRounds("three rounds", c.roundMark(), 3, nil)
	if got := b.all(); len(got) != n {
		t.Errorf("batches after the registration: %v (had %d)", got, n)
	}
}
