package state

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"pollux/cluster/federation"
)

// wantEvent is an event a command must emit: its type, job or node,
// time, and words its reason must hold.
type wantEvent struct {
	typ    EventType
	job    string
	node   string
	at     float64
	reason string
}

// TestApplyEmitsEvents: each command that changes what a user sees of a
// job (or a node) emits its event in the same apply, with the command's
// time and a reason; a refused command emits nothing.
func TestApplyEmitsEvents(t *testing.T) {
	a := newApplier()
	a.must(t, 1,
		&RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive}},
		&RegisterNode{Node: Node{ID: "n2", GPUs: 4, Health: Alive}},
	)
	steps := []struct {
		name    string
		c       Command
		refused bool
		want    []wantEvent
	}{
		{"submit", &SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 10}, false,
			[]wantEvent{{EventSubmitted, "j", "", 10, "submitted for 1 to 8 GPUs"}}},
		{"submit again", &SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 11}, true, nil},
		{"place", &Round{Generation: 1, Term: 1, Time: 20, Jobs: map[string][]Slot{"j": {{"n1", 2}}}}, false,
			[]wantEvent{{EventLeaderChanged, "", "", 20, "a new leader leads in term 1 and committed its first round (generation 1)"},
				{EventPlaced, "j", "", 20, "placed on 2 GPUs on n1 (2) (generation 1, incarnation 1)"}}},
		{"resize", &Round{Generation: 2, Term: 1, Time: 30, Jobs: map[string][]Slot{"j": {{"n1", 2}, {"n2", 2}}},
			Updates: []RoundJob{{ID: "j", Incarnation: 1, HasBid: true, Bid: testBid(1, 1)}}}, false,
			[]wantEvent{{EventResized, "j", "", 30, "resized from 2 GPUs on n1 (2) to 4 GPUs on n1 (2), n2 (2) (incarnation 2): the allocator's new allocation (generation 2); local batch 64, 1 accumulation steps"}}},
		{"stale round", &Round{Generation: 2, Term: 1, Time: 31, Jobs: map[string][]Slot{}}, true, nil},
		{"restart", &Round{Generation: 3, Term: 1, Time: 40, Jobs: map[string][]Slot{"j": {{"n1", 2}, {"n2", 2}}},
			Updates: []RoundJob{{ID: "j", Incarnation: 2, Restart: true}}}, false,
			[]wantEvent{{EventRestarted, "j", "", 40, "restarted on 4 GPUs on n1 (2), n2 (2) (incarnation 3): its workers failed (1 in a row)"}}},
		{"node lost", &MarkNode{ID: "n2", Health: Dead}, false,
			[]wantEvent{{EventNodeLost, "", "n2", 40, "node n2 is dead"}}},
		{"node dead again", &MarkNode{ID: "n2", Health: Left}, false, nil},
		{"unknown node", &MarkNode{ID: "n9", Health: Dead}, true, nil},
		{"node back", &RegisterNode{Node: Node{ID: "n2", GPUs: 4, Health: Alive}}, false,
			[]wantEvent{{EventNodeJoined, "", "n2", 40, "node n2 joined with 4 GPUs (again: it was left)"}}},
		{"node lost again", &MarkNode{ID: "n2", Health: Dead}, false,
			[]wantEvent{{EventNodeLost, "", "n2", 40, "node n2 is dead"}}},
		{"node new", &RegisterNode{Node: Node{ID: "n3", GPUs: 8, Health: Alive, GPUType: "a100", Rack: "r2"}}, false,
			[]wantEvent{{EventNodeJoined, "", "n3", 40, "node n3 joined with 8 GPUs of type a100 in rack r2"}}},
		{"node registered again", &RegisterNode{Node: Node{ID: "n3", GPUs: 8, Health: Alive, GPUType: "a100", Rack: "r2"}}, false, nil},
		{"node too big", &RegisterNode{Node: Node{ID: "n4", GPUs: -1, Health: Alive}}, true, nil},
		{"resize off a lost node", &Round{Generation: 4, Term: 1, Time: 50, Jobs: map[string][]Slot{"j": {{"n1", 2}}}}, false,
			[]wantEvent{{EventResized, "j", "", 50, "to 2 GPUs on n1 (2) (incarnation 4): node n2 was lost"}}},
		{"preempt", &Round{Generation: 5, Term: 1, Time: 60, Jobs: map[string][]Slot{}}, false,
			[]wantEvent{{EventPreempted, "j", "", 60, "lost its 2 GPUs on n1 (2): the allocator's new allocation (generation 5)"}}},
		{"complete", &FinishJob{ID: "j", State: Completed, Reason: "trained 90 epochs", Time: 70}, false,
			[]wantEvent{{EventCompleted, "j", "", 70, "trained 90 epochs"}}},
		{"complete again", &FinishJob{ID: "j", State: Completed, Time: 71}, true, nil},
		{"submit k", &SubmitJob{ID: "k", Spec: testSpec(), SubmitTime: 80}, false,
			[]wantEvent{{EventSubmitted, "k", "", 80, "submitted"}}},
		{"cancel", &CancelJob{ID: "k", Reason: "not needed", Time: 90}, false,
			[]wantEvent{{EventCancelled, "k", "", 90, "not needed"}}},
		{"submit f", &SubmitJob{ID: "f", Spec: testSpec(), SubmitTime: 100}, false,
			[]wantEvent{{EventSubmitted, "f", "", 100, "submitted"}}},
		{"place f", &Round{Generation: 6, Term: 2, Time: 110, Jobs: map[string][]Slot{"f": {{"n1", 1}}}, Leader: "s2"}, false,
			[]wantEvent{{EventLeaderChanged, "", "", 110, "server s2 leads in term 2 and committed its first round (generation 6); the last allocation was of term 1"},
				{EventPlaced, "f", "", 110, "placed on 1 GPU on n1 (1)"}}},
		{"fail f", &Round{Generation: 7, Term: 2, Time: 120, MaxFailures: 1, Jobs: map[string][]Slot{},
			Updates: []RoundJob{{ID: "f", Incarnation: 1, Restart: true}}}, false,
			[]wantEvent{{EventFailed, "f", "", 120, "workers failed in 1 incarnations in a row"}}},
		{"finish without a reason", &FinishJob{ID: "j", State: Failed, Time: 130}, true, nil},
	}
	for _, st := range steps {
		last := a.s.Events.LastSeq()
		before := EncodeState(a.state())
		term := uint64(1)
		if r, ok := st.c.(*Round); ok {
			term = r.Term
		}
		got := applyStep(t, a, st.name, term, st.c, st.refused, before, last)
		if len(got) != len(st.want) {
			t.Fatalf("%s: events %+v, want %d", st.name, got, len(st.want))
		}
		for i, w := range st.want {
			g := got[i]
			if g.Seq != last+uint64(i)+1 || g.Type != w.typ || g.Job != w.job || g.Node != w.node || g.Time != w.at || !strings.Contains(g.Reason, w.reason) {
				t.Errorf("%s: event %+v, want %+v after sequence number %d", st.name, g, w, last)
			}
		}
	}
	// The job's history, in order.
	var types []string
	for _, ev := range a.s.Events.Since("j", 0, 0) {
		types = append(types, ev.Type.String())
	}
	if got := strings.Join(types, " "); got != "submitted placed resized restarted resized preempted completed" {
		t.Errorf("job j's events: %s", got)
	}
}

// TestReRegisterEmitsPreempted: a node re-registered with attributes its
// jobs no longer fit evicts them, and each eviction is an event.
func TestReRegisterEmitsPreempted(t *testing.T) {
	a := newApplier()
	a.must(t, 1,
		&RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive, GPUType: "t4"}},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1},
		&Round{Generation: 1, Term: 1, Time: 5, Jobs: map[string][]Slot{"j": {{"n1", 4}}}},
		&RegisterNode{Node: Node{ID: "n1", GPUs: 2, Health: Alive, GPUType: "t4"}},
	)
	evs := a.s.Events.Since("j", 0, 0)
	if last := evs[len(evs)-1]; last.Type != EventPreempted || last.Time != 5 || !strings.Contains(last.Reason, "node n1 changed (now 2 GPUs") {
		t.Errorf("last event %+v", last)
	}
}

// TestEventRetention: the state keeps the last MaxJobEvents of a job,
// the last MaxEvents of the cluster and events within MaxEventBytes;
// sequence numbers go on; a pruned job's events go.
func TestEventRetention(t *testing.T) {
	a := newApplier()
	a.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive}},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1})
	for gen := uint64(1); gen <= MaxJobEvents+10; gen++ {
		a.must(t, 1, &Round{Generation: gen, Term: 1, Time: float64(gen), Jobs: map[string][]Slot{"j": {{"n1", 1 + int(gen%2)}}}})
	}
	evs := a.s.Events.Since("j", 0, 0)
	// Before j's: n1 joined; among them: the first round's leader_changed.
	if len(evs) != MaxJobEvents || evs[len(evs)-1].Seq != MaxJobEvents+13 || evs[0].Seq != 14 {
		t.Fatalf("%d events of j, from %d to %d", len(evs), evs[0].Seq, evs[len(evs)-1].Seq)
	}

	// The cluster's cap.
	b := newApplier()
	for i := range MaxEvents + 5 {
		b.must(t, 1, &SubmitJob{ID: fmt.Sprintf("j%05d", i), Spec: testSpec(), SubmitTime: float64(i)})
	}
	if b.s.Events.Len() != MaxEvents || b.s.Events.LastSeq() != MaxEvents+5 || b.s.Events.Since("", 0, 1)[0].Job != "j00005" {
		t.Fatalf("%d events up to %d", b.s.Events.Len(), b.s.Events.LastSeq())
	}
	// Since: after a dropped event, after the last, after the largest
	// sequence number there is.
	for _, tc := range []struct {
		since uint64
		n     int
	}{{3, MaxEvents}, {MaxEvents, 5}, {MaxEvents + 5, 0}, {math.MaxUint64, 0}} {
		if got := len(b.s.Events.Since("", tc.since, 0)); got != tc.n {
			t.Errorf("since %d: %d events, want %d", tc.since, got, tc.n)
		}
	}
	// Pruning a job forgets its events (its submission and its
	// cancellation, which dropped the oldest of the cluster).
	b.must(t, 1, &CancelJob{ID: "j00007", Time: 1}, &Prune{Jobs: []string{"j00007"}})
	if n := len(b.s.Events.Since("j00007", 0, 0)); n != 0 || b.s.Events.Len() != MaxEvents-2 {
		t.Errorf("%d events of a pruned job, %d in all", n, b.s.Events.Len())
	}

	// The bytes' cap: cancellations with long reasons.
	long := strings.Repeat("r", maxEventReason)
	for i := 10; i < 4510; i++ {
		b.must(t, 1, &CancelJob{ID: fmt.Sprintf("j%05d", i), Reason: long, Time: 2})
	}
	if got := b.s.Events.Bytes(); got > MaxEventBytes || got < MaxEventBytes-2*maxEventReason || b.s.Events.Len() >= MaxEvents {
		t.Errorf("%d events take %d bytes (cap %d)", b.s.Events.Len(), got, MaxEventBytes)
	}
	if evs := b.s.Events.Since("", 0, 0); evs[len(evs)-1].Job != "j04509" || evs[len(evs)-1].Type != EventCancelled {
		t.Errorf("the newest event was dropped: %+v", evs[len(evs)-1])
	}
	// A budget set to what the state holds (specs and events) refuses the
	// next submission: lowering it drops no event.
	held := b.s.Events.Len()
	b.must(t, 1, &InitCluster{ID: "c", CheckpointRoot: "/ckpt"})
	b.must(t, 1, &SetQuota{Budget: b.s.SpecBytes() + b.s.Events.Bytes()})
	late := testSpec()
	late.CheckpointDir = ""
	if err := b.apply(t, 1, &SubmitJob{ID: "late", Spec: late, SubmitTime: 3, Owned: true}); !errors.Is(err, ErrStateFull) || b.s.Events.Len() != held {
		t.Errorf("submission at the budget: %v (%d events, were %d)", err, b.s.Events.Len(), held)
	}
}

// TestEventReasonCut: a reason longer than maxEventReason is cut at a
// rune boundary.
func TestEventReasonCut(t *testing.T) {
	a := newApplier()
	a.must(t, 1, &SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1},
		&CancelJob{ID: "j", Reason: strings.Repeat("é", 1500), Time: 2})
	ev := a.s.Events.Since("j", 1, 0)[0]
	if len(ev.Reason) > maxEventReason || !strings.HasSuffix(ev.Reason, "é...") {
		t.Errorf("reason of %d bytes ending %q", len(ev.Reason), ev.Reason[len(ev.Reason)-8:])
	}
}

// TestEventsSnapshotRoundTrip: the events survive a snapshot, and a
// restored state goes on exactly as the original (same retention, same
// sequence numbers).
func TestEventsSnapshotRoundTrip(t *testing.T) {
	a := newApplier()
	a.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive}},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1})
	for gen := uint64(1); gen <= MaxJobEvents; gen++ {
		a.must(t, 1, &Round{Generation: gen, Term: 1, Time: float64(gen), Jobs: map[string][]Slot{"j": {{"n1", 1 + int(gen%2)}}}})
	}
	s, err := DecodeState(EncodeState(a.s))
	if err != nil {
		t.Fatal(err)
	}
	b := &applier{s: s}
	next := &Round{Generation: MaxJobEvents + 1, Term: 1, Time: 100, Jobs: map[string][]Slot{}}
	a.must(t, 1, next)
	b.must(t, 1, next)
	if !bytes.Equal(EncodeState(a.s), EncodeState(b.s)) {
		t.Fatal("a restored state goes on differently")
	}
	if evs := b.s.Events.Since("j", 0, 0); len(evs) != MaxJobEvents || evs[len(evs)-1].Type != EventPreempted {
		t.Errorf("%d events, last %+v", len(evs), evs[len(evs)-1])
	}
}

// TestDecodeEventsRefuses: events out of order, beyond the last sequence
// number, of an unknown type or naming the wrong subject do not decode.
func TestDecodeEventsRefuses(t *testing.T) {
	enc := func(last uint64, evs ...Event) []byte {
		w := &writer{}
		e := Events{last: last, list: evs}
		e.recount()
		encodeEvents(w, &e)
		return w.b
	}
	ok := Event{Seq: 1, Time: 1, Type: EventSubmitted, Job: "j", Reason: "r"}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"out of order", enc(3, Event{Seq: 2, Type: EventSubmitted, Job: "j"}, ok), ErrMalformed},
		{"beyond the last", enc(0, ok), ErrMalformed},
		{"unknown type", enc(1, Event{Seq: 1, Type: 99, Job: "j"}), ErrInvalid},
		{"node event of a job", enc(1, Event{Seq: 1, Type: EventNodeLost, Job: "j", Node: "n"}), ErrInvalid},
		{"job event without a job", enc(1, Event{Seq: 1, Type: EventPlaced}), ErrInvalid},
		{"negative time", enc(1, Event{Seq: 1, Time: -1, Type: EventPlaced, Job: "j"}), ErrInvalid},
		{"truncated", enc(1, ok)[:5], ErrMalformed},
	} {
		r := &reader{b: tc.b}
		_, err := decodeEvents(r, SnapshotVersion)
		if err == nil {
			err = r.done()
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	r := &reader{b: enc(5, ok)}
	if e, err := decodeEvents(r, SnapshotVersion); err != nil || e.Len() != 1 || e.LastSeq() != 5 {
		t.Errorf("a good encoding: %+v, %v", e, err)
	}
}

func FuzzDecodeEvents(f *testing.F) {
	a := newApplier()
	a.must(f, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive}},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1},
		&Round{Generation: 1, Term: 1, Time: 2, Jobs: map[string][]Slot{"j": {{"n1", 2}}}},
		&MarkNode{ID: "n1", Health: Dead})
	w := &writer{}
	encodeEvents(w, &a.s.Events)
	f.Add(w.b)
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &reader{b: b}
		e, err := decodeEvents(r, SnapshotVersion)
		if err == nil {
			err = r.done()
		}
		if err != nil {
			return
		}
		w := &writer{}
		encodeEvents(w, &e)
		if !bytes.Equal(w.b, b) {
			t.Fatal("decoded events re-encode differently")
		}
	})
}

// snapshotV12 is a version 12 snapshot: snapshotV11's state plus the
// events of a job placed, resized off a lost node and completed.
// It was written by the version 12 encoder and must still decode.
const snapshotV12 = "testdata/snapshot-v12.bin"

// applyStep applies c in term, checks it was refused or not as refused
// says (a refused one leaving the state as encoded in before), and
// returns the events written after sequence number last.
func applyStep(t *testing.T, a *applier, name string, term uint64, c Command, refused bool, before []byte, last uint64) []Event {
	t.Helper()
	err := a.apply(t, term, c)
	if (err != nil) != refused {
		t.Fatalf("%s: error %v, want refused %v", name, err, refused)
	}
	if refused && !bytes.Equal(before, EncodeState(a.state())) {
		t.Fatalf("%s: the refused command changed the state", name)
	}
	return a.s.Events.Since("", last, 0)
}

// v12State is snapshotV11's state and the commands of v12Commands.
func v12State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v11State(t)
	v12Commands(a, t)
	return a.state()
}

// v12Commands are the commands snapshotV12 adds to snapshotV11's state.
func v12Commands(a *applier, t testing.TB) {
	gen := a.s.Allocation.Generation
	place := func(slots ...Slot) map[string][]Slot {
		m := map[string][]Slot{"again": slots}
		for id, sl := range a.s.Allocation.Jobs {
			m[id] = sl
		}
		return m
	}
	a.must(t, 9,
		&Round{Generation: gen + 1, Term: 9, Time: 450, Jobs: place(Slot{"auto-1", 2}, Slot{"n2", 2})},
		&MarkNode{ID: "n2", Health: Dead},
		&Round{Generation: gen + 2, Term: 9, Time: 460, Jobs: place(Slot{"auto-1", 2})},
		&FinishJob{ID: "again", State: Completed, Reason: "trained", Time: 470},
	)
}

func TestSnapshotVersion12Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v12State(t)))
	b, s := decodeFixture(t, snapshotV12, 12)
	var types []string
	for _, ev := range s.Events.Since("again", 0, 0) {
		types = append(types, ev.Type.String())
	}
	if got := strings.Join(types, " "); got != "submitted placed resized completed" {
		t.Errorf("events of job again: %s", got)
	}
	if lost := s.Events.Since("", 0, 0); !strings.Contains(fmt.Sprint(lost), "node n2 is dead") {
		t.Errorf("no node_lost event in %+v", lost)
	}
	if s.Quotas.StateBudget() != 64<<20 || s.Jobs["again"].State != Completed || s.Jobs["typed"].Bid.Params.AlphaX != 0.25 {
		t.Errorf("versions 9 and 10 content lost")
	}
	if j := s.Jobs["keyed"]; j == nil || j.SubmitKey != "sub-1" {
		t.Errorf("version 11 content lost")
	}
	// The state decoded from the fixture is the state the commands make,
	// but for the events versions 14 added (the commands write them now).
	if again := EncodeState(withoutEvents(s)); !bytes.Equal(got, again) {
		t.Fatalf("the version 12 fixture decodes to another state than the commands make (%d bytes against %d, fixture %d)", len(again), len(got), len(b))
	}
}

// snapshotV14 is a version 14 snapshot: snapshotV13's state made by the
// version 14 rules (the joins of its nodes, the leader changes of its
// rounds, the grants and the reclaim of its leases), then n2 joining
// again and a managed machine drained.
// It was written by the version 14 encoder and must still decode.
const snapshotV14 = "testdata/snapshot-v14.bin"

func v14State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v13State(t)
	a.must(t, 9, &RegisterNode{Node: Node{ID: "n2", Addresses: []string{"127.0.0.1:7001"}, GPUs: 4, Health: Alive,
		Rack: "r2", Topology: []string{"r2", "z1"}, GPUType: "t4"}},
		&ScaleDecision{Term: 9, Time: 480, Desired: 5, Drain: []string{"auto-1"}})
	return a.state()
}

func TestSnapshotVersion14Golden(t *testing.T) {
	got := EncodeState(v14State(t))
	b, s := decodeFixture(t, snapshotV14, 14)
	count := map[string]int{}
	for _, ev := range s.Events.Since("", 0, 0) {
		count[ev.Type.String()]++
	}
	if count["node_joined"] < 2 || count["leader_changed"] < 1 || count["completed"] < 1 || count["lease_granted"] < 1 ||
		count["lease_reclaimed"] != 1 || count["node_drained"] < 2 {
		t.Errorf("version 14 events: %v", count)
	}
	if s.Jobs["typed"].Bid.RestartDelay != 7.5 {
		t.Errorf("version 13 content lost")
	}
	for id, j := range s.Jobs {
		if !j.Checkpoint.IsZero() {
			t.Errorf("version 14 job %s with a checkpoint %+v", id, j.Checkpoint)
		}
	}
	// The state decoded from the fixture is the state the commands make.
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 14 fixture decodes to another state than the commands make (%d bytes against %d, fixture %d)", len(again), len(got), len(b))
	}
	// A version 13 snapshot holding a type version 14 added is refused.
	w := &writer{}
	encodeEvents(w, &s.Events)
	if _, err := decodeEvents(&reader{b: w.b}, 13); !errors.Is(err, ErrInvalid) {
		t.Errorf("version 14 event types in a version 13 snapshot: %v", err)
	}
}

// snapshotV15 is a version 15 snapshot: snapshotV14's state, then a
// round whose measurement carries the checkpoint of job typed (its last
// checkpoint and the checkpointed event).
// go test ./consensus/state -run TestSnapshotVersion15Golden -update
// rewrites it; only do so for a change that keeps the version's bytes (a
// change of the format is a new version, and this file must still
// decode).
const snapshotV15 = "testdata/snapshot-v15.bin"

// v15Checkpoint is the checkpoint snapshotV15's job typed holds.
var v15Checkpoint = Checkpoint{Incarnation: 2, Epoch: 3, Progress: 12.5, Time: 1_796_000_000.25}

func v15State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v14State(t)
	j := a.s.Jobs["typed"]
	ck := v15Checkpoint
	ck.Incarnation = j.Incarnation
	a.must(t, 9, &Round{Generation: a.s.Allocation.Generation + 1, Term: 9, Time: 490, Jobs: a.s.Allocation.Jobs,
		Updates: []RoundJob{{ID: "typed", Incarnation: j.Incarnation, HasMeas: true,
			Meas: Measurement{Session: max(j.MeasSession, 1), From: j.MeasSeq, To: j.MeasSeq + 1, Epoch: 3, Progress: 12.5, GPUType: "a100", Checkpoint: ck}}}})
	return a.state()
}

func TestSnapshotVersion15Golden(t *testing.T) {
	got := EncodeState(v15State(t))
	if *updateGolden {
		if err := os.WriteFile(snapshotV15, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, s := decodeFixture(t, snapshotV15, 15)
	j := s.Jobs["typed"]
	if j.Checkpoint.IsZero() || j.Checkpoint.Epoch != v15Checkpoint.Epoch || j.Checkpoint.Time != v15Checkpoint.Time {
		t.Errorf("decoded checkpoint %+v", j.Checkpoint)
	}
	evs := s.Events.Since("typed", 0, 0)
	if last := evs[len(evs)-1]; last.Type != EventCheckpointed || !strings.Contains(last.Reason, "checkpoint at epoch 3") {
		t.Errorf("last event of typed: %+v", last)
	}
	if !bytes.Equal(got, b) {
		t.Fatalf("the encoding of version 15 changed (%d bytes, fixture %d): bump SnapshotVersion instead", len(got), len(b))
	}
	// A version 14 snapshot holding a type version 15 added is refused.
	w := &writer{}
	encodeEvents(w, &s.Events)
	if _, err := decodeEvents(&reader{b: w.b}, 14); !errors.Is(err, ErrInvalid) {
		t.Errorf("version 15 event types in a version 14 snapshot: %v", err)
	}
}

// TestRoundNote: a round's note is encoded last and only when set (a
// round without one encodes as before), an empty note encoded is
// malformed, and the events of the jobs the round moves quote it.
func TestRoundNote(t *testing.T) {
	plain := &Round{Generation: 2, Term: 1, Time: 20, Jobs: map[string][]Slot{"j": {{"n1", 2}}}}
	noted := *plain
	noted.Note = "policy pollux, fitness 1.2 (the last round's 1)"
	pb, nb := mustEncode(t, plain), mustEncode(t, &noted)
	if !bytes.HasPrefix(nb, pb) {
		t.Fatal("the note is not encoded last")
	}
	c, err := Decode(nb)
	if err != nil || c.(*Round).Note != noted.Note {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	w := &writer{b: pb}
	w.str("")
	if _, err := Decode(w.b); !errors.Is(err, ErrMalformed) {
		t.Errorf("an empty note encoded: %v", err)
	}
	noted.Note = strings.Repeat("x", maxEventReason+1)
	if _, err := Encode(&noted); !errors.Is(err, ErrInvalid) {
		t.Errorf("a long note: %v", err)
	}
	noted.Note = "policy pollux, fitness 1.2 (the last round's 1)"

	a := newApplier()
	a.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive}},
		&SubmitJob{ID: "j", Spec: testSpec(), SubmitTime: 1},
		&Round{Generation: 1, Term: 1, Time: 10, Jobs: map[string][]Slot{"j": {{"n1", 1}}}},
		&noted)
	evs := a.s.Events.Since("j", 0, 0)
	if last := evs[len(evs)-1]; last.Type != EventResized || !strings.Contains(last.Reason, "the allocator's new allocation (generation 2: "+noted.Note+")") {
		t.Errorf("resized event %+v", last)
	}
}

// BenchmarkRoundEvents is a round that moves 100 jobs of a state whose
// event history is full: the events it writes and the retention.
func BenchmarkRoundEvents(b *testing.B) {
	a := newApplier()
	a.must(b, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 1000, Health: Alive}})
	for i := range MaxEvents {
		a.must(b, 1, &SubmitJob{ID: fmt.Sprintf("j%05d", i), Spec: testSpec(), SubmitTime: float64(i)})
	}
	rounds := [2]*Round{}
	for r := range rounds {
		jobs := map[string][]Slot{}
		for i := range 100 {
			jobs[fmt.Sprintf("j%05d", i)] = []Slot{{"n1", 1 + r}}
		}
		rounds[r] = &Round{Term: 1, Jobs: jobs, Note: "policy pollux, fitness 1"}
	}
	b.ResetTimer()
	for i := range b.N {
		r := rounds[i%2]
		r.Generation, r.Time = uint64(i+1), float64(i)
		if _, err := ApplyTo(a.s, r, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEventRetentionAcrossSnapshots: a state restored from a snapshot
// every few commands keeps exactly the events of one that never was,
// when retention drops a job's oldest event from the middle of the
// history (three jobs moved at different rates past MaxJobEvents) or
// from its head: the holes a live state keeps never show.
func TestEventRetentionAcrossSnapshots(t *testing.T) {
	a, b := newApplier(), newApplier()
	setup := []Command{&RegisterNode{Node: Node{ID: "n1", GPUs: 8, Health: Alive}}}
	for _, id := range []string{"a", "b", "c"} {
		setup = append(setup, &SubmitJob{ID: id, Spec: testSpec(), SubmitTime: 1})
	}
	a.must(t, 1, setup...)
	b.must(t, 1, setup...)
	for gen := uint64(1); gen <= 3*MaxJobEvents+50; gen++ {
		// a moves every round, b every fifth, c never after its
		// placement: a's oldest event is mostly behind b's and c's.
		jobs := map[string][]Slot{"a": {{"n1", 1 + int(gen%2)}}, "b": {{"n1", 1 + int(gen/5%2)}}, "c": {{"n1", 1}}}
		r := &Round{Generation: gen, Term: 1, Time: float64(gen), Jobs: jobs}
		a.must(t, 1, r)
		b.must(t, 1, r)
		if gen%37 == 0 {
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
	if n := len(a.s.Events.Since("a", 0, 0)); n != MaxJobEvents {
		t.Errorf("job a has %d events", n)
	}
	if len(a.s.Events.Since("c", 0, 0)) != 2 {
		t.Errorf("job c's events (submitted, placed) were dropped: %+v", a.s.Events.Since("c", 0, 0))
	}
}

// snapshotV13 is a version 13 snapshot: snapshotV12's state plus a bid
// with a measured restart delay.
const snapshotV13 = "testdata/snapshot-v13.bin"

func v13State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v12State(t)
	j := a.s.Jobs["typed"]
	bid := j.Bid.clone()
	bid.Version++
	bid.RestartDelay = 7.5
	a.must(t, 9, &Round{Generation: a.s.Allocation.Generation + 1, Term: 9, Time: 480, Jobs: a.s.Allocation.Jobs,
		Updates: []RoundJob{{ID: "typed", Incarnation: j.Incarnation, HasBid: true, Bid: bid}}})
	return a.state()
}

func TestSnapshotVersion13Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v13State(t)))
	b, s := decodeFixture(t, snapshotV13, 13)
	if d := s.Jobs["typed"].Bid.RestartDelay; d != 7.5 {
		t.Errorf("decoded restart delay %v, want 7.5", d)
	}
	if s.Jobs["typed"].Bid.Params.AlphaX != 0.25 || s.Jobs["keyed"].SubmitKey != "sub-1" {
		t.Errorf("older versions' content lost")
	}
	// Older snapshots decode without a restart delay.
	_, old := decodeFixture(t, snapshotV12, 12)
	for id, j := range old.Jobs {
		if j.Bid.RestartDelay != 0 {
			t.Fatalf("version 12 job %s with a restart delay", id)
		}
	}
	// The state decoded from the fixture is the state the commands make,
	// but for the events version 14 added.
	if again := EncodeState(withoutEvents(s)); !bytes.Equal(got, again) {
		t.Fatalf("the version 13 fixture decodes to another state than the commands make (%d bytes against %d, fixture %d)", len(again), len(got), len(b))
	}
}

// TestClusterEvents: the lease and autoscaler commands write the
// cluster's and the nodes' events in their own apply, with their clock;
// a refused one writes none.
func TestClusterEvents(t *testing.T) {
	a := fedState(t)
	a.must(t, 2,
		&ScaleDecision{Term: 2, Time: 10, Desired: 3, Add: []string{"auto-1"}},
		&RegisterNode{Node: Node{ID: "auto-1", GPUs: 4, Health: Alive}},
		&ScaleUpdate{Term: 2, Time: 11, Name: "auto-1", Outcome: ScaleJoined},
	)
	steps := []struct {
		name    string
		term    uint64
		c       Command
		refused bool
		want    []wantEvent
	}{
		{"grant", 2, fedGrant("lab-a/n1@20", "n1", 2, 20), false,
			[]wantEvent{{EventLeaseGranted, "", "", 20, "lease lab-a/n1@20: lab-a lends lab-b 2 GPUs on n1 (2), for 300 s unless renewed"}}},
		{"renew", 2, fedCmd(federation.OpRenew, "lab-a", "lab-a/n1@20", 21), false, nil},
		{"reclaim", 2, fedCmd(federation.OpReclaim, "lab-a", "lab-a/n1@20", 22), false,
			[]wantEvent{{EventLeaseReclaimed, "", "", 22, "lease lab-a/n1@20: lab-a lends lab-b 2 GPUs on n1 (2); reclaimed by lab-a: its own jobs need the GPUs"}}},
		{"reclaim again", 2, fedCmd(federation.OpReclaim, "lab-a", "lab-a/n1@20", 23), true, nil},
		{"grant by the borrower", 2, &Lease{Cmd: federation.Command{Op: federation.OpGrant, From: "lab-b", Lease: "x", Lender: "lab-a", Borrower: "lab-b",
			Nodes: []federation.NodeGPUs{{Node: "n1", GPUs: 1}}, At: 24, TTL: 60}}, true, nil},
		{"drain", 2, &ScaleDecision{Term: 2, Time: 30, Desired: 2, Drain: []string{"auto-1"}}, false,
			[]wantEvent{{EventNodeDrained, "", "auto-1", 30, "node auto-1 (4 GPUs) drained by the autoscaler: the cluster wants 2 nodes (term 2)"}}},
		{"drain again", 2, &ScaleDecision{Term: 2, Time: 31, Desired: 2, Drain: []string{"auto-1"}}, true, nil},
		{"first round", 2, &Round{Generation: 1, Term: 2, Time: 40, Jobs: map[string][]Slot{}, Leader: "s1"}, false,
			[]wantEvent{{EventLeaderChanged, "", "", 40, "server s1 leads in term 2 and committed its first round (generation 1)"}}},
		{"next round", 2, &Round{Generation: 2, Term: 2, Time: 41, Jobs: map[string][]Slot{}, Leader: "s1"}, false, nil},
		{"deposed leader's round", 2, &Round{Generation: 3, Term: 3, Time: 42, Jobs: map[string][]Slot{}, Leader: "s2"}, true, nil},
		{"new term", 4, &Round{Generation: 3, Term: 4, Time: 50, Jobs: map[string][]Slot{}, Leader: "s3"}, false,
			[]wantEvent{{EventLeaderChanged, "", "", 50, "server s3 leads in term 4 and committed its first round (generation 3); the last allocation was of term 2"}}},
	}
	for _, st := range steps {
		last := a.s.Events.LastSeq()
		before := EncodeState(a.state())
		got := applyStep(t, a, st.name, st.term, st.c, st.refused, before, last)
		if len(got) != len(st.want) {
			t.Fatalf("%s: events %+v, want %d", st.name, got, len(st.want))
		}
		for i, w := range st.want {
			if g := got[i]; g.Type != w.typ || g.Job != w.job || g.Node != w.node || g.Time != w.at || g.Reason != w.reason {
				t.Errorf("%s: event %+v, want %+v", st.name, g, w)
			}
		}
	}
}

// TestRoundLeader: a round's leader is encoded after its note (an empty
// note then encoded too), a round without one encodes as before, and an
// empty leader encoded is malformed.
func TestRoundLeader(t *testing.T) {
	plain := &Round{Generation: 2, Term: 1, Time: 20, Jobs: map[string][]Slot{"j": {{"n1", 2}}}}
	for _, tc := range []struct{ note, leader string }{{"", "s1"}, {"policy pollux", "s2"}, {"policy pollux", ""}} {
		r := *plain
		r.Note, r.Leader = tc.note, tc.leader
		b := mustEncode(t, &r)
		if !bytes.HasPrefix(b, mustEncode(t, plain)) {
			t.Errorf("%+v: not encoded last", tc)
		}
		c, err := Decode(b)
		if err != nil || c.(*Round).Note != tc.note || c.(*Round).Leader != tc.leader {
			t.Errorf("%+v: decoded %+v, %v", tc, c, err)
		}
	}
	w := &writer{b: mustEncode(t, plain)}
	w.str("")
	w.str("")
	if _, err := Decode(w.b); !errors.Is(err, ErrMalformed) {
		t.Errorf("an empty leader encoded: %v", err)
	}
	bad := *plain
	bad.Leader = "s 1"
	if _, err := Encode(&bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("a leader with a space: %v", err)
	}
}
