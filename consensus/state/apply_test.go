package state

import (
	"bytes"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"pollux/cluster/federation"
	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

func testSpec() JobSpec {
	return JobSpec{
		Name: "cifar", App: "cifar10", MinReplicas: 1, MaxReplicas: 8,
		Limits:        goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 32, MaxLocal: 512, Accumulation: true},
		CheckpointDir: "/ckpt/cifar",
	}
}

func entry(n, k, m int, accum, step float64, count uint64) ProfileEntry {
	return ProfileEntry{ProfilePoint: goodput.ProfilePoint{Nodes: n, Replicas: k, LocalBatch: m, AccumTime: accum, StepTime: step}, Count: count}
}

// applier feeds commands to a State as the replicated state machine
// does: encoded, decoded, then applied.
type applier struct{ s *State }

func newApplier() *applier { return &applier{s: New()} }

// state returns a deep copy of the applier's state.
func (a *applier) state() *State { return a.s.Clone() }

// applyDrops applies c in a log entry of term and returns what it dropped.
func (a *applier) applyDrops(term uint64, c Command) ([]Drop, error) {
	b, err := Encode(c)
	if err != nil {
		return nil, err
	}
	d, err := Decode(b)
	if err != nil {
		return nil, err
	}
	return ApplyTo(a.s, d, term)
}

func (a *applier) apply(t testing.TB, term uint64, c Command) error {
	t.Helper()
	_, err := a.applyDrops(term, c)
	return err
}

func (a *applier) must(t testing.TB, term uint64, cs ...Command) {
	t.Helper()
	for _, c := range cs {
		if err := a.apply(t, term, c); err != nil {
			t.Fatalf("apply %T: %v", c, err)
		}
	}
}

// populated returns a state with two nodes, three jobs, one allocation
// and some reports.
func populated(t *testing.T) *applier {
	t.Helper()
	a := newApplier()
	a.must(t, 1,
		&RegisterNode{Node: Node{ID: "n1", Addresses: []string{"127.0.0.1:7000"}, Rack: "r1", GPUs: 4, Health: Alive}},
		&RegisterNode{Node: Node{ID: "n2", Addresses: []string{"127.0.0.1:7001", "127.0.0.1:7002"}, Rack: "r2", GPUs: 4, Health: Alive}},
		&SubmitJob{ID: "j1", Spec: testSpec(), SubmitTime: 10},
		&SubmitJob{ID: "j2", Spec: JobSpec{Command: []string{"python", "train.py"}, MinReplicas: 1, MaxReplicas: 4, Limits: goodput.Limits{InitBatch: 64, MaxBatch: 64, MinLocal: 64, MaxLocal: 64}, CheckpointDir: "/ckpt/j2"}, SubmitTime: 11},
		&SubmitJob{ID: "j3", Spec: testSpec(), SubmitTime: 12},
		&CommitAllocation{Generation: 1, Term: 1, Jobs: map[string][]Slot{"j1": {{"n2", 2}, {"n1", 2}}, "j2": {{"n1", 1}}}},
		&RecordProfile{ID: "j1", Incarnation: 1, Entries: []ProfileEntry{
			entry(2, 4, 64, 0.1, 0.2, 3),
			entry(1, 1, 32, 0.05, 0.06, 1),
		}, Grad: goodput.GradStats{GradSqr: 1.5, GradVar: 20}, HasGrad: true},
		&UpdateJob{ID: "j1", Incarnation: 1, Set: UpdateAttained | UpdateEpoch | UpdateProgress, Attained: 40, Epoch: 2, Progress: 0.25},
		&MarkNode{ID: "n2", Health: Suspect},
	)
	return a
}

func TestApplyTransitions(t *testing.T) {
	a := populated(t)
	s := a.state()
	j1 := s.Jobs["j1"]
	if j1.State != Running || j1.Incarnation != 1 || j1.Restarts != 0 || j1.Attained != 40 || j1.Epoch != 2 {
		t.Fatalf("j1 after first allocation: %+v", j1)
	}
	if got := j1.Profile; len(got) != 2 || got[0].Nodes != 1 || got[1].Count != 3 {
		t.Fatalf("profile not sorted by configuration: %+v", got)
	}
	if pt := j1.Profile[1].ProfilePoint; pt != (goodput.ProfilePoint{Nodes: 2, Replicas: 4, LocalBatch: 64, AccumTime: 0.1, StepTime: 0.2}) {
		t.Fatalf("profile point %+v", pt)
	}
	if s.Jobs["j3"].State != Pending || s.Jobs["j3"].Incarnation != 0 {
		t.Fatalf("unplaced j3: %+v", s.Jobs["j3"])
	}
	if s.Nodes["n2"].Health != Suspect {
		t.Fatalf("n2 health %v", s.Nodes["n2"].Health)
	}
	if got := s.Allocation.Jobs["j1"]; got[0].Node != "n1" {
		t.Fatalf("slots not sorted: %+v", got)
	}

	// Re-place j1 (rescale), keep j2, start j3.
	a.must(t, 2, &CommitAllocation{Generation: 2, Term: 2, Jobs: map[string][]Slot{
		"j1": {{"n1", 2}}, "j2": {{"n1", 1}}, "j3": {{"n2", 4}},
	}})
	s = a.state()
	if j := s.Jobs["j1"]; j.State != Rescaling || j.Incarnation != 2 || j.Restarts != 1 {
		t.Fatalf("rescaled j1: %+v", j)
	}
	if j := s.Jobs["j2"]; j.State != Running || j.Incarnation != 1 {
		t.Fatalf("unchanged j2: %+v", j)
	}
	if j := s.Jobs["j3"]; j.State != Running || j.Incarnation != 1 {
		t.Fatalf("started j3: %+v", j)
	}
	// Profile merge is a weighted mean.
	a.must(t, 2, &RecordProfile{ID: "j1", Incarnation: 2, Entries: []ProfileEntry{entry(2, 4, 64, 0.5, 0.6, 1)}})
	p := a.state().Jobs["j1"].Profile[1]
	if p.Count != 4 || math.Abs(p.AccumTime-0.2) > 1e-12 || math.Abs(p.StepTime-0.3) > 1e-12 {
		t.Fatalf("merged entry %+v, want count 4, accum 0.2, step 0.3", p)
	}
	a.must(t, 2, &UpdateJob{ID: "j1", Incarnation: 2, Set: UpdateState, State: Running})
	// A completion reported by the replaced incarnation is refused.
	if err := a.apply(t, 2, &CompleteJob{ID: "j1", Incarnation: 1, FinishTime: 98}); !errors.Is(err, ErrStaleIncarnation) {
		t.Fatalf("completion of incarnation 1 after incarnation 2 began: %v", err)
	}
	a.must(t, 2, &CompleteJob{ID: "j1", Incarnation: 2, FinishTime: 99})
	s = a.state()
	if j := s.Jobs["j1"]; j.State != Completed || j.FinishTime != 99 {
		t.Fatalf("completed j1: %+v", j)
	}
	if _, ok := s.Allocation.Jobs["j1"]; ok || s.Allocation.Generation != 2 {
		t.Fatalf("completion should free GPUs at the same generation: %+v", s.Allocation)
	}
	// Dropping j3 from the allocation makes it Pending under a new
	// incarnation.
	a.must(t, 2, &CommitAllocation{Generation: 3, Term: 2, Jobs: map[string][]Slot{"j2": {{"n1", 1}}}})
	if j := a.state().Jobs["j3"]; j.State != Pending || j.Incarnation != 2 || j.Restarts != 0 {
		t.Fatalf("preempted j3: %+v", j)
	}
}

func TestApplyRefusals(t *testing.T) {
	tests := []struct {
		name string
		term uint64
		cmd  Command
		want error
	}{
		{"duplicate job", 1, &SubmitJob{ID: "j1", Spec: testSpec()}, ErrJobExists},
		{"update unknown job", 1, &UpdateJob{ID: "nope", Set: UpdateEpoch, Epoch: 1}, ErrUnknownJob},
		{"stale incarnation report", 1, &UpdateJob{ID: "j1", Incarnation: 7, Set: UpdateEpoch, Epoch: 3}, ErrStaleIncarnation},
		{"stale incarnation profile", 1, &RecordProfile{ID: "j1", Incarnation: 9, HasGrad: true, Grad: goodput.GradStats{GradSqr: 1}}, ErrStaleIncarnation},
		{"attained backwards", 1, &UpdateJob{ID: "j1", Set: UpdateAttained, Attained: 1}, ErrInvalid},
		{"epoch backwards", 1, &UpdateJob{ID: "j1", Set: UpdateEpoch, Epoch: 1}, ErrInvalid},
		{"running without GPUs", 1, &UpdateJob{ID: "j3", Set: UpdateState, State: Running}, ErrInvalid},
		{"pending with GPUs", 1, &UpdateJob{ID: "j1", Set: UpdateState, State: Pending}, ErrInvalid},
		{"mark unknown node", 1, &MarkNode{ID: "n9", Health: Dead}, ErrUnknownNode},
		{"stale generation", 1, &CommitAllocation{Generation: 1, Term: 1, Jobs: map[string][]Slot{"j3": {{"n1", 1}}}}, ErrStaleGeneration},
		{"term of another entry", 2, &CommitAllocation{Generation: 5, Term: 1, Jobs: map[string][]Slot{"j3": {{"n1", 1}}}}, ErrStaleTerm},
		{"over capacity", 1, &CommitAllocation{Generation: 2, Term: 1, Jobs: map[string][]Slot{"j1": {{"n1", 4}}, "j2": {{"n1", 1}}}}, ErrInvalid},
		{"unknown node", 1, &CommitAllocation{Generation: 2, Term: 1, Jobs: map[string][]Slot{"j1": {{"n7", 1}}}}, ErrUnknownNode},
		{"unknown job", 1, &CommitAllocation{Generation: 2, Term: 1, Jobs: map[string][]Slot{"zz": {{"n1", 1}}}}, ErrUnknownJob},
		{"above max replicas", 1, &CommitAllocation{Generation: 2, Term: 1, Jobs: map[string][]Slot{"j2": {{"n1", 4}, {"n2", 1}}}}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := populated(t)
			before := EncodeState(a.state())
			err := a.apply(t, tt.term, tt.cmd)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if after := EncodeState(a.state()); !bytes.Equal(before, after) {
				t.Fatal("a refused command changed the state")
			}
		})
	}
}

func TestApplyRefusesFinishedAndDeadTargets(t *testing.T) {
	a := populated(t)
	a.must(t, 1, &CompleteJob{ID: "j2", Failed: true, Reason: "oom", FinishTime: 50}, &MarkNode{ID: "n2", Health: Dead})
	if err := a.apply(t, 1, &CompleteJob{ID: "j2"}); !errors.Is(err, ErrJobFinished) {
		t.Fatalf("second completion: %v", err)
	}
	if err := a.apply(t, 1, &CommitAllocation{Generation: 2, Term: 1, Jobs: map[string][]Slot{"j2": {{"n1", 1}}}}); !errors.Is(err, ErrJobFinished) {
		t.Fatalf("placing a finished job: %v", err)
	}
	if err := a.apply(t, 1, &CommitAllocation{Generation: 2, Term: 1, Jobs: map[string][]Slot{"j3": {{"n2", 1}}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("placing on a dead node: %v", err)
	}
	if s := a.state(); s.Jobs["j2"].State != Failed || s.Jobs["j2"].Reason != "oom" {
		t.Fatalf("failed job: %+v", s.Jobs["j2"])
	}
}

func TestDecodeUndecodable(t *testing.T) {
	good, err := Encode(&MarkNode{ID: "n", Health: Alive})
	if err != nil {
		t.Fatal(err)
	}
	future := append([]byte{CommandVersion + 1}, good[1:]...)
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"future version", future, ErrUnknownVersion},
		{"unknown type", []byte{CommandVersion, 200}, ErrUnknownCommand},
		{"truncated", good[:len(good)-1], ErrMalformed},
		{"trailing", append(append([]byte{}, good...), 0), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode(tt.data); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEncodeValidates(t *testing.T) {
	tests := []struct {
		name string
		cmd  Command
	}{
		{"nil", nil},
		{"empty id", &SubmitJob{Spec: testSpec()}},
		{"space in id", &SubmitJob{ID: "a b", Spec: testSpec()}},
		{"no command or app", &SubmitJob{ID: "j", Spec: JobSpec{MinReplicas: 1, MaxReplicas: 1, Limits: testSpec().Limits}}},
		{"replicas inverted", &SubmitJob{ID: "j", Spec: JobSpec{App: "x", MinReplicas: 3, MaxReplicas: 2, Limits: testSpec().Limits}}},
		{"bad limits", &SubmitJob{ID: "j", Spec: JobSpec{App: "x", MinReplicas: 1, MaxReplicas: 2}}},
		{"NaN submit time", &SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: math.NaN()}},
		{"no update fields", &UpdateJob{ID: "j"}},
		{"update to terminal", &UpdateJob{ID: "j", Set: UpdateState, State: Completed}},
		{"infinite progress", &UpdateJob{ID: "j", Set: UpdateProgress, Progress: math.Inf(1)}},
		{"negative attained", &UpdateJob{ID: "j", Set: UpdateAttained, Attained: -1}},
		{"empty profile", &RecordProfile{ID: "j"}},
		{"K below N", &RecordProfile{ID: "j", Entries: []ProfileEntry{entry(2, 1, 1, 1, 1, 1)}}},
		{"zero step time", &RecordProfile{ID: "j", Entries: []ProfileEntry{entry(1, 1, 1, 1, 0, 1)}}},
		{"NaN grad", &RecordProfile{ID: "j", HasGrad: true, Grad: goodput.GradStats{GradSqr: math.NaN()}}},
		{"grad without flag", &RecordProfile{ID: "j", Entries: []ProfileEntry{entry(1, 1, 1, 1, 1, 1)}, Grad: goodput.GradStats{GradSqr: 1}}},
		{"generation zero", &CommitAllocation{Term: 1}},
		{"empty placement", &CommitAllocation{Generation: 1, Term: 1, Jobs: map[string][]Slot{"j": nil}}},
		{"zero GPUs", &CommitAllocation{Generation: 1, Term: 1, Jobs: map[string][]Slot{"j": {{"n", 0}}}}},
		{"node twice", &CommitAllocation{Generation: 1, Term: 1, Jobs: map[string][]Slot{"j": {{"n", 1}, {"n", 2}}}}},
		{"node health zero", &RegisterNode{Node: Node{ID: "n", GPUs: 1}}},
		{"negative GPUs", &RegisterNode{Node: Node{ID: "n", GPUs: -1, Health: Alive}}},
		{"bad mark", &MarkNode{ID: "n", Health: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Encode(tt.cmd); !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}

func TestCommandRoundTrip(t *testing.T) {
	cmds := []Command{
		&SubmitJob{ID: "j1", Spec: JobSpec{Name: "n", Command: []string{"a", "b c"}, App: "", MinReplicas: 2, MaxReplicas: 3, Limits: testSpec().Limits, CheckpointDir: "/ck"}, SubmitTime: 1.25},
		&UpdateJob{ID: "j1", Incarnation: 3, Set: UpdateState | UpdateProgress, State: Rescaling, Progress: 0.5},
		&CompleteJob{ID: "j1", Failed: true, Reason: "exit 1", FinishTime: 7},
		&CompleteJob{ID: "j1", Incarnation: 4, FinishTime: 7},
		&RecordProfile{ID: "j1", Incarnation: 1, Entries: []ProfileEntry{entry(1, 2, 3, 0.1, 0.2, 5)}, HasGrad: true, Grad: goodput.GradStats{GradSqr: 1e-9, GradVar: 3}},
		&CommitAllocation{Generation: 1 << 40, Term: 9, Jobs: map[string][]Slot{"b": {{"n2", 1}}, "a": {{"n1", 2}, {"n0", 1}}}},
		&RegisterNode{Node: Node{ID: "n1", Addresses: []string{"x:1"}, Rack: "r", GPUs: 8, Health: Suspect}},
		&MarkNode{ID: "n1", Health: Left},
	}
	for _, c := range cmds {
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		d, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		b2, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("%T: re-encoding differs", c)
		}
	}
}

func TestSnapshotRestoreIdentical(t *testing.T) {
	a := populated(t)
	want := EncodeState(a.s)
	s, err := DecodeState(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := EncodeState(s); !bytes.Equal(want, got) {
		t.Fatal("decoded state encodes differently")
	}
	// The decoded state keeps applying the same way.
	b := &applier{s: s}
	next := &CommitAllocation{Generation: 2, Term: 3, Jobs: map[string][]Slot{"j3": {{"n1", 1}}}}
	a.must(t, 3, next)
	b.must(t, 3, next)
	if !bytes.Equal(EncodeState(a.s), EncodeState(b.s)) {
		t.Fatal("states diverged after decoding")
	}
}

func TestDecodeStateRefuses(t *testing.T) {
	good := EncodeState(populated(t).state())
	flipped := bytes.Clone(good)
	flipped[10] ^= 1
	future := bytes.Clone(good)
	future[4] = SnapshotVersion + 1
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"bad magic", append([]byte("XXXX"), good[4:]...), ErrMalformed},
		{"future version", future, ErrUnknownVersion},
		{"bit flip", flipped, ErrMalformed},
		{"truncated", good[:len(good)-5], ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeState(tt.b); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestPlacementConversion(t *testing.T) {
	nodes := []optimizer.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 4}, {ID: "c", GPUs: 2}}
	p := optimizer.Placement{{Node: 0, Count: 1}, {Node: 2, Count: 2}}
	slots, err := SlotsFromPlacement(nodes, p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := PlacementFromSlots(nodes, slots)
	if err != nil || !back.Equal(p) {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	if _, err := SlotsFromPlacement(nodes, optimizer.Placement{{Node: 3, Count: 1}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad index: %v", err)
	}
	if _, err := PlacementFromSlots(nodes[:1], slots); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("missing node: %v", err)
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{
		&SubmitJob{ID: "j1", Spec: testSpec(), SubmitTime: 1},
		&UpdateJob{ID: "j1", Set: UpdateEpoch, Epoch: 1},
		&CompleteJob{ID: "j1"},
		&RecordProfile{ID: "j1", Entries: []ProfileEntry{entry(1, 1, 1, 1, 1, 1)}},
		&CommitAllocation{Generation: 1, Term: 1, Jobs: map[string][]Slot{"j": {{"n", 1}}}},
		&RegisterNode{Node: Node{ID: "n", GPUs: 1, Health: Alive, Addresses: []string{"a"}}},
		&MarkNode{ID: "n", Health: Dead},
		&InitCluster{ID: "c", CheckpointRoot: "/r"},
		&InitCluster{ID: "c", CheckpointRoot: "/r", Levels: []string{"rack", "zone"}},
		&RegisterNode{Node: Node{ID: "n", GPUs: 8, Health: Alive, Rack: "r1", Topology: []string{"r1", "z1"}, GPUType: "a100"}},
		&SubmitJob{ID: "j2", Spec: JobSpec{Name: "x", App: "ncf", MinReplicas: 1, MaxReplicas: 2, Limits: testSpec().Limits,
			Topology: optimizer.TopologyConstraint{Preferred: "rack"}, GPUType: "t4"}, SubmitTime: 1},
		&SubmitJob{ID: "j3", Spec: JobSpec{Name: "x", App: "ncf", MinReplicas: 1, MaxReplicas: 2, Limits: testSpec().Limits,
			Topology: optimizer.TopologyConstraint{Required: "rack"}, GPUType: "t4"}, SubmitTime: 1, Submitter: "acc-alice"},
		&SubmitJob{ID: "j4", Spec: JobSpec{Name: "x", App: "ncf", MinReplicas: 1, MaxReplicas: 2, Limits: testSpec().Limits, Epochs: 90}, SubmitTime: 1},
		&InitCluster{ID: "c", CheckpointRoot: "/r", ReportKey: strings.Repeat("0", ReportKeyLen)},
		&InitCluster{ID: "c", CheckpointRoot: "/r", Levels: []string{"rack", "zone"}, ReportKey: strings.Repeat("0", ReportKeyLen)},
		&FinishJob{ID: "j1", Incarnation: 1, State: Cancelled, Reason: "user"},
		&FinishJob{ID: "j1", Incarnation: 2, State: Completed, Time: 9,
			Meas: &Measurement{Session: 1, From: 2, To: 3, Profile: []ProfileEntry{entry(1, 1, 32, 0.1, 0.2, 3)}, Epoch: 7, Progress: 0.5, GPUType: "t4"}},
		&Prune{Jobs: []string{"j1", "j2"}, Nodes: []string{"n2"}},
		&Round{Generation: 2, Term: 1, Time: 3, Accrue: 1, MaxFailures: 5, Jobs: map[string][]Slot{"j1": {{"n1", 1}}},
			Updates: []RoundJob{
				{ID: "j1", Incarnation: 1, Running: true, HasBid: true, Bid: testBid(1, 1),
					HasMeas: true, Meas: measurement(1, 0, 2, 1, entry(1, 1, 32, 0.1, 0.2, 3))},
				{ID: "j2", Incarnation: 1, Restart: true}}},
		&Round{Generation: 3, Term: 1, Time: 4, Jobs: map[string][]Slot{"j1": {{"n1", 1}}},
			Updates: []RoundJob{{ID: "j1", Incarnation: 1, HasBid: true, Bid: typedBid(1, 2),
				HasMeas: true, Meas: Measurement{Session: 1, From: 2, To: 3, Profile: []ProfileEntry{entry(1, 1, 32, 0.1, 0.2, 3)}, GPUType: "t4"}}}},
		&Round{Generation: 4, Term: 1, Time: 5, Jobs: map[string][]Slot{"j1": {{"n1", 1}}},
			Updates: []RoundJob{{ID: "j1", Incarnation: 1, HasBid: true, Bid: rackBid(1, 3),
				HasMeas: true, Meas: measurement(1, 3, 4, 1, entry(2, 2, 32, 0.1, 0.2, 3), rackEntry(2, 2, 32, 2, 0.1, 0.4, 1))}}},
		&Round{Generation: 5, Term: 1, Time: 6, Jobs: map[string][]Slot{"j1": {{"n1", 1}}}, Leader: "s1",
			Updates: []RoundJob{{ID: "j1", Incarnation: 1, HasMeas: true, Meas: Measurement{Session: 1, From: 4, To: 5, Epoch: 2, Progress: 3,
				Checkpoint: Checkpoint{Incarnation: 1, Epoch: 2, Progress: 3, Time: 1_796_000_000}}}}},
		&FinishJob{ID: "j1", Incarnation: 1, State: Completed, Time: 9,
			Meas: &Measurement{Session: 1, From: 5, To: 6, Epoch: 3, Progress: 4, Checkpoint: Checkpoint{Incarnation: 1, Epoch: 3, Progress: 4, Time: 1_796_000_001}}},
		&ScaleDecision{Term: 1, Time: 2, Desired: 3, Add: []string{"auto-1", "auto-2"}, Drain: []string{"auto-0"}},
		&ScaleUpdate{Term: 1, Time: 3, Name: "auto-1", Outcome: ScaleJoined},
		&ScaleUpdate{Term: 1, Time: 3, Name: "auto-2", Outcome: ScaleRemoved, Reason: "never joined"},
		labA(),
		fedGrant("l1", "n1", 2, 3),
		fedCmd(federation.OpReclaim, "lab-a", "l1", 4),
		&Lease{Cmd: federation.Command{Op: federation.OpExpire, From: "lab-a", At: 5}},
	} {
		b, err := Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{CommandVersion, typeCommitAllocation, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		// What decodes re-encodes, and decodes to the same encoding.
		b2, err := Encode(c)
		if err != nil {
			t.Fatalf("decoded command does not encode: %v", err)
		}
		c2, err := Decode(b2)
		if err != nil {
			t.Fatalf("re-encoded command does not decode: %v", err)
		}
		if b3, _ := Encode(c2); !bytes.Equal(b2, b3) {
			t.Fatal("encoding is not stable")
		}
		// Applying it to a populated state never panics.
		_, _ = ApplyTo(populated(t).s, c, 1)
	})
}

func FuzzDecodeState(f *testing.F) {
	f.Add(EncodeState(New()))
	a := newApplier()
	a.must(f, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 2, Health: Alive}},
		&SubmitJob{ID: "j", Spec: testSpec()},
		&CommitAllocation{Generation: 1, Term: 1, Jobs: map[string][]Slot{"j": {{"n1", 1}}}})
	f.Add(EncodeState(a.state()))
	a.must(f, 1, &InitCluster{ID: "c", CheckpointRoot: "/r"},
		&Round{Generation: 2, Term: 1, Time: 5, Accrue: 1, Jobs: map[string][]Slot{"j": {{"n1", 2}}},
			Updates: []RoundJob{{ID: "j", Incarnation: 1, Running: true, HasBid: true, Bid: testBid(3, 1),
				HasMeas: true, Meas: measurement(3, 0, 1, 1, entry(1, 1, 32, 0.1, 0.2, 3))}}})
	f.Add(EncodeState(a.state()))
	typed := newApplier()
	spec := testSpec()
	spec.Topology.Required, spec.GPUType = "zone", "t4"
	typed.must(f, 1, &InitCluster{ID: "c", Levels: []string{"rack", "zone"}, ReportKey: strings.Repeat("5", ReportKeyLen)},
		&RegisterNode{Node: Node{ID: "n1", GPUs: 2, Health: Alive, Rack: "r1", Topology: []string{"r1", "z1"}, GPUType: "t4"}},
		&SubmitJob{ID: "j", Spec: spec})
	f.Add(EncodeState(typed.state()))
	for _, old := range []string{"testdata/snapshot-v1.bin", "testdata/snapshot-v2.bin", "testdata/snapshot-v2-bid.bin", snapshotV3, snapshotV4, snapshotV5, snapshotV6, snapshotV7, snapshotV8, snapshotV9, snapshotV10, snapshotV11, snapshotV12, snapshotV13, snapshotV14} {
		if b, err := os.ReadFile(old); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeState(b)
		if err != nil {
			return
		}
		if b[len(snapshotMagic)] != SnapshotVersion {
			// An older version re-encodes in the current one.
			if _, err := DecodeState(EncodeState(s)); err != nil {
				t.Fatalf("an old snapshot's state does not re-encode: %v", err)
			}
			return
		}
		if again := EncodeState(s); !bytes.Equal(again, b) {
			t.Fatal("a decodable snapshot does not re-encode to itself")
		}
	})
}

// A completion encoded before CompleteJob had an incarnation still
// decodes (as unfenced); an explicit zero incarnation is not a valid
// encoding (every value has exactly one).
func TestCompleteJobIncarnationEncoding(t *testing.T) {
	old, err := Encode(&CompleteJob{ID: "j1", FinishTime: 3})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(old)
	if err != nil || c.(*CompleteJob).Incarnation != 0 {
		t.Fatalf("old encoding: %+v, %v", c, err)
	}
	if _, err := Decode(append(slices.Clone(old), 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("explicit zero incarnation: %v", err)
	}
	with, _ := Encode(&CompleteJob{ID: "j1", FinishTime: 3, Incarnation: 300})
	if len(with) <= len(old) {
		t.Errorf("the incarnation is not encoded")
	}
	if _, err := Decode(append(slices.Clone(with), 1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("trailing byte after the incarnation: %v", err)
	}
}
