package state

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"pollux/optimizer"
)

// Commands written before node attributes, topology levels and job
// constraints existed decode unchanged; the new fields are encoded only
// when set, and an encoded block that sets nothing is refused (one
// encoding per value).
func TestAttrsEncodedOnlyWhenSet(t *testing.T) {
	plain := []Command{
		&RegisterNode{Node: Node{ID: "n", GPUs: 4, Health: Alive, Rack: "r1"}},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1},
		&InitCluster{ID: "c", CheckpointRoot: "/r"},
	}
	spec := testSpec()
	spec.Topology = optimizer.TopologyConstraint{Required: "rack"}
	spec.GPUType = "a100"
	with := []Command{
		&RegisterNode{Node: Node{ID: "n", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1", "z1"}, GPUType: "t4"}},
		&SubmitJob{ID: "j", Spec: spec, SubmitTime: 1},
		&InitCluster{ID: "c", CheckpointRoot: "/r", Levels: []string{"rack", "zone"}},
	}
	for i := range plain {
		old, err := Encode(plain[i])
		if err != nil {
			t.Fatal(err)
		}
		b, err := Encode(with[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, old[:2]) || len(b) <= len(old) {
			t.Errorf("%T: the attributes are not encoded after the old fields", with[i])
		}
		c, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", with[i], err)
		}
		if again, _ := Encode(c); !bytes.Equal(again, b) {
			t.Errorf("%T: does not round-trip", with[i])
		}
		// An empty block after an old encoding is not canonical.
		var empty []byte
		switch plain[i].(type) {
		case *RegisterNode:
			empty = []byte{0, 0}
		case *SubmitJob:
			// No submitter (encoded empty: constraints follow), then
			// constraints that set nothing.
			empty = []byte{0, 0, 0, 0}
		case *InitCluster:
			// No levels, an empty report key.
			empty = []byte{0, 0}
		}
		if _, err := Decode(append(slices.Clone(old), empty...)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%T with an empty attribute block: %v", plain[i], err)
		}
	}
	got, _ := Decode(mustEncode(t, with[0]))
	if n := got.(*RegisterNode).Node; !slices.Equal(n.Topology, []string{"r1", "z1"}) || n.GPUType != "t4" {
		t.Errorf("decoded node %+v", n)
	}
}

// A submission carries three optional trailing blocks, the submitter
// (API tokens), the placement constraints and the declared epochs: each
// combination has one encoding and round-trips; the submitter and the
// constraints are encoded empty only when something follows.
func TestSubmitJobSubmitterAndConstraints(t *testing.T) {
	spec := testSpec()
	spec.Topology = optimizer.TopologyConstraint{Preferred: "rack"}
	spec.GPUType = "t4"
	paced, both := testSpec(), spec
	paced.Epochs, both.Epochs = 90, 30
	plain := mustEncode(t, &SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1})
	for _, c := range []*SubmitJob{
		{ID: "j", Spec: testSpec(), SubmitTime: 1, Submitter: "acc-alice"},
		{ID: "j", Spec: spec, SubmitTime: 1},
		{ID: "j", Spec: spec, SubmitTime: 1, Submitter: "acc-alice"},
		{ID: "j", Spec: paced, SubmitTime: 1},
		{ID: "j", Spec: both, SubmitTime: 1, Submitter: "acc-alice"},
	} {
		b := mustEncode(t, c)
		if !bytes.HasPrefix(b, plain) || len(b) <= len(plain) {
			t.Errorf("%+v: the optional blocks are not encoded after the old fields", c)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		g := got.(*SubmitJob)
		if g.Submitter != c.Submitter || g.Spec.GPUType != c.Spec.GPUType || g.Spec.Topology != c.Spec.Topology || g.Spec.Epochs != c.Spec.Epochs {
			t.Errorf("decoded %+v, want %+v", g, c)
		}
		if again := mustEncode(t, got); !bytes.Equal(again, b) {
			t.Errorf("%+v: does not round-trip", c)
		}
	}
	// An empty submitter with nothing after it is not canonical, nor are
	// epochs encoded as 0 (left out when not declared).
	if _, err := Decode(append(slices.Clone(plain), 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("an empty submitter block: %v", err)
	}
	if _, err := Decode(append(slices.Clone(plain), 0, 0, 0, 0, 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("epochs encoded as 0: %v", err)
	}
}

func mustEncode(t *testing.T, c Command) []byte {
	t.Helper()
	b, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAttrsValidation(t *testing.T) {
	spec := func(f func(*JobSpec)) *SubmitJob {
		s := testSpec()
		f(&s)
		return &SubmitJob{ID: "j", Spec: s}
	}
	node := func(f func(*Node)) *RegisterNode {
		n := Node{ID: "n", GPUs: 4, Health: Alive}
		f(&n)
		return &RegisterNode{Node: n}
	}
	bad := map[string]Command{
		"topology not starting with the rack": node(func(n *Node) { n.Rack, n.Topology = "r1", []string{"r2", "z1"} }),
		"topology without a rack":             node(func(n *Node) { n.Topology = []string{"r2"} }),
		"domain with a space":                 node(func(n *Node) { n.Rack, n.Topology = "r 1", []string{"r 1"} }),
		"upper-case GPU type":                 node(func(n *Node) { n.GPUType = "A100" }),
		"nine levels":                         node(func(n *Node) { n.Rack, n.Topology = "a", slices.Repeat([]string{"a"}, 9) }),
		"required and preferred":              spec(func(s *JobSpec) { s.Topology = optimizer.TopologyConstraint{Required: "rack", Preferred: "rack"} }),
		"bad level name":                      spec(func(s *JobSpec) { s.Topology.Required = "Rack" }),
		"bad job GPU type":                    spec(func(s *JobSpec) { s.GPUType = "a 100" }),
		"negative epochs":                     spec(func(s *JobSpec) { s.Epochs = -1 }),
		"too many epochs":                     spec(func(s *JobSpec) { s.Epochs = optimizer.MaxEpochs + 1 }),
		"the rack alone as levels":            &InitCluster{ID: "c", Levels: []string{"rack"}},
		"levels not starting with the rack":   &InitCluster{ID: "c", Levels: []string{"zone", "rack"}},
		"level twice":                         &InitCluster{ID: "c", Levels: []string{"rack", "zone", "zone"}},
	}
	for name, c := range bad {
		if _, err := Encode(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The cluster's levels are set once; nodes and jobs are checked against
// them when applied.
func TestLevelsApply(t *testing.T) {
	a := newApplier()
	a.must(t, 1, &InitCluster{ID: "c", CheckpointRoot: "/r", Levels: []string{"rack", "zone"}})
	// The same levels again, or none (a server that names none), are fine.
	a.must(t, 1, &InitCluster{ID: "c2", CheckpointRoot: "/r", Levels: []string{"rack", "zone"}}, &InitCluster{ID: "c3", CheckpointRoot: "/r"})
	if err := a.apply(t, 1, &InitCluster{ID: "c4", CheckpointRoot: "/r", Levels: []string{"rack", "block"}}); !errors.Is(err, ErrClusterConfig) {
		t.Errorf("other levels: %v", err)
	}
	a.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1", "z1"}}},
		&RegisterNode{Node: Node{ID: "n2", GPUs: 4, Health: Alive}}) // declares nothing: the default rack and zone
	if err := a.apply(t, 1, &RegisterNode{Node: Node{ID: "n3", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a node without its zone: %v", err)
	}
	s := testSpec()
	s.Topology.Required = "zone"
	a.must(t, 1, &SubmitJob{ID: "j1", Spec: s})
	s.Topology.Required = "block"
	if err := a.apply(t, 1, &SubmitJob{ID: "j2", Spec: s}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a job requiring an unknown level: %v", err)
	}
	st := a.state()
	if !slices.Equal(st.Config.Levels, []string{"rack", "zone"}) || st.Config.ID != "c" || st.Jobs["j1"].Spec.Topology.Required != "zone" {
		t.Fatalf("state %+v", st.Config)
	}
	// Everything survives a snapshot.
	back, err := DecodeState(EncodeState(st))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(EncodeState(back), EncodeState(st)) || !slices.Equal(back.Nodes["n1"].Topology, []string{"r1", "z1"}) ||
		back.Jobs["j1"].Spec.Topology.Required != "zone" || !slices.Equal(back.Config.Levels, st.Config.Levels) {
		t.Fatalf("restored %+v", back.Config)
	}
	// A cluster with nodes of one topology cannot take levels they do
	// not fit.
	b := newApplier()
	b.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}}})
	if err := b.apply(t, 1, &InitCluster{ID: "c", Levels: []string{"rack", "zone"}}); !errors.Is(err, ErrClusterConfig) {
		t.Errorf("levels that registered nodes do not fit: %v", err)
	}
}

// A node's attributes change when it registers again (an agent
// restarted with another rack or GPU type).
func TestReRegisterChangesAttrs(t *testing.T) {
	a := newApplier()
	a.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "t4"}},
		&RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive, Rack: "r2", Topology: []string{"r2"}, GPUType: "a100"}})
	n := a.state().Nodes["n1"]
	if n.Rack != "r2" || n.GPUType != "a100" || !slices.Equal(n.Domains(), []string{"r2"}) {
		t.Fatalf("node %+v", n)
	}
	if d := (&Node{Rack: "legacy"}).Domains(); !slices.Equal(d, []string{"legacy"}) {
		t.Errorf("a rack without topology: %v", d)
	}
}

func TestSnapshotVersion2Decodes(t *testing.T) {
	// Written by the binary before snapshot version 3: a configured
	// cluster, n1 in rack r1, n2 without one, j1 running with a bid
	// (testdata/snapshot-v2.bin, another version 2 snapshot, holds jobs
	// without submitters: see TestACLSnapshot).
	b, err := os.ReadFile("testdata/snapshot-v2-bid.bin")
	if err != nil {
		t.Fatal(err)
	}
	if b[4] != 2 {
		t.Fatalf("fixture is version %d", b[4])
	}
	s, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	n1 := s.Nodes["n1"]
	if s.Config.ID != "c1" || s.Config.Levels != nil || n1.Rack != "r1" || n1.Topology != nil || n1.GPUType != "" ||
		s.Jobs["j1"].Bid.Version != 1 || !s.Jobs["j1"].Spec.Topology.IsZero() {
		t.Fatalf("decoded %+v / %+v", s.Config, n1)
	}
	if !slices.Equal(n1.Domains(), []string{"r1"}) {
		t.Errorf("domains %v", n1.Domains())
	}
	again, err := DecodeState(EncodeState(s))
	if err != nil || again.Nodes["n1"].Rack != "r1" {
		t.Fatalf("re-encoded: %v", err)
	}
}

// A node registered again with another GPU type or place, or with fewer
// GPUs than are placed on it, is another machine: the jobs placed on it
// lose their GPUs in the same command (a new incarnation, pending), the
// others keep theirs; registering it again unchanged moves nothing.
func TestReRegisterEvictsWhatNoLongerFits(t *testing.T) {
	for _, tt := range []struct {
		name    string
		again   Node
		evicted bool
	}{
		{"unchanged (an agent restarted)", Node{ID: "n2", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "a100", Addresses: []string{"x:2"}}, false},
		{"more GPUs", Node{ID: "n2", GPUs: 8, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "a100"}, false},
		{"another GPU type", Node{ID: "n2", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "t4"}, true},
		{"another rack", Node{ID: "n2", GPUs: 4, Health: Alive, Rack: "r2", Topology: []string{"r2"}, GPUType: "a100"}, true},
		{"fewer GPUs than placed", Node{ID: "n2", GPUs: 1, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "a100"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := newApplier()
			a.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "a100"}},
				&RegisterNode{Node: Node{ID: "n2", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "a100"}},
				&RegisterNode{Node: Node{ID: "n3", GPUs: 4, Health: Alive, Rack: "r2", Topology: []string{"r2"}, GPUType: "a100"}})
			spec := testSpec()
			spec.GPUType = "a100"
			a.must(t, 1, &SubmitJob{ID: "a", Spec: spec}, &SubmitJob{ID: "b", Spec: testSpec()}, &SubmitJob{ID: "c", Spec: testSpec()})
			if ds := drops(t, a, 1, &Round{Generation: 1, Term: 1, Jobs: map[string][]Slot{
				"a": {{"n1", 2}, {"n2", 2}}, "b": {{"n2", 2}}, "c": {{"n3", 4}}}}); len(ds) != 0 {
				t.Fatalf("drops %v", dropped(ds))
			}
			before := a.state()
			a.must(t, 1, &RegisterNode{Node: tt.again})
			st := a.state()
			for _, id := range []string{"a", "b"} {
				j, was := st.Jobs[id], before.Jobs[id]
				_, placed := st.Allocation.Jobs[id]
				if tt.evicted && (placed || j.State != Pending || j.Incarnation != was.Incarnation+1) ||
					!tt.evicted && (!placed || j.State != was.State || j.Incarnation != was.Incarnation) {
					t.Errorf("job %s: placed %v, %v in incarnation %d (was %v in %d)", id, placed, j.State, j.Incarnation, was.State, was.Incarnation)
				}
			}
			if c := st.Jobs["c"]; !slices.Equal(st.Allocation.Jobs["c"], []Slot{{"n3", 4}}) || c.Incarnation != before.Jobs["c"].Incarnation {
				t.Errorf("job c, on another node, moved: %v, incarnation %d", st.Allocation.Jobs["c"], c.Incarnation)
			}
			if st.Allocation.Generation != before.Allocation.Generation {
				t.Errorf("generation %d, was %d", st.Allocation.Generation, before.Allocation.Generation)
			}
		})
	}
}

// A round placing a job where its GPU type or required rack forbids is
// refused for that job (whatever policy decided it, and on nodes as they
// are when the round is applied); its other placements are committed.
func TestRoundRefusesPlacementsBreakingConstraints(t *testing.T) {
	a := newApplier()
	a.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "a100"}},
		&RegisterNode{Node: Node{ID: "n2", GPUs: 4, Health: Alive, Rack: "r2", Topology: []string{"r2"}, GPUType: "a100"}},
		&RegisterNode{Node: Node{ID: "n3", GPUs: 4, Health: Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "t4"}})
	typed, racked := testSpec(), testSpec()
	typed.GPUType = "a100"
	racked.Topology.Required = "rack"
	a.must(t, 1, &SubmitJob{ID: "typed", Spec: typed}, &SubmitJob{ID: "racked", Spec: racked}, &SubmitJob{ID: "free", Spec: testSpec()})
	ds := drops(t, a, 1, &Round{Generation: 1, Term: 1, Jobs: map[string][]Slot{
		"typed": {{"n3", 2}}, "racked": {{"n1", 2}, {"n2", 2}}, "free": {{"n2", 1}, {"n3", 1}}}})
	var errs []string
	for _, d := range ds {
		errs = append(errs, d.Err.Error())
	}
	got := strings.Join(errs, "\n")
	for _, want := range []string{`job "typed": optimizer: placement breaks the job's constraints: node n3 has t4 GPUs, the job runs on a100`,
		`job "racked": optimizer: placement breaks the job's constraints: topology required "rack" and nodes n1 and n2 are in two`} {
		if !strings.Contains(got, want) {
			t.Errorf("drops %s, want one mentioning %q", got, want)
		}
	}
	st := a.state()
	if len(ds) != 2 || !slices.Equal(st.Allocation.Jobs["free"], []Slot{{"n2", 1}, {"n3", 1}}) || st.Allocation.Jobs["typed"] != nil || st.Allocation.Jobs["racked"] != nil {
		t.Errorf("allocation %v, drops %s", st.Allocation.Jobs, got)
	}
	for _, d := range ds {
		if !errors.Is(d.Err, ErrInvalid) || !d.Placement {
			t.Errorf("drop %+v", d)
		}
	}
}
