package state

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"pollux/optimizer/goodput"
)

// rackEntry is entry measured across racks.
func rackEntry(n, k, m, racks int, accum, step float64, count uint64) ProfileEntry {
	e := entry(n, k, m, accum, step, count)
	e.Racks = racks
	return e
}

// rackBid is typedBid with a fitted cross-rack term on its top-level
// model and on its a100 part.
func rackBid(session, version uint64) Bid {
	b := typedBid(session, version)
	b.Params.AlphaX = 0.25
	for i := range b.Types {
		if b.Types[i].GPUType == "a100" {
			b.Types[i].Params.AlphaX = 0.3
		}
	}
	return b
}

func TestRoundRacksRoundTrip(t *testing.T) {
	cases := []struct {
		name      string
		bid, meas bool
		flagged   bool
	}{
		{"measurement across racks", false, true, true},
		{"bid with a cross-rack term", true, false, true},
		{"both", true, true, true},
		{"neither: encoded as before", false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := oldRound()
			u := &r.Updates[0]
			if c.meas {
				u.Meas.Profile = []ProfileEntry{entry(2, 4, 128, 0.1, 0.2, 3), rackEntry(2, 4, 256, 2, 0.1, 0.5, 2)}
			}
			if c.bid {
				u.Bid = rackBid(7, 2)
			}
			b, err := Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Fatalf("decoded %+v, want %+v", got, r)
			}
			// Without racks the update encodes as the binary before them
			// did: the same bytes with the racks taken out.
			plain := oldRound()
			if c.meas {
				plain.Updates[0].Meas.Profile = []ProfileEntry{entry(2, 4, 128, 0.1, 0.2, 3), entry(2, 4, 256, 0.1, 0.5, 2)}
			}
			if c.bid {
				plain.Updates[0].Bid = typedBid(7, 2)
			}
			pb, err := Encode(plain)
			if err != nil {
				t.Fatal(err)
			}
			if flagged := !bytes.Equal(b, pb); flagged != c.flagged {
				t.Errorf("racks changed the encoding: %v, want %v", flagged, c.flagged)
			}
		})
	}
}

// An update flagged with racks that are all zero is not canonical.
func TestRoundRacksRefusesEmptyRacks(t *testing.T) {
	r := oldRound()
	r.Updates[0].Meas.Profile = []ProfileEntry{rackEntry(2, 4, 256, 2, 0.1, 0.5, 2)}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	// The update is the round's last, its measurement's racks the last
	// byte (varint 2).
	if b[len(b)-1] != 4 {
		t.Fatalf("last byte %#x, want the varint of 2 racks", b[len(b)-1])
	}
	b[len(b)-1] = 0
	if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("racks encoded empty decoded: %v", err)
	}
}

func TestRoundRacksValidation(t *testing.T) {
	bad := func(name string, mut func(u *RoundJob)) {
		t.Helper()
		r := oldRound()
		mut(&r.Updates[0])
		if _, err := Encode(r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: encoded (%v)", name, err)
		}
	}
	bad("an entry of one rack", func(u *RoundJob) { u.Meas.Profile = []ProfileEntry{rackEntry(2, 4, 128, 1, 0.1, 0.2, 1)} })
	bad("more racks than nodes", func(u *RoundJob) { u.Meas.Profile = []ProfileEntry{rackEntry(2, 4, 128, 3, 0.1, 0.2, 1)} })
	bad("a negative cross-rack term", func(u *RoundJob) { u.Bid.Params.AlphaX = -1 })
	bad("an hour-long cross-rack term", func(u *RoundJob) { u.Bid.Params.AlphaX = 7200 })
	bad("a cross-rack term without a model", func(u *RoundJob) {
		u.Bid.HasModel, u.Bid.Params = false, goodput.Params{AlphaX: 0.5}
	})
}

// The same configuration within one rack and across two is two entries.
func TestRacksKeepConfigurationsApart(t *testing.T) {
	a := newApplier()
	a.must(t, 1, &RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive, Addresses: []string{"a"}}},
		&SubmitJob{ID: "j", Spec: testSpec()})
	r := &Round{Generation: 1, Term: 1, Time: 1, Jobs: map[string][]Slot{"j": {{"n1", 1}}},
		Updates: []RoundJob{{ID: "j", Incarnation: 0, HasMeas: true,
			Meas: measurement(1, 0, 1, 0, entry(2, 4, 128, 0.1, 0.2, 3), rackEntry(2, 4, 128, 2, 0.1, 0.6, 1))}}}
	r.Updates[0].Incarnation = a.s.Jobs["j"].Incarnation
	a.must(t, 1, r)
	p := a.s.Jobs["j"].Profile
	if len(p) != 2 || p[0].Racks != 0 || p[1].Racks != 2 || p[1].StepTime != 0.6 {
		t.Fatalf("profile %+v", p)
	}
}

// snapshotV10 is a version 10 snapshot: snapshotV9's state plus a
// measurement of the same configuration within one rack and across two,
// and a bid whose top-level model and a100 part have cross-rack terms.
// It was written by the version 10 encoder and must still decode.
const snapshotV10 = "testdata/snapshot-v10.bin"

func v10State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v9State(t)
	typed := a.s.Jobs["typed"]
	m := measurement(typed.MeasSession, typed.MeasSeq, typed.MeasSeq+1, 2,
		entry(2, 4, 128, 0.1, 0.2, 3), rackEntry(2, 4, 128, 2, 0.1, 0.6, 2))
	m.GPUType = "a100"
	a.must(t, 8, &Round{Generation: a.s.Allocation.Generation + 1, Term: 8, Time: 400, Jobs: a.s.Allocation.Jobs,
		Updates: []RoundJob{{ID: "typed", Incarnation: typed.Incarnation, HasMeas: true, Meas: m,
			HasBid: true, Bid: rackBid(typed.Bid.Session, typed.Bid.Version+1)}}})
	return a.state()
}

func TestSnapshotVersion10Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v10State(t)))
	_, s := decodeFixture(t, snapshotV10, 10)
	j := s.Jobs["typed"]
	across := 0
	for _, e := range j.Profile {
		if e.Racks == 2 {
			across++
		}
	}
	if across != 1 || j.Bid.Params.AlphaX != 0.25 || j.Bid.OnType("a100").Params.AlphaX != 0.3 || j.Bid.OnType("t4").Params.AlphaX != 0 {
		t.Fatalf("decoded profile %+v, bid %+v", j.Profile, j.Bid)
	}
	if s.Jobs["again"] == nil || s.Fed == nil {
		t.Errorf("versions 3 to 9 content lost")
	}
	// The state decoded from the fixture is the state the commands make,
	// but for the events version 12 added.
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 10 fixture decodes to another state than the commands make (%d bytes against %d)", len(again), len(got))
	}
	// Older snapshots decode with every entry within one rack and no
	// cross-rack term.
	_, old := decodeFixture(t, snapshotV9, 9)
	for _, e := range old.Jobs["typed"].Profile {
		if e.Racks != 0 {
			t.Fatalf("version 9 entry %+v across racks", e)
		}
	}
	if old.Jobs["typed"].Bid.Params.AlphaX != 0 {
		t.Fatalf("version 9 bid with a cross-rack term")
	}
}
