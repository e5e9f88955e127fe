package allocator

import (
	"slices"
	"testing"
	"time"

	"pollux/cluster"
	"pollux/consensus/state"
)

// A node that also runs a control-plane server, by name or by address
// off loopback, is never drained; nodes on loopback are told apart by
// name only (every process of a test cluster shares 127.0.0.1).
func TestRunsServer(t *testing.T) {
	members := []cluster.Member{
		{Name: "s0", Addr: "10.0.0.1:7946", Meta: cluster.Meta{Role: cluster.RoleServer}},
		{Name: "s1", Addr: "127.0.0.1:7947", Meta: cluster.Meta{Role: cluster.RoleServer}},
		{Name: "auto-9", Addr: "10.0.0.9:7946", Meta: cluster.Meta{Role: cluster.RoleAgent}},
	}
	a := &allocator{cfg: Config{Members: func() []cluster.Member { return members }}}
	for _, tc := range []struct {
		node state.Node
		want bool
	}{
		{state.Node{ID: "s0", Addresses: []string{"10.0.0.7:8090"}}, true},
		{state.Node{ID: "auto-1", Addresses: []string{"10.0.0.1:8090", "10.0.0.1:9000"}}, true},
		{state.Node{ID: "auto-2", Addresses: []string{"127.0.0.1:8090"}}, false},
		{state.Node{ID: "auto-9", Addresses: []string{"10.0.0.9:8090"}}, false},
		{state.Node{ID: "auto-3", Addresses: []string{"not an address"}}, false},
	} {
		if got := a.runsServer(&tc.node); got != tc.want {
			t.Errorf("%s at %v: runs a server %v, want %v", tc.node.ID, tc.node.Addresses, got, tc.want)
		}
	}
}

// The scale-down window: a shrink waits until the desired size has been
// below the cluster's for the delay, then goes down to the largest size
// wanted meanwhile; without a delay it goes to the size wanted now.
func TestShrinkToWaitsForTheDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at            time.Duration
		desired, have int
		want          int
	}
	tests := []struct {
		name  string
		delay time.Duration
		steps []step
	}{
		{"no delay", 0, []step{{0, 2, 4, 2}, {time.Second, 1, 4, 1}}},
		{"held until the delay", time.Minute, []step{{0, 2, 4, 4}, {30 * time.Second, 1, 4, 4}, {time.Minute, 1, 4, 2}}},
		{"the largest size wanted in the window", time.Minute, []step{{0, 1, 4, 4}, {20 * time.Second, 3, 4, 4}, {70 * time.Second, 1, 4, 3}}},
	}
	for _, tc := range tests {
		var s scaleState
		for i, st := range tc.steps {
			if got := s.shrinkTo(st.desired, st.have, t0.Add(st.at), tc.delay); got != st.want {
				t.Errorf("%s, step %d: shrink to %d, want %d", tc.name, i, got, st.want)
			}
		}
	}
}

// TestMasterPortPerIncarnation: a job's rendezvous port is in
// 29500-32767, below the kernel's ephemeral ports, and changes with the incarnation, so that a restart after
// rank 0 could not listen does not try the same port again.
func TestMasterPortPerIncarnation(t *testing.T) {
	for _, job := range []string{"digits-cnn-2", "lm-4", "j"} {
		seen := map[uint32]bool{}
		for inc := uint64(1); inc <= 10; inc++ {
			p := masterPort(job, inc)
			if p < 29500 || p > 32767 {
				t.Fatalf("%s incarnation %d: port %d", job, inc, p)
			}
			if masterPort(job, inc) != p {
				t.Fatalf("%s incarnation %d: port not deterministic", job, inc)
			}
			seen[p] = true
		}
		if len(seen) != 10 {
			t.Errorf("%s: %d ports for 10 incarnations", job, len(seen))
		}
	}
}

// Every machine the provider still holds counts against --max-nodes:
// one that died or was drained is held until the provider has removed
// it, so its replacement waits (the failure CI once saw: a new leader
// asked for a third machine while the second, declared dead, still
// ran).
func TestAddableCountsMachinesStillHeld(t *testing.T) {
	node := func(id string, h state.Health) *state.Node { return &state.Node{ID: id, GPUs: 4, Health: h} }
	managed := func(name string, p state.ScalePhase) *state.ScaleNode { return &state.ScaleNode{Name: name, Phase: p} }
	st := &state.State{
		Nodes: map[string]*state.Node{
			"t4":     node("t4", state.Alive),
			"auto-1": node("auto-1", state.Alive),
			"auto-2": node("auto-2", state.Dead),
			"auto-3": node("auto-3", state.Alive),
			"auto-5": node("auto-5", state.Left),
		},
		Scale: state.Scale{Nodes: map[string]*state.ScaleNode{
			"auto-1": managed("auto-1", state.ScaleUp),
			"auto-2": managed("auto-2", state.ScaleUp),
			"auto-3": managed("auto-3", state.ScaleDraining),
			"auto-4": managed("auto-4", state.ScaleBooting),
			"auto-5": managed("auto-5", state.ScaleDraining),
			"auto-6": managed("auto-6", state.ScaleUp), // not registered at all
		}},
	}
	a := &allocator{scaling: &scaleState{ops: map[string]scaleOp{"auto-2": {add: false, term: 1}}, removed: map[string]bool{}}}
	got := a.census(st)
	want := census{up: 2, booting: 1, draining: 1, leaving: 3, drainable: []string{"auto-1"}}
	if got.up != want.up || got.booting != want.booting || got.draining != want.draining || got.leaving != want.leaving ||
		!slices.Equal(got.drainable, want.drainable) {
		t.Fatalf("census %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name           string
		c              census
		desired, limit int
		want           int
	}{
		{"no limit", census{up: 2, leaving: 1}, 4, 0, 2},
		{"room under the limit", census{up: 1, booting: 1}, 4, 3, 1},
		{"a dead machine not yet removed fills the last place", census{up: 2, leaving: 1}, 3, 3, 0},
		{"a draining machine fills a place", census{up: 1, draining: 1}, 3, 3, 1},
		{"never negative", census{up: 2, draining: 2}, 3, 3, 0},
		{"enough already", census{up: 3}, 2, 0, 0},
		{"the census above", got, 5, 8, 1},
	} {
		if n := tc.c.addable(tc.desired, tc.limit); n != tc.want {
			t.Errorf("%s: %+v to %d under %d: add %d, want %d", tc.name, tc.c, tc.desired, tc.limit, n, tc.want)
		}
	}
}
