package consensus

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

func testSpec() state.JobSpec {
	return state.JobSpec{
		Name: "cifar", App: "cifar10", MinReplicas: 1, MaxReplicas: 8,
		Limits:        goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 32, MaxLocal: 512, Accumulation: true},
		CheckpointDir: "/ckpt/cifar",
	}
}

func entry(n, k, m int, accum, step float64, count uint64) state.ProfileEntry {
	return state.ProfileEntry{ProfilePoint: goodput.ProfilePoint{Nodes: n, Replicas: k, LocalBatch: m, AccumTime: accum, StepTime: step}, Count: count}
}

// fsmApplier feeds encoded commands to an FSM as Raft would.
type fsmApplier struct {
	f     *FSM
	index uint64
}

func (a *fsmApplier) apply(t testing.TB, term uint64, c state.Command) error {
	t.Helper()
	b, err := state.Encode(c)
	if err != nil {
		return err
	}
	a.index++
	res, ok := a.f.Apply(&raft.Log{Index: a.index, Term: term, Type: raft.LogCommand, Data: b}).(Result)
	if !ok {
		t.Fatalf("Apply returned %T", res)
	}
	if res.Index != a.index {
		t.Fatalf("result index %d, want %d", res.Index, a.index)
	}
	return res.Err
}

func (a *fsmApplier) must(t testing.TB, term uint64, cs ...state.Command) {
	t.Helper()
	for _, c := range cs {
		if err := a.apply(t, term, c); err != nil {
			t.Fatalf("apply %T: %v", c, err)
		}
	}
}

// populated returns an FSM with two nodes, two jobs and an allocation.
func populated(t *testing.T) *fsmApplier {
	t.Helper()
	a := &fsmApplier{f: NewFSM()}
	a.must(t, 1,
		&state.RegisterNode{Node: state.Node{ID: "n1", Addresses: []string{"127.0.0.1:7000"}, GPUs: 4, Health: state.Alive}},
		&state.RegisterNode{Node: state.Node{ID: "n2", Addresses: []string{"127.0.0.1:7001"}, GPUs: 4, Health: state.Alive}},
		&state.SubmitJob{ID: "j1", Spec: testSpec(), SubmitTime: 10},
		&state.SubmitJob{ID: "j2", Spec: testSpec(), SubmitTime: 11},
		&state.CommitAllocation{Generation: 1, Term: 1, Jobs: map[string][]state.Slot{"j1": {{Node: "n2", GPUs: 2}, {Node: "n1", GPUs: 2}}}},
		&state.RecordProfile{ID: "j1", Incarnation: 1, Entries: []state.ProfileEntry{entry(2, 4, 64, 0.1, 0.2, 3)}},
	)
	return a
}

// TestApplyUndecodable: an entry that does not decode is refused in the
// Result, with the state unchanged.
func TestApplyUndecodable(t *testing.T) {
	a := populated(t)
	before := state.EncodeState(a.f.State())
	good, err := state.Encode(&state.MarkNode{ID: "n1", Health: state.Suspect})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, state.ErrMalformed},
		{"future version", append([]byte{state.CommandVersion + 1}, good[1:]...), state.ErrUnknownVersion},
		{"unknown type", []byte{state.CommandVersion, 200}, state.ErrUnknownCommand},
		{"truncated", good[:len(good)-1], state.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := a.f.Apply(&raft.Log{Index: 50, Term: 1, Data: tt.data}).(Result)
			if !errors.Is(res.Err, tt.want) || res.Index != 50 {
				t.Fatalf("got %+v, want %v at index 50", res, tt.want)
			}
			if !bytes.Equal(before, state.EncodeState(a.f.State())) {
				t.Fatal("a refused entry changed the state")
			}
		})
	}
}

// TestSnapshotRestoreIdentical: a Raft snapshot is the state's encoding,
// and an FSM restored from it keeps applying the same way.
func TestSnapshotRestoreIdentical(t *testing.T) {
	a := populated(t)
	snap, err := a.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed %v, cancelled %v", sink.closed, sink.cancelled)
	}
	want := state.EncodeState(a.f.State())
	if !bytes.Equal(want, sink.Bytes()) {
		t.Fatal("snapshot bytes are not the state encoding")
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	b := &fsmApplier{f: g, index: a.index}
	next := &state.CommitAllocation{Generation: 2, Term: 3, Jobs: map[string][]state.Slot{"j2": {{Node: "n1", GPUs: 1}}}}
	a.must(t, 3, next)
	b.must(t, 3, next)
	if !bytes.Equal(state.EncodeState(a.f.State()), state.EncodeState(g.State())) {
		t.Fatal("states diverged after restore")
	}
}

// TestRestoreRefusesCorruptSnapshots: a corrupt snapshot leaves the FSM's
// state as it was.
func TestRestoreRefusesCorruptSnapshots(t *testing.T) {
	a := populated(t)
	good := state.EncodeState(a.f.State())
	flipped := bytes.Clone(good)
	flipped[10] ^= 1
	if err := a.f.Restore(io.NopCloser(bytes.NewReader(flipped))); !errors.Is(err, state.ErrMalformed) {
		t.Fatalf("Restore of a corrupt snapshot: %v", err)
	}
	if !bytes.Equal(good, state.EncodeState(a.f.State())) {
		t.Fatal("a refused snapshot replaced the state")
	}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
