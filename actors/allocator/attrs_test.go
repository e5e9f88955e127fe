package allocator

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"pollux/cluster"
	"pollux/consensus/state"
	"pollux/optimizer"
)

// typedState is testState on two racks and two GPU types: n1 (rack r1,
// t4) and n2 (rack r2, a100); job a runs on both.
func typedState() *state.State {
	st := testState()
	st.Nodes["n1"].Rack, st.Nodes["n1"].Topology, st.Nodes["n1"].GPUType = "r1", []string{"r1"}, "t4"
	st.Nodes["n2"].Rack, st.Nodes["n2"].Topology, st.Nodes["n2"].GPUType = "r2", []string{"r2"}, "a100"
	return st
}

func TestBuildSnapshotCarriesAttributes(t *testing.T) {
	st := typedState()
	st.Jobs["b"].Spec.GPUType = "a100"
	st.Jobs["b"].Spec.Topology = optimizer.TopologyConstraint{Required: "rack"}
	snap, err := BuildSnapshot(st, nil, 200, 10, 42)
	if err != nil {
		t.Fatal(err)
	}
	if n := snap.Nodes[0]; n.Type != "t4" || !slices.Equal(n.Topology, []string{"r1"}) {
		t.Errorf("node %+v", n)
	}
	a, b := snap.Jobs[0], snap.Jobs[1]
	if b.GPUType != "a100" || b.Topology.Required != "rack" {
		t.Errorf("job b's constraints %+v", b)
	}
	// Job a spans the two types (as after an agent came back with
	// another type): it is placed afresh.
	if len(a.Current) != 0 {
		t.Errorf("job a over two types keeps its placement %v", a.Current)
	}
	// With several types, a bid without per-type parts (a job measured
	// on untyped nodes only) is every type's model alike.
	if len(a.TypeModels) != 2 || *a.TypeModels["t4"] != *a.Model || *a.TypeModels["a100"] != *a.Model {
		t.Errorf("type models %v", a.TypeModels)
	}
	// On one type, the same job keeps its placement and has no per-type
	// models; a required rack it spans drops it.
	st = typedState()
	st.Nodes["n2"].GPUType = "t4"
	if snap, _ = BuildSnapshot(st, nil, 200, 10, 42); len(snap.Jobs[0].Current) != 2 || snap.Jobs[0].TypeModels != nil {
		t.Errorf("one type: %+v", snap.Jobs[0])
	}
	st.Jobs["a"].Spec.Topology.Required = "rack"
	if snap, _ = BuildSnapshot(st, nil, 200, 10, 42); len(snap.Jobs[0].Current) != 0 {
		t.Errorf("a required rack spanned: %+v", snap.Jobs[0].Current)
	}
	st.Config.Levels = []string{"rack", "zone"}
	st.Nodes["n1"].Topology = []string{"r1", "z1"}
	st.Nodes["n2"].Topology = []string{"r2", "z1"}
	st.Jobs["a"].Spec.Topology.Required = "zone"
	if snap, _ = BuildSnapshot(st, nil, 200, 10, 42); len(snap.Jobs[0].Current) != 2 || !slices.Equal(snap.Levels, st.Config.Levels) {
		t.Errorf("a required zone kept: %+v, levels %v", snap.Jobs[0].Current, snap.Levels)
	}
}

func TestNodeOf(t *testing.T) {
	zones := []string{"rack", "zone"}
	tests := []struct {
		name   string
		meta   cluster.Meta
		levels []string
		want   state.Node
		err    string
	}{
		{name: "nothing declared", meta: cluster.Meta{GPUs: 4}, levels: zones, want: state.Node{GPUs: 4}},
		{name: "rack and zone", meta: cluster.Meta{GPUs: 4, Rack: "r1", Topology: "rack=r1,zone=z1", GPUType: "t4"}, levels: zones,
			want: state.Node{GPUs: 4, Rack: "r1", Topology: []string{"r1", "z1"}, GPUType: "t4"}},
		{name: "older agent's rack", meta: cluster.Meta{GPUs: 2, Rack: "r7"}, want: state.Node{GPUs: 2, Rack: "r7", Topology: []string{"r7"}}},
		{name: "zone missing", meta: cluster.Meta{GPUs: 4, Rack: "r1", Topology: "rack=r1"}, levels: zones, err: `level "zone" missing`},
		{name: "unknown level", meta: cluster.Meta{GPUs: 4, Rack: "r1", Topology: "rack=r1,zone=z1"}, err: `not one of the cluster's levels (rack)`},
	}
	for _, tt := range tests {
		n, err := NodeOf(cluster.Member{Name: "n", Meta: tt.meta}, tt.levels)
		if tt.err != "" {
			if !errors.Is(err, cluster.ErrBadMeta) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		tt.want.ID, tt.want.Health, tt.want.Addresses = "n", state.Alive, []string{""}
		if err != nil || n.Rack != tt.want.Rack || !slices.Equal(n.Topology, tt.want.Topology) || n.GPUType != tt.want.GPUType || n.GPUs != tt.want.GPUs {
			t.Errorf("%s: %+v, %v", tt.name, n, err)
		}
	}
}

func TestPolicyByGPUTypes(t *testing.T) {
	a := &allocator{cfg: Config{Policy: optimizer.NewPollux(), TypedPolicy: optimizer.NewHetPollux()}}
	one := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "a", GPUs: 4, Type: "t4"}, {ID: "b", GPUs: 4, Type: "t4"}}}
	two := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "a", GPUs: 4, Type: "t4"}, {ID: "b", GPUs: 4, Type: "a100"}}}
	for _, tt := range []struct {
		snap *optimizer.Snapshot
		want string
	}{{one, "pollux"}, {two, "pollux-het"}} {
		if got := a.policy(tt.snap).Name(); got != tt.want {
			t.Errorf("%d types: %s, want %s", len(gpuTypes(tt.snap.Nodes)), got, tt.want)
		}
	}
}
