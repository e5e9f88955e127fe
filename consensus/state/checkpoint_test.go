package state

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestRoundCheckpointEvents: a round whose measurement carries a
// checkpoint later than the job's last emits exactly one checkpointed
// event in the same apply and records it; one that does not advance it
// (none, the same, an older one, one of a stale measurement, one of an
// incarnation the job has not reached) emits none and records nothing.
func TestRoundCheckpointEvents(t *testing.T) {
	a := newApplier()
	spec := testSpec()
	spec.Epochs = 40
	a.must(t, 1,
		&RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive}},
		&SubmitJob{ID: "j", Spec: spec, SubmitTime: 1},
		&Round{Generation: 1, Term: 1, Time: 10, Jobs: map[string][]Slot{"j": {{"n1", 2}}}},
	)
	seq := uint64(0)
	gen := uint64(1)
	first := Checkpoint{Incarnation: 1, Epoch: 12, Progress: 310.5, Time: 1_796_000_000}
	later := Checkpoint{Incarnation: 1, Epoch: 13, Progress: 330, Time: 1_796_000_060}
	steps := []struct {
		name  string
		ck    Checkpoint
		stale bool   // the measurement repeats the last one (not merged)
		want  string // the event's reason ("": no event)
		last  Checkpoint
	}{
		{"no checkpoint", Checkpoint{}, false, "", Checkpoint{}},
		{"first checkpoint", first, false,
			"checkpoint at epoch 12 of 40 (30 % done), progress 310.5, incarnation 1, saved at 2026-11-30T", first},
		{"the same checkpoint again", first, false, "", first},
		{"an older checkpoint", Checkpoint{Incarnation: 1, Epoch: 11, Progress: 300, Time: 1_795_999_000}, false, "", first},
		{"a later checkpoint", later, false, "checkpoint at epoch 13 of 40 (32 % done), progress 330.0, incarnation 1", later},
		{"a stale measurement", Checkpoint{Incarnation: 1, Epoch: 14, Progress: 340, Time: 1_796_000_120}, true, "", later},
		{"a future incarnation", Checkpoint{Incarnation: 2, Epoch: 14, Progress: 340, Time: 1_796_000_120}, false, "", later},
	}
	for i, st := range steps {
		// A round keeping j's placement whose update carries the next
		// measurement (or, stale, the last one again) with the step's
		// checkpoint.
		gen++
		from := seq
		if st.stale {
			from = seq - 1
		}
		c := &Round{Generation: gen, Term: 1, Time: float64(20 + 10*i), Jobs: map[string][]Slot{"j": {{"n1", 2}}},
			Updates: []RoundJob{{ID: "j", Incarnation: 1, Running: true, HasMeas: true,
				Meas: Measurement{Session: 1, From: from, To: from + 1, Epoch: st.ck.Epoch, Progress: st.ck.Progress, Checkpoint: st.ck}}}}
		last := a.s.Events.LastSeq()
		drops, err := a.applyDrops(1, c)
		if err != nil || (len(drops) > 0) != st.stale {
			t.Fatalf("%s: drops %+v, error %v", st.name, drops, err)
		}
		if !st.stale {
			seq++
		}
		var got []Event
		for _, ev := range a.s.Events.Since("", last, 0) {
			if ev.Type == EventCheckpointed {
				got = append(got, ev)
			}
		}
		switch {
		case st.want == "" && len(got) != 0:
			t.Errorf("%s: events %+v, want none", st.name, got)
		case st.want != "" && (len(got) != 1 || got[0].Job != "j" || got[0].Time != c.Time || !strings.Contains(got[0].Reason, st.want)):
			t.Errorf("%s: events %+v, want one with %q", st.name, got, st.want)
		}
		if c := a.s.Jobs["j"].Checkpoint; c != st.last {
			t.Errorf("%s: last checkpoint %+v, want %+v", st.name, c, st.last)
		}
	}
	// A new incarnation's checkpoint advances even if its worker's clock
	// is behind (another machine), and a completion's measurement
	// carries the last one, before the completed event.
	gen++
	a.must(t, 1, &Round{Generation: gen, Term: 1, Time: 90, Jobs: map[string][]Slot{"j": {{"n1", 1}}}})
	next := Checkpoint{Incarnation: 2, Epoch: 14, Progress: 350, Time: 1_795_000_000}
	fin := &FinishJob{ID: "j", Incarnation: 2, State: Completed, Reason: "trained", Time: 100,
		Meas: &Measurement{Session: 1, From: seq, To: seq + 1, Epoch: 14, Progress: 350, Checkpoint: next}}
	last := a.s.Events.LastSeq()
	a.must(t, 1, fin)
	var types []string
	for _, ev := range a.s.Events.Since("j", last, 0) {
		types = append(types, ev.Type.String())
	}
	if got := strings.Join(types, " "); got != "checkpointed completed" {
		t.Errorf("events of the completion: %s", got)
	}
	// The history keeps the latest checkpointed event of each
	// incarnation: the later one replaced the first.
	var cks []string
	for _, ev := range a.s.Events.Since("j", 0, 0) {
		if ev.Type == EventCheckpointed {
			cks = append(cks, ev.Reason)
		}
	}
	if len(cks) != 2 || !strings.Contains(cks[0], "epoch 13 of 40") || !strings.Contains(cks[1], "incarnation 2") {
		t.Errorf("checkpointed events kept: %q", cks)
	}
	if a.s.Jobs["j"].Checkpoint != next {
		t.Errorf("last checkpoint %+v", a.s.Jobs["j"].Checkpoint)
	}
	// The state round-trips through a snapshot with its checkpoint.
	s, err := DecodeState(EncodeState(a.s))
	if err != nil || s.Jobs["j"].Checkpoint != next {
		t.Fatalf("decoded %+v, %v", s, err)
	}
}

// TestCheckpointEncoding: a round or a completion without a checkpoint
// encodes as before one existed; with one it is encoded last and decodes
// back; a checkpoint encoded empty, out of order, of an update without
// a measurement or with bad numbers is refused.
func TestCheckpointEncoding(t *testing.T) {
	ck := Checkpoint{Incarnation: 1, Epoch: 2, Progress: 3, Time: 4}
	meas := Measurement{Session: 1, From: 0, To: 1, Epoch: 2, Progress: 3}
	plain := &Round{Generation: 2, Term: 1, Time: 20, Jobs: map[string][]Slot{"a": {{"n1", 1}}},
		Updates: []RoundJob{{ID: "a", Incarnation: 1, HasMeas: true, Meas: meas}, {ID: "b", Incarnation: 1, Restart: true},
			{ID: "c", Incarnation: 1, HasMeas: true, Meas: meas}}}
	withCk := *plain
	withCk.Updates = append([]RoundJob(nil), plain.Updates...)
	withCk.Updates[2].Meas.Checkpoint = ck
	pb, cb := mustEncode(t, plain), mustEncode(t, &withCk)
	if !bytes.HasPrefix(cb, pb) {
		t.Fatal("the checkpoints are not encoded last")
	}
	c, err := Decode(cb)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.(*Round); r.Updates[2].Meas.Checkpoint != ck || !r.Updates[0].Meas.Checkpoint.IsZero() || r.Note != "" || r.Leader != "" {
		t.Fatalf("decoded %+v", r.Updates)
	}
	noted := withCk
	noted.Note, noted.Leader = "policy pollux", "s1"
	if c, err := Decode(mustEncode(t, &noted)); err != nil || c.(*Round).Leader != "s1" || c.(*Round).Updates[2].Meas.Checkpoint != ck {
		t.Fatalf("with a note and a leader: %+v, %v", c, err)
	}

	fin := &FinishJob{ID: "a", Incarnation: 1, State: Completed, Time: 5, Meas: &meas}
	fb := mustEncode(t, fin)
	m := meas
	m.Checkpoint = ck
	fck := &FinishJob{ID: "a", Incarnation: 1, State: Completed, Time: 5, Meas: &m}
	fcb := mustEncode(t, fck)
	if !bytes.HasPrefix(fcb, fb) {
		t.Fatal("a completion's checkpoint is not encoded last")
	}
	if c, err := Decode(fcb); err != nil || c.(*FinishJob).Meas.Checkpoint != ck {
		t.Fatalf("decoded %+v, %v", c, err)
	}

	// tail appends to the plain round's encoding an empty note and
	// leader, then what fill writes.
	tail := func(fill func(w *writer)) []byte {
		w := &writer{b: bytes.Clone(pb)}
		w.str("")
		w.str("")
		fill(w)
		return w.b
	}
	bad := []struct {
		name string
		b    []byte
		want error
	}{
		{"round checkpoints empty", tail(func(w *writer) { w.uvarint(0) }), ErrMalformed},
		{"update out of range", tail(func(w *writer) { w.uvarint(1); w.uvarint(3); encodeCheckpoint(w, &ck) }), ErrMalformed},
		{"update without a measurement", tail(func(w *writer) { w.uvarint(1); w.uvarint(1); encodeCheckpoint(w, &ck) }), ErrMalformed},
		{"updates out of order", tail(func(w *writer) {
			w.uvarint(2)
			w.uvarint(2)
			encodeCheckpoint(w, &ck)
			w.uvarint(0)
			encodeCheckpoint(w, &ck)
		}), ErrMalformed},
		{"checkpoint encoded empty", tail(func(w *writer) { w.uvarint(1); w.uvarint(0); encodeCheckpoint(w, &Checkpoint{}) }), ErrMalformed},
		{"negative epoch", tail(func(w *writer) {
			w.uvarint(1)
			w.uvarint(0)
			encodeCheckpoint(w, &Checkpoint{Incarnation: 1, Epoch: -1})
		}), ErrInvalid},
		{"finish checkpoint empty", func() []byte { w := &writer{b: bytes.Clone(fb)}; encodeCheckpoint(w, &Checkpoint{}); return w.b }(), ErrMalformed},
	}
	for _, tc := range bad {
		if _, err := Decode(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, ck := range []Checkpoint{{Epoch: 1}, {Incarnation: 1, Progress: -1}, {Incarnation: 1, Time: math.NaN()}} {
		r := withCk
		r.Updates = append([]RoundJob(nil), plain.Updates...)
		r.Updates[0].Meas.Checkpoint = ck
		if _, err := Encode(&r); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkpoint %+v: %v", ck, err)
		}
	}
}

// TestCheckpointsKeepAJobsHistory: a job checkpointing in every round,
// far more often than MaxJobEvents, keeps its first events (submitted,
// placed) and one checkpointed event per incarnation; a state restored
// from a snapshot now and then keeps exactly the same events as one
// that never was (the replaced event's hole never shows).
func TestCheckpointsKeepAJobsHistory(t *testing.T) {
	a, b := newApplier(), newApplier()
	setup := []Command{&RegisterNode{Node: Node{ID: "n1", GPUs: 8, Health: Alive}},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1}, &SubmitJob{ID: "k", Spec: testSpec(), SubmitTime: 1}}
	a.must(t, 1, setup...)
	b.must(t, 1, setup...)
	inc := map[string]uint64{}
	for gen := uint64(1); gen <= 3*MaxJobEvents; gen++ {
		// j moves every 50 rounds (a new incarnation), k never; both
		// checkpoint in every round after their placement.
		r := &Round{Generation: gen, Term: 1, Time: float64(gen), Jobs: map[string][]Slot{"j": {{"n1", 1 + int(gen/50%2)}}, "k": {{"n1", 1}}}}
		if gen > 1 {
			for _, id := range []string{"j", "k"} {
				r.Updates = append(r.Updates, RoundJob{ID: id, Incarnation: inc[id], HasMeas: true, Meas: Measurement{Session: 1, From: gen - 2, To: gen - 1,
					Epoch: int(gen), Progress: float64(gen), Checkpoint: Checkpoint{Incarnation: inc[id], Epoch: int(gen), Progress: float64(gen), Time: float64(gen)}}})
			}
		}
		a.must(t, 1, r)
		b.must(t, 1, r)
		for _, id := range []string{"j", "k"} {
			inc[id] = a.s.Jobs[id].Incarnation
		}
		if gen%23 == 0 {
			s, err := DecodeState(EncodeState(b.s))
			if err != nil {
				t.Fatal(err)
			}
			b.s = s
		}
		if !bytes.Equal(EncodeState(a.s), EncodeState(b.s)) || a.s.Events.Len() != b.s.Events.Len() || a.s.Events.Bytes() != b.s.Events.Bytes() {
			t.Fatalf("generation %d: the restored state's events differ", gen)
		}
	}
	for id, want := range map[string]string{
		"j": "submitted placed checkpointed resized checkpointed resized checkpointed resized checkpointed",
		"k": "submitted placed checkpointed",
	} {
		var types []string
		for _, ev := range a.s.Events.Since(id, 0, 0) {
			types = append(types, ev.Type.String())
		}
		if got := strings.Join(types, " "); got != want {
			t.Errorf("events of %s: %s, want %s", id, got, want)
		}
	}
}
