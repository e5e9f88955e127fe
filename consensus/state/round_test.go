package state

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"pollux/optimizer/goodput"
)

// testBid is a valid bid for testSpec jobs.
func testBid(session, version uint64) Bid {
	b := Bid{Session: session, Version: version, HasModel: true,
		Params:  goodput.Params{AlphaC: 0.01, BetaC: 0.001, AlphaN: 0.1, BetaN: 0.01, AlphaR: 0.05, BetaR: 0.005, Gamma: 1.5},
		HasGrad: true, Grad: goodput.GradStats{GradSqr: 1, GradVar: 10}, MostProfiled: 2}
	for k := 1; k <= 4; k++ {
		b.Single = append(b.Single, BatchChoice{LocalBatch: 128, AccumSteps: 0, Gain: 1})
		b.Multi = append(b.Multi, BatchChoice{LocalBatch: 64, AccumSteps: 1, Gain: min(1.5, float64(k))})
	}
	return b
}

func measurement(session, from, to uint64, epoch int, es ...ProfileEntry) Measurement {
	return Measurement{Session: session, From: from, To: to, Profile: es, Epoch: epoch, Progress: float64(epoch)}
}

func drops(t *testing.T, a *applier, term uint64, c Command) []Drop {
	t.Helper()
	ds, err := a.applyDrops(term, c)
	if err != nil {
		t.Fatalf("apply %T: %v", c, err)
	}
	return ds
}

func dropped(ds []Drop) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%s%s/%v", d.Job, d.Node, d.Placement))
	}
	return strings.Join(s, ",")
}

func TestRoundAppliesPartially(t *testing.T) {
	a := populated(t)
	// j2 finishes while the round is decided.
	a.must(t, 1, &FinishJob{ID: "j2", Incarnation: 1, State: Completed, Time: 30})
	ds := drops(t, a, 2, &Round{Generation: 2, Term: 2, Time: 100, Accrue: 10,
		Jobs: map[string][]Slot{"j1": {{"n1", 2}, {"n2", 2}}, "j2": {{"n1", 1}}, "j3": {{"n1", 1}}},
		Updates: []RoundJob{
			{ID: "j1", Incarnation: 1, Running: true, HasMeas: true, Meas: measurement(5, 0, 2, 3, entry(2, 4, 64, 0.3, 0.4, 1))},
			{ID: "j2", Incarnation: 1, HasBid: true, Bid: testBid(1, 1)},
			{ID: "j3", Incarnation: 0, HasBid: true, Bid: testBid(1, 1)},
		}})
	if got := dropped(ds); got != "j2/false,j2/true" {
		t.Fatalf("dropped %q, want j2's update and placement", got)
	}
	s := a.state()
	if s.Allocation.Generation != 2 || len(s.Allocation.Jobs) != 2 || s.LastRound != 100 {
		t.Fatalf("allocation %+v, last round %v", s.Allocation, s.LastRound)
	}
	j1 := s.Jobs["j1"]
	// 4 GPUs held under the replaced allocation, 10 s each.
	if j1.Attained != 40+40 || j1.Incarnation != 1 || j1.Epoch != 3 || j1.MeasSession != 5 || j1.MeasSeq != 2 || j1.Profile[1].Count != 4 {
		t.Fatalf("j1 %+v", j1)
	}
	if j3 := s.Jobs["j3"]; j3.State != Running || j3.Incarnation != 1 || j3.Bid.Version != 1 || j3.Attained != 0 {
		t.Fatalf("j3 %+v", j3)
	}
	if j2 := s.Jobs["j2"]; j2.State != Completed || j2.Bid.Version != 0 {
		t.Fatalf("j2 %+v", j2)
	}
}

func TestRoundFencing(t *testing.T) {
	tests := []struct {
		name string
		term uint64
		cmd  *Round
		want error
	}{
		{"stale generation", 2, &Round{Generation: 1, Term: 2}, ErrStaleGeneration},
		{"term of another entry", 3, &Round{Generation: 5, Term: 2}, ErrStaleTerm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := populated(t)
			before := EncodeState(a.state())
			if err := a.apply(t, tt.term, tt.cmd); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if !bytes.Equal(before, EncodeState(a.state())) {
				t.Fatal("a refused round changed the state")
			}
		})
	}
}

func TestRoundMeasurementsMergedOnce(t *testing.T) {
	a := populated(t)
	gen := uint64(1)
	round := func(u RoundJob) []Drop {
		gen++
		return drops(t, a, 1, &Round{Generation: gen, Term: 1, Jobs: map[string][]Slot{"j1": {{"n1", 2}, {"n2", 2}}}, Updates: []RoundJob{u}})
	}
	count := func() uint64 { return a.state().Jobs["j1"].Profile[0].Count }
	m := func(session, from, to uint64) RoundJob {
		return RoundJob{ID: "j1", Incarnation: 1, HasMeas: true, Meas: measurement(session, from, to, 2, entry(1, 1, 32, 0.05, 0.06, 1))}
	}
	steps := []struct {
		name      string
		u         RoundJob
		dropped   bool
		wantCount uint64
	}{
		{"opens session 3", m(3, 0, 2), false, 2},
		{"resent after a leader change", m(3, 0, 2), true, 2},
		{"a gap", m(3, 4, 5), true, 2},
		{"continues", m(3, 2, 4), false, 3},
		{"a newer session from its start", m(7, 0, 1), false, 4},
		{"the replaced actor", m(3, 4, 6), true, 4},
		{"a newer session mid-way", m(9, 3, 4), true, 4},
	}
	for _, st := range steps {
		ds := round(st.u)
		if (len(ds) > 0) != st.dropped || count() != st.wantCount {
			t.Fatalf("%s: dropped %v, count %d (want dropped %v, count %d)", st.name, ds, count(), st.dropped, st.wantCount)
		}
		if st.dropped && !errors.Is(ds[0].Err, ErrStaleSession) {
			t.Fatalf("%s: dropped for %v", st.name, ds[0].Err)
		}
	}
	if j := a.state().Jobs["j1"]; j.MeasSession != 7 || j.MeasSeq != 1 {
		t.Fatalf("acknowledged %d/%d", j.MeasSession, j.MeasSeq)
	}
}

func TestRoundBids(t *testing.T) {
	a := populated(t)
	gen := uint64(1)
	round := func(b Bid) []Drop {
		gen++
		return drops(t, a, 1, &Round{Generation: gen, Term: 1, Jobs: map[string][]Slot{"j1": {{"n1", 2}, {"n2", 2}}},
			Updates: []RoundJob{{ID: "j1", Incarnation: 1, HasBid: true, Bid: b}}})
	}
	if ds := round(testBid(2, 1)); len(ds) != 0 {
		t.Fatal(ds)
	}
	if ds := round(testBid(2, 1)); len(ds) != 1 || !errors.Is(ds[0].Err, ErrStaleSession) {
		t.Fatalf("same version again: %v", ds)
	}
	big := testBid(2, 2)
	big.Single[3].LocalBatch = 4096 // above max_local 512
	if ds := round(big); len(ds) != 1 || !errors.Is(ds[0].Err, ErrInvalid) {
		t.Fatalf("a bid beyond the job's limits: %v", ds)
	}
	if ds := round(testBid(2, 3)); len(ds) != 0 {
		t.Fatal(ds)
	}
	j := a.state().Jobs["j1"]
	if j.Bid.Version != 3 || j.Bid.Model(j.Spec.Limits) == nil {
		t.Fatalf("bid %+v", j.Bid)
	}
	if c, ok := j.Bid.Choice(2, 4); !ok || c.LocalBatch != 64 || c.AccumSteps != 1 {
		t.Fatalf("choice %+v %v", c, ok)
	}
	if _, ok := j.Bid.Choice(1, 5); ok {
		t.Fatal("a choice beyond the table")
	}
}

func TestRoundRestartsAndFailsCrashLoops(t *testing.T) {
	a := populated(t)
	place := map[string][]Slot{"j1": {{"n1", 2}, {"n2", 2}}, "j2": {{"n1", 1}}}
	for i := 1; i <= 3; i++ {
		inc := a.state().Jobs["j2"].Incarnation
		if ds := drops(t, a, 1, &Round{Generation: uint64(1 + i), Term: 1, MaxFailures: 3, Jobs: place,
			Updates: []RoundJob{{ID: "j2", Incarnation: inc, Restart: true}}}); len(ds) != 0 && i < 3 {
			t.Fatal(ds)
		}
		j := a.state().Jobs["j2"]
		if i < 3 && (j.Incarnation != inc+1 || j.State != Rescaling || j.Crashes != i || j.Restarts != 0) {
			t.Fatalf("restart %d: %+v", i, j)
		}
		if i == 3 && (j.State != Failed || !strings.Contains(j.Reason, "3 incarnations")) {
			t.Fatalf("third failure: %+v", j)
		}
	}
	// The failed job's placement was dropped from the same round.
	if s := a.state(); len(s.Allocation.Jobs["j2"]) != 0 {
		t.Fatalf("failed job still placed: %+v", s.Allocation)
	}
	// A stale restart changes nothing.
	b := populated(t)
	if ds := drops(t, b, 1, &Round{Generation: 2, Term: 1, Jobs: place, Updates: []RoundJob{{ID: "j2", Incarnation: 0, Restart: true}}}); len(ds) != 1 || !errors.Is(ds[0].Err, ErrStaleIncarnation) {
		t.Fatalf("stale restart: %v", ds)
	}
	if j := b.state().Jobs["j2"]; j.Incarnation != 1 || j.Crashes != 0 {
		t.Fatalf("after a stale restart: %+v", j)
	}
}

func TestRoundCrashCountResetsAfterAnEpoch(t *testing.T) {
	a := populated(t)
	place := map[string][]Slot{"j1": {{"n1", 2}, {"n2", 2}}}
	gen := uint64(1)
	restart := func(extra ...RoundJob) {
		gen++
		inc := a.state().Jobs["j1"].Incarnation
		u := RoundJob{ID: "j1", Incarnation: inc, Restart: true}
		if len(extra) > 0 {
			u = extra[0]
			u.Incarnation, u.Restart = inc, true
		}
		drops(t, a, 1, &Round{Generation: gen, Term: 1, MaxFailures: 3, Jobs: place, Updates: []RoundJob{u}})
	}
	restart()
	restart()
	restart(RoundJob{ID: "j1", HasMeas: true, Meas: measurement(4, 0, 1, 5)})
	if j := a.state().Jobs["j1"]; j.State.Terminal() || j.Crashes != 1 {
		t.Fatalf("after an epoch: %+v", j)
	}
}

func TestFinishJob(t *testing.T) {
	a := populated(t)
	a.must(t, 1, &FinishJob{ID: "j1", State: Cancelled, Reason: "cancelled by a user", Time: 5})
	s := a.state()
	if j := s.Jobs["j1"]; j.State != Cancelled || !j.State.Terminal() || j.Reason == "" || len(s.Allocation.Jobs["j1"]) > 0 {
		t.Fatalf("cancelled: %+v", j)
	}
	for _, tt := range []struct {
		c    *FinishJob
		want error
	}{
		{&FinishJob{ID: "j1", State: Cancelled}, ErrJobFinished},
		{&FinishJob{ID: "nope", State: Cancelled}, ErrUnknownJob},
		{&FinishJob{ID: "j2", Incarnation: 7, State: Completed}, ErrStaleIncarnation},
	} {
		if err := a.apply(t, 1, tt.c); !errors.Is(err, tt.want) {
			t.Errorf("%+v: %v, want %v", tt.c, err, tt.want)
		}
	}
	if _, err := Encode(&FinishJob{ID: "j1", State: Running}); !errors.Is(err, ErrInvalid) {
		t.Errorf("finishing as running: %v", err)
	}
}

// TestFinishJobKeepsTheLastMeasurement: a completion carrying the job's
// last measurement merges it when it continues the acknowledged sequence
// (the finished job shows its last epoch), and finishes the job all the
// same, without it, when it does not.
func TestFinishJobKeepsTheLastMeasurement(t *testing.T) {
	last := measurement(5, 0, 2, 9, entry(2, 4, 64, 0.3, 0.4, 1))
	last.Progress, last.GPUType = 0.9, "t4"
	gap := measurement(5, 3, 4, 9)
	for _, tt := range []struct {
		name                string
		meas                *Measurement
		epoch, seq, entries int
		progress            float64
	}{
		{"continues", &last, 9, 2, 3, 0.9},
		{"a gap", &gap, 2, 0, 2, 0.25},
		{"none", nil, 2, 0, 2, 0.25},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := populated(t)
			a.must(t, 1, &FinishJob{ID: "j1", Incarnation: 1, State: Completed, Time: 50, Meas: tt.meas})
			j := a.state().Jobs["j1"]
			if j.State != Completed || j.FinishTime != 50 {
				t.Fatalf("not completed: %+v", j)
			}
			if j.Epoch != tt.epoch || j.Progress != tt.progress || int(j.MeasSeq) != tt.seq || len(j.Profile) != tt.entries {
				t.Fatalf("epoch %d progress %v seq %d, %d profile entries; want %d %v %d %d",
					j.Epoch, j.Progress, j.MeasSeq, len(j.Profile), tt.epoch, tt.progress, tt.seq, tt.entries)
			}
		})
	}
	bad := measurement(5, 2, 2, 1)
	if _, err := Encode(&FinishJob{ID: "j1", State: Completed, Meas: &bad}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an empty measurement: %v", err)
	}
}

func TestInitClusterAndCheckpointRoot(t *testing.T) {
	a := newApplier()
	spec := testSpec()
	spec.CheckpointDir = ""
	if err := a.apply(t, 1, &SubmitJob{ID: "early", Spec: spec}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "checkpoint root") {
		t.Fatalf("a job with nowhere to checkpoint: %v", err)
	}
	a.must(t, 1, &InitCluster{ID: "c-1", CheckpointRoot: "/shared/ckpt"})
	a.must(t, 1, &InitCluster{ID: "c-2", CheckpointRoot: "/shared/ckpt"})
	if err := a.apply(t, 1, &InitCluster{ID: "c-3", CheckpointRoot: "/elsewhere"}); !errors.Is(err, ErrClusterConfig) {
		t.Fatalf("another root: %v", err)
	}
	a.must(t, 1, &SubmitJob{ID: "j", Spec: spec})
	s := a.state()
	if s.Config.ID != "c-1" || s.CheckpointDir(s.Jobs["j"]) != "/shared/ckpt/j" {
		t.Fatalf("config %+v, dir %q", s.Config, s.CheckpointDir(s.Jobs["j"]))
	}
	spec.CheckpointDir = "/mine"
	a.must(t, 1, &SubmitJob{ID: "k", Spec: spec})
	if d := a.state().CheckpointDir(a.state().Jobs["k"]); d != "/mine" {
		t.Fatalf("own dir %q", d)
	}
}

func TestPrune(t *testing.T) {
	a := populated(t)
	a.must(t, 1, &FinishJob{ID: "j2", State: Failed, Time: 3}, &MarkNode{ID: "n2", Health: Dead})
	ds := drops(t, a, 1, &Prune{Jobs: []string{"j1", "j2", "zz"}, Nodes: []string{"n1", "n2"}})
	if got := dropped(ds); got != "j1/false,zz/false,n1/false,n2/false" {
		t.Fatalf("dropped %q", got)
	}
	// n2 still holds j1's GPUs; once the allocation moves off it, it goes.
	a.must(t, 1, &Round{Generation: 2, Term: 1, Jobs: map[string][]Slot{"j1": {{"n1", 2}}}})
	if ds := drops(t, a, 1, &Prune{Nodes: []string{"n2"}}); len(ds) != 0 {
		t.Fatal(ds)
	}
	s := a.state()
	if _, ok := s.Jobs["j2"]; ok || s.Nodes["n2"] != nil || s.Jobs["j1"] == nil {
		t.Fatalf("after pruning: jobs %v, nodes %v", s.JobIDs(), s.NodeIDs())
	}
	if _, err := Encode(&Prune{Jobs: []string{"b", "a"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unsorted prune: %v", err)
	}
}

// TestJobLimitKeepsSnapshotsRestorable fills the state to MaxJobs: the
// next submission is refused, and the full state's snapshot restores.
func TestJobLimitKeepsSnapshotsRestorable(t *testing.T) {
	if testing.Short() {
		t.Skip("submits 65,536 jobs")
	}
	a := newApplier()
	spec := testSpec()
	for i := range MaxJobs {
		a.must(t, 1, &SubmitJob{ID: fmt.Sprintf("job-%05d", i), Spec: spec})
	}
	err := a.apply(t, 1, &SubmitJob{ID: "job-65537", Spec: spec})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "--retain") {
		t.Fatalf("job 65,537: %v", err)
	}
	s, err := DecodeState(EncodeState(a.state()))
	if err != nil || len(s.Jobs) != MaxJobs {
		t.Fatalf("restoring the full state: %v", err)
	}
	// Pruning a finished job makes room again.
	a.must(t, 1, &FinishJob{ID: "job-00000", State: Cancelled}, &Prune{Jobs: []string{"job-00000"}}, &SubmitJob{ID: "job-65537", Spec: spec})
}

func TestSnapshotVersion1Decodes(t *testing.T) {
	// Written by the binary before snapshot version 2: one node, j1
	// running with a profile, j2 completed.
	b, err := os.ReadFile("testdata/snapshot-v1.bin")
	if err != nil {
		t.Fatal(err)
	}
	if b[4] != 1 {
		t.Fatalf("fixture is version %d", b[4])
	}
	s, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	j1 := s.Jobs["j1"]
	if s.Config.ID != "" || j1.State != Running || len(j1.Profile) != 1 || j1.Bid.Version != 0 || s.Jobs["j2"].State != Completed || s.Allocation.Generation != 1 {
		t.Fatalf("decoded %+v / %+v", s, j1)
	}
	// It is re-encoded in the current version.
	again, err := DecodeState(EncodeState(s))
	if err != nil || again.Jobs["j1"].Profile[0] != j1.Profile[0] {
		t.Fatalf("re-encoded: %v", err)
	}
}

func TestBidValidate(t *testing.T) {
	nan := testBid(1, 1)
	nan.Params.AlphaC = math.NaN()
	neg := testBid(1, 1)
	neg.Grad.GradVar = -1
	absurd := testBid(1, 1)
	absurd.Params.BetaC = 1e9
	gain := testBid(1, 1)
	gain.Single[0].Gain = 1e6
	empty := testBid(1, 1)
	empty.Single = nil
	negDelay, longDelay := testBid(1, 1), testBid(1, 1)
	negDelay.RestartDelay, longDelay.RestartDelay = -1, 1e5
	for name, b := range map[string]Bid{"NaN": nan, "negative": neg, "absurd": absurd, "gain": gain, "no table": empty, "version 0": testBid(1, 0),
		"negative restart delay": negDelay, "restart delay of a day": longDelay} {
		if err := b.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	good := testBid(1, 1)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestRoundBidRestartDelay: a bid's restart delay is encoded last and
// only when set (a bid without one encodes as before), round-trips, and
// an encoded zero is malformed.
func TestRoundBidRestartDelay(t *testing.T) {
	plain := &Round{Generation: 2, Term: 1, Time: 20, Jobs: map[string][]Slot{"j": {{"n1", 2}}},
		Updates: []RoundJob{{ID: "j", Incarnation: 1, HasBid: true, Bid: testBid(3, 1)}}}
	timed := *plain
	timed.Updates = []RoundJob{plain.Updates[0]}
	timed.Updates[0].Bid.RestartDelay = 6.25
	pb, tb := mustEncode(t, plain), mustEncode(t, &timed)
	if len(tb) != len(pb)+8 {
		t.Fatalf("the restart delay takes %d bytes, want 8", len(tb)-len(pb))
	}
	c, err := Decode(tb)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.(*Round).Updates[0].Bid.RestartDelay; d != 6.25 {
		t.Fatalf("decoded restart delay %v", d)
	}
	c, err = Decode(pb)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.(*Round).Updates[0].Bid.RestartDelay; d != 0 {
		t.Fatalf("a bid without a restart delay decodes with %v", d)
	}
	zero := slices.Clone(tb)
	for i := len(zero) - 8; i < len(zero); i++ {
		zero[i] = 0
	}
	if _, err := Decode(zero); err == nil {
		t.Fatal("an encoded zero restart delay decodes")
	}
}
