package state

import (
	"errors"
	"testing"
)

// The autoscaler's commands: fenced by term, names checked against what
// the state manages, each machine asked for once.
func TestScaleCommands(t *testing.T) {
	a := newApplier()
	a.must(t, 2, &RegisterNode{Node: Node{ID: "a0", GPUs: 4, Health: Alive}},
		&ScaleDecision{Term: 2, Time: 1, Desired: 3, Add: []string{"auto-1", "auto-2"}})
	for _, tc := range []struct {
		name string
		term uint64
		c    Command
		want error
	}{
		{"a deposed leader's decision", 3, &ScaleDecision{Term: 2, Time: 2, Desired: 4, Add: []string{"auto-3"}}, ErrStaleTerm},
		{"a deposed leader's update", 3, &ScaleUpdate{Term: 2, Time: 2, Name: "auto-1", Outcome: ScaleJoined}, ErrStaleTerm},
		{"a machine asked for twice", 3, &ScaleDecision{Term: 3, Time: 2, Desired: 4, Add: []string{"auto-1"}}, ErrInvalid},
		{"a registered node added", 3, &ScaleDecision{Term: 3, Time: 2, Desired: 4, Add: []string{"a0"}}, ErrInvalid},
		{"an unmanaged node drained", 3, &ScaleDecision{Term: 3, Time: 2, Desired: 1, Drain: []string{"a0"}}, ErrInvalid},
		{"a booting machine drained", 3, &ScaleDecision{Term: 3, Time: 2, Desired: 1, Drain: []string{"auto-1"}}, ErrInvalid},
		{"an unknown machine joining", 3, &ScaleUpdate{Term: 3, Time: 2, Name: "auto-9", Outcome: ScaleJoined}, ErrUnknownNode},
		{"a name twice in one decision", 3, &ScaleDecision{Term: 3, Time: 2, Desired: 1, Add: []string{"x", "x"}}, ErrInvalid},
		{"a bad outcome", 3, &ScaleUpdate{Term: 3, Time: 2, Name: "auto-1", Outcome: 7}, ErrInvalid},
		{"a negative size", 3, &ScaleDecision{Term: 3, Time: 2, Desired: -1}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := EncodeState(a.state())
			if err := a.apply(t, tc.term, tc.c); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if after := EncodeState(a.state()); string(after) != string(before) {
				t.Fatal("a refused command changed the state")
			}
		})
	}
	a.must(t, 3, &ScaleUpdate{Term: 3, Time: 3, Name: "auto-1", Outcome: ScaleJoined},
		&ScaleDecision{Term: 3, Time: 4, Desired: 2, Drain: []string{"auto-1"}},
		&ScaleUpdate{Term: 3, Time: 5, Name: "auto-2", Outcome: ScaleRemoved, Reason: "never joined"})
	sc := a.state().Scale
	if sc.Desired != 2 || sc.Seq != 2 || len(sc.Nodes) != 1 || sc.Nodes["auto-1"].Phase != ScaleDraining || sc.Nodes["auto-1"].Term != 3 {
		t.Fatalf("state %+v (auto-1 %+v)", sc, sc.Nodes["auto-1"])
	}
	if err := a.apply(t, 3, &ScaleUpdate{Term: 3, Time: 6, Name: "auto-1", Outcome: ScaleJoined}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a draining machine joining again: %v", err)
	}
	// A removed machine's name is never asked for again by a leader that
	// counts from Seq; the state forgets it.
	a.must(t, 3, &ScaleUpdate{Term: 3, Time: 7, Name: "auto-1", Outcome: ScaleRemoved})
	if sc := a.state().Scale; sc.Nodes != nil || sc.Seq != 2 {
		t.Fatalf("state after removals %+v", sc)
	}
}
