package consensus

import (
	"context"
	"fmt"
	"pollux/consensus/state"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// benchAllocation is a 16-job allocation over 8 nodes, shifted by gen so
// that consecutive allocations differ.
func benchAllocation(gen, term uint64) *state.CommitAllocation {
	jobs := make(map[string][]state.Slot, 16)
	for j := range 16 {
		jobs[fmt.Sprintf("job-%d", j)] = []state.Slot{{Node: fmt.Sprintf("node-%d", (j+int(gen))%8), GPUs: 1 + int(gen)%2}}
	}
	return &state.CommitAllocation{Generation: gen, Term: term, Jobs: jobs}
}

func benchFSM(b *testing.B) *fsmApplier {
	a := &fsmApplier{f: NewFSM()}
	for i := range 8 {
		a.must(b, 1, &state.RegisterNode{Node: state.Node{ID: fmt.Sprintf("node-%d", i), GPUs: 8, Health: state.Alive}})
	}
	for j := range 16 {
		a.must(b, 1, &state.SubmitJob{ID: fmt.Sprintf("job-%d", j), Spec: testSpec()})
	}
	return a
}

func BenchmarkEncodeAllocation(b *testing.B) {
	c := benchAllocation(1, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := state.Encode(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAllocation(b *testing.B) {
	enc, err := state.Encode(benchAllocation(1, 1))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := state.Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFSMApplyAllocation(b *testing.B) {
	a := benchFSM(b)
	gen := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		gen++
		if err := a.apply(b, 1, benchAllocation(gen, 1)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeState(b *testing.B) {
	a := benchFSM(b)
	a.must(b, 1, benchAllocation(1, 1))
	s := a.f.State()
	b.ReportAllocs()
	for b.Loop() {
		state.EncodeState(s)
	}
}

// BenchmarkClusterCommitAllocation commits pipelined batches of 64
// allocations on a 3-server in-memory cluster (no disk: the Raft and
// state-machine cost alone).
func BenchmarkClusterCommitAllocation(b *testing.B) {
	c := newCluster(b, 3, benchConfig)
	benchCommits(b, c.leader(c.members...).srv)
}

// BenchmarkRaftPortCommitAllocation is BenchmarkClusterCommitAllocation
// over real Raft ports on loopback (in memory otherwise), with mutual
// TLS and in plaintext: the cost of TLS on replication.
func BenchmarkRaftPortCommitAllocation(b *testing.B) {
	for _, mode := range []struct {
		name string
		tls  bool
	}{{"tls", true}, {"plaintext", false}} {
		b.Run(mode.name, func(b *testing.B) {
			c := newPortCluster(b, mode.tls, benchConfig)
			benchCommits(b, c.leader(c.members...).srv)
		})
	}
}

// benchConfig has Raft's own 1 s timeouts: a benchmark saturating a
// loaded machine must not depose its leader (which fences the batch in
// flight), and the timeouts do not enter the commit path.
func benchConfig(id raft.ServerID) Config {
	c := testConfig(id)
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	return c
}

// benchCommits commits batches of 64 allocations on leader.
func benchCommits(b *testing.B, leader *Server) {
	ctx := context.Background()
	var setup []state.Command
	for i := range 8 {
		setup = append(setup, &state.RegisterNode{Node: state.Node{ID: fmt.Sprintf("node-%d", i), GPUs: 8, Health: state.Alive}})
	}
	for j := range 16 {
		setup = append(setup, &state.SubmitJob{ID: fmt.Sprintf("job-%d", j), Spec: testSpec()})
	}
	if _, err := leader.Apply(ctx, setup...); err != nil {
		b.Fatal(err)
	}
	term, _ := leader.Leadership()
	gen := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		cmds := make([]state.Command, 64)
		for i := range cmds {
			gen++
			cmds[i] = benchAllocation(gen, term)
		}
		res, err := leader.Apply(ctx, cmds...)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	b.ReportMetric(float64(gen)/b.Elapsed().Seconds(), "allocs/s")
}
