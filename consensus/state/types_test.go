package state

import (
	"bytes"
	"errors"
	"math"
	"os"
	"reflect"
	"slices"
	"testing"

	"pollux/optimizer/goodput"
)

// typedBid is testBid with parts for two GPU types: the a100 model twice
// as fast as the t4 one, and other batch choices on each.
func typedBid(session, version uint64) Bid {
	b := testBid(session, version)
	fast, slow := b.Params, b.Params
	for _, p := range []*float64{&slow.AlphaC, &slow.BetaC, &slow.AlphaN, &slow.BetaN, &slow.AlphaR, &slow.BetaR} {
		*p *= 2
	}
	tab := func(m int) []BatchChoice {
		out := slices.Clone(b.Single)
		for i := range out {
			out[i].LocalBatch = m
		}
		return out
	}
	b.Types = []TypeBid{
		{GPUType: "a100", Params: fast, MostProfiled: 2, Single: tab(256), Multi: tab(128)},
		{GPUType: "t4", Params: slow, MostProfiled: 1, Single: tab(64), Multi: tab(32)},
	}
	return b
}

// oldRound is the Round that testdata/round-untyped-bid.bin holds: it was
// encoded by the binary before measurements and bids carried GPU types.
func oldRound() *Round {
	return &Round{Generation: 3, Term: 2, Time: 50, Accrue: 5, MaxFailures: 3,
		Jobs: map[string][]Slot{"j1": {{"n1", 2}}},
		Updates: []RoundJob{{ID: "j1", Incarnation: 4, Running: true, HasBid: true, Bid: testBid(7, 2),
			HasMeas: true, Meas: measurement(7, 1, 3, 2, entry(1, 2, 128, 0.1, 0.12, 9), entry(1, 2, 256, 0.2, 0.22, 3))}}}
}

func TestUntypedRoundGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/round-untyped-bid.bin")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(b)
	if err != nil {
		t.Fatalf("the old encoding no longer decodes: %v", err)
	}
	if !reflect.DeepEqual(c, oldRound()) {
		t.Fatalf("decoded %+v, want %+v", c, oldRound())
	}
	// A round without types still encodes as it did.
	again, err := Encode(oldRound())
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("an untyped round encodes to other bytes than before (%d against %d): %v", len(again), len(b), err)
	}
}

func TestTypedRoundRoundTrips(t *testing.T) {
	c := oldRound()
	u := &c.Updates[0]
	u.Bid = typedBid(7, 2)
	u.Meas.GPUType = "t4"
	b, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("decoded %+v, want %+v", got, c)
	}
	// Each typed part alone, too.
	for _, mod := range []func(u *RoundJob){
		func(u *RoundJob) { u.Meas.GPUType = "" },
		func(u *RoundJob) { u.Bid.Types = nil },
		func(u *RoundJob) { u.HasMeas, u.Meas = false, Measurement{} },
	} {
		c := oldRound()
		c.Updates[0].Bid, c.Updates[0].Meas.GPUType = typedBid(7, 2), "t4"
		mod(&c.Updates[0])
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Decode(b); err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("decoded %+v (%v), want %+v", got, err, c)
		}
	}
}

func TestTypedRoundMalformed(t *testing.T) {
	c := oldRound()
	c.Updates[0].Bid, c.Updates[0].Meas.GPUType = typedBid(7, 2), "t4"
	b, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	flagsAt := bytes.Index(b, []byte("j1\x04")) // the update's id, incarnation 4, then its flags
	if flagsAt < 0 || b[flagsAt+3] != 0x3e {
		t.Fatalf("flags not found (%x)", b)
	}
	for name, flags := range map[string]byte{
		"typed measurement without a measurement": 0x1e &^ 0x08,
		"typed bid without a bid":                 0x3a &^ 0x04,
		"unknown flag":                            0x7e,
	} {
		bad := bytes.Clone(b)
		bad[flagsAt+3] = flags
		if _, err := Decode(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, mod := range map[string]func(u *RoundJob){
		"bad type name":             func(u *RoundJob) { u.Meas.GPUType = "t 4" },
		"typed entry":               func(u *RoundJob) { u.Meas.Profile[0].GPUType = "t4" },
		"type without measurement":  func(u *RoundJob) { u.HasMeas, u.Meas = false, Measurement{GPUType: "t4"} },
		"types without a bid":       func(u *RoundJob) { u.HasBid, u.Bid = false, Bid{Types: []TypeBid{{GPUType: "t4"}}} },
		"empty part list":           func(u *RoundJob) { u.Bid.Types = []TypeBid{} },
		"unsorted parts":            func(u *RoundJob) { u.Bid.Types[0], u.Bid.Types[1] = u.Bid.Types[1], u.Bid.Types[0] },
		"duplicate part":            func(u *RoundJob) { u.Bid.Types[1].GPUType = "a100" },
		"untyped part":              func(u *RoundJob) { u.Bid.Types[0].GPUType = "" },
		"parts without a model":     func(u *RoundJob) { u.Bid.HasModel, u.Bid.Params = false, goodput.Params{} },
		"part with a NaN parameter": func(u *RoundJob) { u.Bid.Types[1].Params.Gamma = 0 },
		"part profiled beyond bid":  func(u *RoundJob) { u.Bid.Types[1].MostProfiled = 3 },
		"part table too short":      func(u *RoundJob) { u.Bid.Types[0].Single = u.Bid.Types[0].Single[:2] },
		"part choice with no batch": func(u *RoundJob) { u.Bid.Types[0].Multi[1].LocalBatch = 0 },
	} {
		c := oldRound()
		c.Updates[0].Bid, c.Updates[0].Meas.GPUType = typedBid(7, 2), "t4"
		mod(&c.Updates[0])
		if _, err := Encode(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTypedMeasurementsKeptApart: a job's measurements of the same
// configuration on two GPU types are two profile entries, each merged
// with later measurements of its own type only, and the bid's per-type
// parts answer for their type.
func TestTypedMeasurementsKeptApart(t *testing.T) {
	a := populated(t)
	s := a.state()
	j1 := s.Jobs["j1"]
	inc := j1.Incarnation
	round := func(gen uint64, from, to uint64, typ string, step float64) {
		t.Helper()
		m := measurement(9, from, to, 1, entry(1, 2, 128, step/2, step, 2))
		m.GPUType = typ
		if ds := drops(t, a, 1, &Round{Generation: gen, Term: 1, Time: float64(gen), Jobs: s.Allocation.Jobs,
			Updates: []RoundJob{{ID: "j1", Incarnation: inc, HasMeas: true, Meas: m}}}); len(ds) != 0 {
			t.Fatalf("dropped %v", ds[0].Err)
		}
	}
	round(s.Allocation.Generation+1, 0, 1, "t4", 0.4)
	round(s.Allocation.Generation+2, 1, 2, "a100", 0.1)
	round(s.Allocation.Generation+3, 2, 3, "t4", 0.2)
	j := a.state().Jobs["j1"]
	byType := map[string]ProfileEntry{}
	for _, e := range j.Profile {
		if e.Nodes == 1 && e.Replicas == 2 && e.LocalBatch == 128 {
			byType[e.GPUType] = e
		}
	}
	if e := byType["t4"]; e.Count != 4 || math.Abs(e.StepTime-0.3) > 1e-12 {
		t.Errorf("t4 entry %+v, want the mean of 0.4 and 0.2 over 4 reports", e)
	}
	if e := byType["a100"]; e.Count != 2 || e.StepTime != 0.1 {
		t.Errorf("a100 entry %+v", e)
	}
	if got := j.ProfiledTypes(); !slices.Contains(got, "a100") || !slices.Contains(got, "t4") {
		t.Errorf("profiled types %q", got)
	}
	// The state survives a snapshot with its types.
	back, err := DecodeState(EncodeState(a.state()))
	if err != nil || !reflect.DeepEqual(back.Jobs["j1"].Profile, j.Profile) {
		t.Fatalf("snapshot: %v, profile %+v", err, back.Jobs["j1"].Profile)
	}

	b := typedBid(1, 1)
	if m := b.TypeModel("t4", testSpec().Limits); m == nil || m.Params != b.Types[1].Params {
		t.Errorf("t4 model %+v", m)
	}
	if m := b.TypeModel("v100", testSpec().Limits); m != nil {
		t.Errorf("a model on a type without a part: %+v", m)
	}
	if c, ok := b.ChoiceOn("a100", 2, 3); !ok || c.LocalBatch != 128 {
		t.Errorf("a100 multi-node choice %+v %v", c, ok)
	}
	if c, ok := b.ChoiceOn("v100", 1, 3); !ok || c != b.Single[2] {
		t.Errorf("v100 (no part) choice %+v %v, want the top-level one", c, ok)
	}
}
