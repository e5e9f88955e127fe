package allocator

import (
	"errors"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

// slowed is p with every time parameter multiplied by f: the same job on
// a GPU f times slower.
func slowed(p goodput.Params, f float64) goodput.Params {
	for _, v := range []*float64{&p.AlphaC, &p.BetaC, &p.AlphaN, &p.BetaN, &p.AlphaR, &p.BetaR} {
		*v *= f
	}
	return p
}

// typedPart is a bid part on GPU type t with parameters p and tables of k
// shapes whose local batch is m.
func typedPart(t string, p goodput.Params, k, m int) state.TypeBid {
	tb := state.TypeBid{GPUType: t, Params: p, MostProfiled: 1}
	for i := 1; i <= k; i++ {
		tb.Single = append(tb.Single, state.BatchChoice{LocalBatch: m, Gain: 1})
		tb.Multi = append(tb.Multi, state.BatchChoice{LocalBatch: m, Gain: 1})
	}
	return tb
}

func TestTypeModelsFromBids(t *testing.T) {
	tests := []struct {
		name string
		// parts of job a's and job b's bids
		a, b []state.TypeBid
		// want: the types job a has a model on, the t4 model's one-GPU
		// throughput over the a100 one's (0: not checked), and the
		// speeds the round gives (nil: none)
		models []string
		ratio  float64
		speeds map[string]float64
		// untyped: n2 has no GPU type; topT4: job a's top-level model is
		// its t4 part's
		untyped, topT4 bool
	}{
		{name: "untyped bids", models: []string{"a100", "t4"}, ratio: 1},
		{name: "each type its own model",
			a:      []state.TypeBid{typedPart("a100", params, 8, 64), typedPart("t4", slowed(params, 3), 8, 32)},
			models: []string{"a100", "t4"}, ratio: 1.0 / 3, speeds: map[string]float64{"a100": 1, "t4": 1.0 / 3}},
		{name: "unseen type left to the projection, speeds from another job",
			a:      []state.TypeBid{typedPart("t4", slowed(params, 2), 8, 32)},
			b:      []state.TypeBid{typedPart("a100", params, 2, 64), typedPart("t4", slowed(params, 4), 2, 32)},
			models: []string{"t4"}, speeds: map[string]float64{"t4": 1, "a100": 4}},
		{name: "untyped nodes beside typed ones: the untyped model is the top-level one", untyped: true,
			a:      []state.TypeBid{typedPart("t4", slowed(params, 2), 8, 32)},
			models: []string{"", "t4"}},
		{name: "untyped nodes, the top-level model a type's: no untyped model", untyped: true, topT4: true,
			a:      []state.TypeBid{typedPart("t4", slowed(params, 2), 8, 32)},
			models: []string{"t4"}},
		{name: "only a type no node has: projected alike",
			a:      []state.TypeBid{typedPart("v100", params, 8, 64)},
			models: []string{"a100", "t4"}, ratio: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := typedState()
			st.Allocation.Jobs["a"] = []state.Slot{{Node: "n1", GPUs: 2}} // on the t4 node
			st.Jobs["a"].Bid.Types = tc.a
			if tc.untyped {
				st.Nodes["n2"].GPUType = ""
			}
			if tc.topT4 {
				st.Jobs["a"].Bid.Params = tc.a[0].Params
			}
			st.Jobs["b"].Bid.Types = tc.b
			if tc.b != nil {
				st.Jobs["b"].Bid.HasModel, st.Jobs["b"].Bid.MostProfiled = true, 1
			}
			for _, id := range []string{"a", "b"} {
				if b := st.Jobs[id].Bid; b.HasModel {
					if err := b.Validate(); err != nil {
						t.Fatalf("test bid of %s: %v", id, err)
					}
				}
			}
			snap, err := BuildSnapshot(st, nil, 200, 10, 42)
			if err != nil {
				t.Fatal(err)
			}
			a := snap.Jobs[0]
			var got []string
			for typ := range a.TypeModels {
				got = append(got, typ)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.models) {
				t.Fatalf("job a has models on %q, want %q", got, tc.models)
			}
			if tc.ratio > 0 {
				r := oneGPU(a.TypeModels["t4"].Params, limits) / oneGPU(a.TypeModels["a100"].Params, limits)
				if math.Abs(r/tc.ratio-1) > 1e-9 {
					t.Errorf("t4 over a100 throughput %v, want %v", r, tc.ratio)
				}
			}
			if len(a.TypeThroughput) != len(tc.speeds) {
				t.Fatalf("speeds %v, want %v", a.TypeThroughput, tc.speeds)
			}
			for typ, v := range tc.speeds {
				if math.Abs(a.TypeThroughput[typ]/v-1) > 1e-9 {
					t.Errorf("speed of %s %v, want %v", typ, a.TypeThroughput[typ], v)
				}
			}
			// The workers run the batch configuration of the type they
			// are placed on.
			as, uncovered := Assignments(st, AssignOptions{Term: 2})
			if len(uncovered) != 0 || len(as["n1"].Runs) != 1 {
				t.Fatalf("assignments %v, uncovered %v", as, uncovered)
			}
			want, _ := st.Jobs["a"].Bid.Choice(1, 2)
			if tb := st.Jobs["a"].Bid.OnType("t4"); tb != nil {
				want = tb.Single[1]
			}
			if r := as["n1"].Runs[0]; int(r.AtomicBatch) != want.LocalBatch {
				t.Errorf("job a on t4 runs local batch %d, want %d", r.AtomicBatch, want.LocalBatch)
			}
		})
	}
}

// FuzzBidOf: a bid message from another process, whatever its bytes,
// converts to a valid bid or is refused, never panics; a typed bid's
// parts survive the conversion.
func FuzzBidOf(f *testing.F) {
	p := params.Slice()
	tab := []*pb.BatchChoice{{LocalBsz: 64, Gain: 1}, {LocalBsz: 64, Gain: 1.5}}
	for _, m := range []*pb.Bid{
		{Job: "j", Session: 1, Version: 1, HasModel: true, Params: p[:], MostProfiled: 2, Single: tab, Multi: tab},
		{Job: "j", Session: 1, Version: 2, HasModel: true, Params: p[:], MostProfiled: 2, Single: tab, Multi: tab,
			Types: []*pb.TypeBid{{GpuType: "a100", Params: p[:], MostProfiled: 2, Single: tab, Multi: tab},
				{GpuType: "t4", Params: p[:], MostProfiled: 1, Single: tab, Multi: tab}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &pb.Bid{}
		if proto.Unmarshal(data, m) != nil {
			return
		}
		b, err := bidOf(m)
		if err != nil {
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("bidOf accepted an invalid bid: %v", err)
		}
		if len(b.Types) != len(m.Types) {
			t.Fatalf("%d parts, the message has %d", len(b.Types), len(m.Types))
		}
		for i, tb := range b.Types {
			if tb.GPUType != m.Types[i].GpuType || len(tb.Single) != len(m.Types[i].Single) {
				t.Fatalf("part %d: %+v from %v", i, tb, m.Types[i])
			}
		}
	})
}

// TestMeasurementTaggedWithThePlacementsType: the leader records a job's
// measurements under the GPU type of its placement; one an actor tagged
// with another type is consumed without its data, and one an actor made
// before measurements carried a type is the placement's.
func TestMeasurementTaggedWithThePlacementsType(t *testing.T) {
	j := &state.Job{ID: "j", Incarnation: 4, MeasSession: 7, MeasSeq: 2}
	point := func(step float64) []*pb.ProfilePoint {
		return []*pb.ProfilePoint{{Nodes: 1, Replicas: 2, LocalBsz: 64, AccumTime: step, StepTime: step, Count: 2}}
	}
	bs := &bidState{session: 7, msg: &pb.Bid{Unacked: []*pb.Measurement{
		{Seq: 3, Incarnation: 4, GpuType: "t4", Profile: point(0.5)},
		{Seq: 4, Incarnation: 4, GpuType: "a100", Profile: point(0.1)}, // not where the state placed it
		{Seq: 5, Incarnation: 4, Profile: point(0.3)},                  // an actor from before types
	}}}
	m, running := measurement(j, bs, "t4")
	if m == nil || !running || m.From != 2 || m.To != 5 || m.GPUType != "t4" || len(m.Profile) != 1 {
		t.Fatalf("measurement %+v, running %v", m, running)
	}
	if e := m.Profile[0]; e.Count != 4 || math.Abs(e.StepTime-0.4) > 1e-12 {
		t.Errorf("merged entry %+v, want the mean of the t4 and untagged reports (0.4 over 4)", e)
	}
}

// TestMeasurementCarriesTheLatestCheckpoint: the round's measurement of
// a job carries the latest checkpoint of the measurements it sums, of
// the job's current incarnation only, and none when they name none; a
// measurement whose checkpoint numbers are out of range is refused.
func TestMeasurementCarriesTheLatestCheckpoint(t *testing.T) {
	j := &state.Job{ID: "j", Incarnation: 4, MeasSession: 7, MeasSeq: 2}
	tests := []struct {
		name string
		ms   []*pb.Measurement
		want state.Checkpoint
	}{
		{"none", []*pb.Measurement{{Seq: 3, Incarnation: 4, Epoch: 1}}, state.Checkpoint{}},
		{"the latest", []*pb.Measurement{
			{Seq: 3, Incarnation: 4, CheckpointEpoch: 5, CheckpointProgress: 50, CheckpointAt: 100},
			{Seq: 4, Incarnation: 4},
			{Seq: 5, Incarnation: 4, CheckpointEpoch: 6, CheckpointProgress: 60, CheckpointAt: 160},
		}, state.Checkpoint{Incarnation: 4, Epoch: 6, Progress: 60, Time: 160}},
		{"an old incarnation's", []*pb.Measurement{
			{Seq: 3, Incarnation: 4, CheckpointEpoch: 5, CheckpointProgress: 50, CheckpointAt: 100},
			{Seq: 4, Incarnation: 3, CheckpointEpoch: 6, CheckpointProgress: 60, CheckpointAt: 160},
		}, state.Checkpoint{Incarnation: 4, Epoch: 5, Progress: 50, Time: 100}},
	}
	for _, tc := range tests {
		if err := checkMeasurements(tc.ms); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		m, _ := measurement(j, &bidState{session: 7, msg: &pb.Bid{Unacked: tc.ms}}, "")
		if m == nil || m.Checkpoint != tc.want {
			t.Errorf("%s: measurement %+v, want checkpoint %+v", tc.name, m, tc.want)
		}
	}
	for _, bad := range []*pb.Measurement{
		{Seq: 1, CheckpointAt: math.NaN()},
		{Seq: 1, CheckpointAt: 1, CheckpointProgress: -1},
		{Seq: 1, CheckpointEpoch: 3},
	} {
		if err := checkMeasurements([]*pb.Measurement{bad}); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("measurement %v: %v", bad, err)
		}
	}
}
