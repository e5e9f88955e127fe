package state

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"pollux/cluster/federation"
	"pollux/optimizer"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/snapshot-v15.bin from the current encoder")

// snapshotV3 is a version 3 snapshot holding everything version 3 added:
// the token table and job submitters (API tokens), the topology levels,
// node attributes and job placement constraints (node attributes), the
// cluster's report key (report tokens).
// It was written by the version 3 encoder and must still decode.
const snapshotV3 = "testdata/snapshot-v3.bin"

// v3ReportKey is the report key snapshotV3 holds.
var v3ReportKey = strings.Repeat("0123456789abcdef", ReportKeyLen/16)

// v3State is the state snapshotV3 holds.
func v3State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	typed := testSpec()
	typed.Name, typed.CheckpointDir = "typed", "/ckpt/typed"
	typed.Topology, typed.GPUType = optimizer.TopologyConstraint{Required: "zone"}, "a100"
	a.must(t, 1,
		&InitCluster{ID: "c1", CheckpointRoot: "/ckpt", Levels: []string{"rack", "zone"}, ReportKey: v3ReportKey},
		&BootstrapACL{Token: token("acc-admin", "bootstrap", RoleAdmin, "s-admin", 1)},
		&CreateToken{Token: token("acc-alice", "alice", RoleSubmit, "s-alice", 2), By: "acc-admin"},
		&CreateToken{Token: token("acc-bob", "bob", RoleSubmit, "s-bob", 3), By: "acc-admin"},
		&RevokeToken{Accessor: "acc-bob", By: "acc-admin", Time: 4},
		&RegisterNode{Node: Node{ID: "n1", Addresses: []string{"127.0.0.1:7000"}, GPUs: 4, Health: Alive,
			Rack: "r1", Topology: []string{"r1", "z1"}, GPUType: "a100"}},
		&RegisterNode{Node: Node{ID: "n2", Addresses: []string{"127.0.0.1:7001"}, GPUs: 4, Health: Alive,
			Rack: "r2", Topology: []string{"r2", "z1"}, GPUType: "t4"}},
		&RegisterNode{Node: Node{ID: "n3", Addresses: []string{"127.0.0.1:7002"}, GPUs: 2, Health: Suspect}},
		&SubmitJob{ID: "typed", Spec: typed, SubmitTime: 5, Submitter: "acc-alice"},
		&SubmitJob{ID: "plain", Spec: testSpec(), SubmitTime: 6},
		&CancelJob{ID: "plain", By: "acc-admin", Reason: "user", Time: 7},
		&Round{Generation: 1, Term: 1, Time: 8, Jobs: map[string][]Slot{"typed": {{"n1", 2}}},
			Updates: []RoundJob{{ID: "typed", Incarnation: 1, Running: true}}},
	)
	return a.state()
}

func TestSnapshotVersion3Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v3State(t)))
	_, s := decodeFixture(t, snapshotV3, 3)
	// Read back by an observer of the state, not by comparing encodings
	// only: both features' fields are there.
	typed, plain := s.Jobs["typed"], s.Jobs["plain"]
	n1, n3 := s.Nodes["n1"], s.Nodes["n3"]
	if !slices.Equal(s.Config.Levels, []string{"rack", "zone"}) || s.Config.ReportKey != v3ReportKey || !slices.Equal(n1.Topology, []string{"r1", "z1"}) || n1.GPUType != "a100" ||
		n3.Topology != nil || n3.GPUType != "" || typed.Spec.Topology.Required != "zone" || typed.Spec.GPUType != "a100" ||
		typed.Submitter != "acc-alice" || typed.SubmitterName != "alice" || plain.Submitter != "" || plain.State != Cancelled {
		t.Fatalf("decoded config %+v, n1 %+v, n3 %+v, typed %+v, plain %+v", s.Config, n1, n3, typed, plain)
	}
	if tok, err := s.ACL.Authenticate("s-alice"); err != nil || tok.Name != "alice" {
		t.Errorf("alice's token: %+v, %v", tok, err)
	}
	if _, err := s.ACL.Authenticate("s-bob"); err == nil {
		t.Error("bob's revoked token authenticates")
	}
	if !s.ACL.Bootstrapped() || s.ACL.Len() != 3 {
		t.Errorf("token table: bootstrapped %v, %d tokens", s.ACL.Bootstrapped(), s.ACL.Len())
	}
	// The state decoded from the fixture is the state the commands make:
	// the current encoder writes the same bytes for both.
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 3 fixture decodes to another state than the commands make (%d bytes against %d)", len(again), len(got))
	}
}

// snapshotV4 is a version 4 snapshot: snapshotV3's state plus the
// autoscaler's (a machine booting, one up, one draining, one removed).
// It was written by the version 4 encoder and must still decode.
const snapshotV4 = "testdata/snapshot-v4.bin"

func v4State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v3State(t)
	a.must(t, 2,
		&ScaleDecision{Term: 2, Time: 10, Desired: 6, Add: []string{"auto-1", "auto-2", "auto-3", "auto-4"}},
		&RegisterNode{Node: Node{ID: "auto-1", Addresses: []string{"127.0.0.1:7101"}, GPUs: 4, Health: Alive}},
		&RegisterNode{Node: Node{ID: "auto-2", Addresses: []string{"127.0.0.1:7102"}, GPUs: 4, Health: Alive}},
		&ScaleUpdate{Term: 2, Time: 11, Name: "auto-1", Outcome: ScaleJoined},
		&ScaleUpdate{Term: 2, Time: 11.5, Name: "auto-2", Outcome: ScaleJoined},
		&ScaleUpdate{Term: 2, Time: 12, Name: "auto-4", Outcome: ScaleRemoved, Reason: "never joined"},
	)
	a.must(t, 3, &ScaleDecision{Term: 3, Time: 13, Desired: 5, Drain: []string{"auto-2"}})
	return a.state()
}

// decodeFixture reads a snapshot fixture of the given version.
func decodeFixture(t *testing.T, path string, version byte) ([]byte, *State) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b[len(snapshotMagic)] != version {
		t.Fatalf("fixture is version %d", b[len(snapshotMagic)])
	}
	s, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

// checkScale compares the autoscaler state v4State makes (desired 5,
// four machines asked for, three managed) with its decoding.
func checkScale(t *testing.T, sc Scale, billed float64, want map[string]ScaleNode) {
	t.Helper()
	if sc.Desired != 5 || sc.Seq != 4 || len(sc.Nodes) != len(want) || sc.Billed != billed {
		t.Fatalf("decoded autoscaler state %+v", sc)
	}
	for name, w := range want {
		if g := sc.Nodes[name]; g == nil || *g != w {
			t.Errorf("%s: %+v, want %+v", name, g, w)
		}
	}
}

func TestSnapshotVersion4Golden(t *testing.T) {
	_, s := decodeFixture(t, snapshotV4, 4)
	// Version 4 kept no request times: each is its phase's start, and
	// nothing is billed.
	checkScale(t, s.Scale, 0, map[string]ScaleNode{
		"auto-1": {Name: "auto-1", Phase: ScaleUp, Term: 2, Since: 11, Asked: 11},
		"auto-2": {Name: "auto-2", Phase: ScaleDraining, Term: 3, Since: 13, Asked: 13},
		"auto-3": {Name: "auto-3", Phase: ScaleBooting, Term: 2, Since: 10, Asked: 10},
	})
	if s.Config.ReportKey != v3ReportKey || s.Jobs["typed"].Submitter != "acc-alice" || s.Nodes["auto-1"] == nil {
		t.Errorf("version 3 content lost: %+v", s.Config)
	}
}

// snapshotV5 is a version 5 snapshot: snapshotV4's state, with the
// machines' request times and the seconds billed for the removed one.
// It was written by the version 5 encoder and must still decode.
const snapshotV5 = "testdata/snapshot-v5.bin"

func TestSnapshotVersion5Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v4State(t)))
	_, s := decodeFixture(t, snapshotV5, 5)
	sc := s.Scale
	// auto-4 was asked for at 10 and removed at 12: 2 s billed.
	checkScale(t, sc, 2, map[string]ScaleNode{
		"auto-1": {Name: "auto-1", Phase: ScaleUp, Term: 2, Since: 11, Asked: 10},
		"auto-2": {Name: "auto-2", Phase: ScaleDraining, Term: 3, Since: 13, Asked: 10},
		"auto-3": {Name: "auto-3", Phase: ScaleBooting, Term: 2, Since: 10, Asked: 10},
	})
	// At 20: auto-4's 2 s and 10 s for each of the three others.
	if got := sc.NodeSeconds(20); got != 32 {
		t.Errorf("node-seconds at 20: %v, want 32", got)
	}
	// The state decoded from the fixture is the state the commands make.
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 5 fixture decodes to another state than the commands make (%d bytes against %d)", len(again), len(got))
	}
}

// snapshotV6 is a version 6 snapshot: snapshotV4's state plus a job
// measured on two GPU types and on untyped nodes, bidding per type. It
// was written by the version 6 encoder and must still decode.
const snapshotV6 = "testdata/snapshot-v6.bin"

func v6State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v4State(t)
	typed := a.s.Jobs["typed"]
	gen := a.s.Allocation.Generation
	place := a.s.Allocation.Jobs
	meas := func(from, to uint64, typ string, step float64) Measurement {
		m := measurement(1<<32|1, from, to, 1, entry(1, 2, 128, step/2, step, 3), entry(1, 2, 256, step, 1.5*step, 1))
		m.GPUType = typ
		return m
	}
	a.must(t, 4,
		// An untyped measurement (as a leader before types made it), then
		// one on a100 with a bid per type.
		&Round{Generation: gen + 1, Term: 4, Time: 20, Jobs: place,
			Updates: []RoundJob{{ID: "typed", Incarnation: typed.Incarnation, HasMeas: true, Meas: meas(0, 1, "", 0.3)}}},
		&Round{Generation: gen + 2, Term: 4, Time: 21, Jobs: place,
			Updates: []RoundJob{{ID: "typed", Incarnation: typed.Incarnation, HasMeas: true, Meas: meas(1, 2, "a100", 0.1),
				HasBid: true, Bid: typedBid(1<<32|1, 1)}}},
	)
	return a.state()
}

func TestSnapshotVersion6Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v6State(t)))
	b, err := os.ReadFile(snapshotV6)
	if err != nil {
		t.Fatal(err)
	}
	if b[len(snapshotMagic)] != 6 {
		t.Fatalf("fixture is version %d", b[len(snapshotMagic)])
	}
	s, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	j := s.Jobs["typed"]
	if types := j.ProfiledTypes(); !slices.Equal(types, []string{"", "a100"}) || len(j.Profile) != 4 {
		t.Fatalf("decoded profile %+v (types %q)", j.Profile, types)
	}
	if tb := j.Bid.OnType("t4"); tb == nil || tb.Single[0].LocalBatch != 64 || j.Bid.TypeModel("a100", j.Spec.Limits) == nil {
		t.Fatalf("decoded bid %+v", j.Bid)
	}
	if s.Scale.Desired != 5 || s.Config.ReportKey != v3ReportKey {
		t.Errorf("version 3 and 4 content lost")
	}
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 6 fixture decodes to another state than the commands make (%d bytes against %d)", len(again), len(got))
	}
}

// snapshotV7 is a version 7 snapshot: snapshotV6's state plus the
// federation's (the lab's identity, quota and peers; a lease it lends,
// one it borrows, one reclaimed and two expired). It was written by the
// version 7 encoder and must still decode.
const snapshotV7 = "testdata/snapshot-v7.bin"

func v7State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v6State(t)
	lab := labA()
	lab.Quota = federation.Quota{Nominal: 12, LendingLimit: 8, BorrowingLimit: 8}
	borrow := &Lease{Cmd: federation.Command{Op: federation.OpGrant, From: "lab-b", Lease: "lab-b/m0@20", Lender: "lab-b", Borrower: "lab-a",
		Nodes: []federation.NodeGPUs{{Node: "m0", GPUs: 2}}, At: 20, TTL: 120}}
	a.must(t, 5, lab,
		fedGrant("lab-a/n1@14", "n1", 4, 14),
		fedGrant("lab-a/n2@15", "n2", 2, 15),
		fedCmd(federation.OpReclaim, "lab-a", "lab-a/n2@15", 16),
		fedGrant("lab-a/auto-1@17", "auto-1", 4, 17),
		fedCmd(federation.OpRenew, "lab-a", "lab-a/n1@14", 18),
		borrow,
		&Lease{Cmd: federation.Command{Op: federation.OpExpire, From: "lab-a", At: 317.5}},
	)
	return a.state()
}

func TestSnapshotVersion7Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v7State(t)))
	_, s := decodeFixture(t, snapshotV7, 7)
	fed := s.Fed
	if fed == nil || fed.Lab.Name != "lab-a" || fed.Lab.CA != "fp-a" || fed.Lab.Quota.Nominal != 12 || len(fed.Lab.Peers) != 1 {
		t.Fatalf("decoded federation %+v", fed)
	}
	st := fed.Ledger.State()
	// n1 renewed at 18 (expires 318) stays; auto-1's (expired at 317) and
	// the borrowed m0 (at 140) ended at 317.5; n2's was reclaimed.
	if len(st.Leases) != 1 || st.Leases[0].ID != "lab-a/n1@14" || st.Leases[0].Expires != 318 || st.LastReclaim != 16 || len(st.Ended) != 3 {
		t.Fatalf("decoded ledger %+v", st)
	}
	if fed.Ledger.Lent() != 4 || fed.Ledger.Borrowed() != 0 || fed.Ledger.LentOn("n1") != 4 {
		t.Errorf("ledger counters: lent %d, borrowed %d", fed.Ledger.Lent(), fed.Ledger.Borrowed())
	}
	if s.Scale.Desired != 5 || s.Config.ReportKey != v3ReportKey || len(s.Jobs["typed"].ProfiledTypes()) != 2 {
		t.Errorf("versions 3 to 6 content lost")
	}
	// The state decoded from the fixture is the state the commands make.
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 7 fixture decodes to another state than the commands make (%d bytes against %d)", len(again), len(got))
	}
}

// snapshotV8 is a version 8 snapshot: snapshotV7's state plus a job
// that declared the epochs it trains for and reported some. It was
// written by the version 8 encoder and must still decode.
const snapshotV8 = "testdata/snapshot-v8.bin"

func v8State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v7State(t)
	paced := testSpec()
	paced.Name, paced.CheckpointDir, paced.Epochs = "paced", "/ckpt/paced", 90
	a.must(t, 6,
		&SubmitJob{ID: "paced", Spec: paced, SubmitTime: 320, Submitter: "acc-alice"},
		&UpdateJob{ID: "paced", Set: UpdateEpoch, Epoch: 30},
	)
	return a.state()
}

func TestSnapshotVersion8Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v8State(t)))
	_, s := decodeFixture(t, snapshotV8, 8)
	if j := s.Jobs["paced"]; j == nil || j.Spec.Epochs != 90 || j.Epoch != 30 || s.Jobs["typed"].Spec.Epochs != 0 {
		t.Fatalf("decoded jobs %+v", s.Jobs)
	}
	if s.Fed == nil || s.Scale.Desired != 5 || len(s.Jobs["typed"].ProfiledTypes()) != 2 {
		t.Errorf("versions 3 to 7 content lost")
	}
	// Version 8 had no quotas: the defaults hold.
	if s.Quotas.Of("acc-alice") != DefaultQuota || s.Quotas.StateBudget() != DefaultStateBudget {
		t.Errorf("quotas of a version 8 snapshot: %+v", s.Quotas)
	}
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 8 fixture decodes to another state than the commands make (%d bytes against %d)", len(again), len(got))
	}
}

// snapshotV9 is a version 9 snapshot: snapshotV8's state plus a job
// that resumes from a finished one of its submitter (owned submissions),
// the cluster's default quota and state budget, and a submitter's own
// quota.
// It was written by the version 9 encoder and must still decode.
const snapshotV9 = "testdata/snapshot-v9.bin"

func v9State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v8State(t)
	first, again := testSpec(), testSpec()
	first.Name, first.CheckpointDir = "first", ""
	again.Name, again.CheckpointDir, again.ResumeFrom = "again", "", "first"
	a.must(t, 7,
		&SubmitJob{ID: "first", Spec: first, SubmitTime: 330, Submitter: "acc-alice", Owned: true},
		&CancelJob{ID: "first", By: "acc-alice", Reason: "user", Time: 331},
		&SubmitJob{ID: "again", Spec: again, SubmitTime: 332, Submitter: "acc-alice", Owned: true},
		&SetQuota{Quota: Quota{Jobs: 100, Rate: 2}, Budget: 64 << 20, By: "acc-admin"},
		&SetQuota{Accessor: "acc-alice", Quota: Quota{Jobs: 3, SpecBytes: 1 << 20, Burst: 4}, By: "acc-admin"},
	)
	return a.state()
}

func TestSnapshotVersion9Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v9State(t)))
	_, s := decodeFixture(t, snapshotV9, 9)
	again := s.Jobs["again"]
	if again == nil || again.Spec.ResumeFrom != "first" || s.CheckpointDir(again) != "/ckpt/first" || s.CheckpointDir(s.Jobs["first"]) != "/ckpt/first" {
		t.Fatalf("decoded resumed job %+v", again)
	}
	if q := s.Quotas.Of("acc-alice"); q != (Quota{Jobs: 3, SpecBytes: 1 << 20, Rate: 2, Burst: 4}) {
		t.Errorf("alice's quota %+v", q)
	}
	if q := s.Quotas.Of("acc-bob"); q != (Quota{Jobs: 100, SpecBytes: DefaultQuota.SpecBytes, Rate: 2, Burst: DefaultQuota.Burst}) {
		t.Errorf("bob's quota %+v", q)
	}
	if s.Quotas.StateBudget() != 64<<20 {
		t.Errorf("state budget %d", s.Quotas.StateBudget())
	}
	if u := s.UsageOf("acc-alice"); u.Jobs != 3 || u.SpecBytes != SpecSize(&s.Jobs["typed"].Spec)+SpecSize(&s.Jobs["paced"].Spec)+
		SpecSize(&s.Jobs["first"].Spec)+SpecSize(&again.Spec) {
		t.Errorf("alice's usage %+v", u)
	}
	if s.Fed == nil || s.Jobs["paced"].Spec.Epochs != 90 {
		t.Errorf("versions 3 to 8 content lost")
	}
	if s.Events.Len() != 0 || s.Events.LastSeq() != 0 {
		t.Errorf("a version 9 snapshot decodes with events: %+v", s.Events)
	}
	// The state decoded from the fixture is the state the commands make,
	// but for the events version 12 added.
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 9 fixture decodes to another state than the commands make (%d bytes against %d)", len(again), len(got))
	}
}

// withoutEvents is s without its events (what snapshots before version 12
// hold of the state the same commands make).
func withoutEvents(s *State) *State {
	s.Events = Events{}
	return s
}

// snapshotV11 is a version 11 snapshot: snapshotV10's state plus a job
// submitted and cancelled with idempotency keys.
// It was written by the version 11 encoder and must still decode.
const snapshotV11 = "testdata/snapshot-v11.bin"

func v11State(t testing.TB) *State {
	t.Helper()
	a := newApplier()
	a.s = v10State(t)
	keyed := testSpec()
	keyed.Name, keyed.CheckpointDir = "keyed", ""
	a.must(t, 9,
		&SubmitJob{ID: "keyed", Spec: keyed, SubmitTime: 440, Submitter: "acc-admin", Owned: true, Key: "sub-1"},
		&CancelJob{ID: "keyed", By: "acc-admin", Reason: "user", Time: 441, Key: "can-1"},
	)
	return a.state()
}

func TestSnapshotVersion11Golden(t *testing.T) {
	got := EncodeState(withoutEvents(v11State(t)))
	_, s := decodeFixture(t, snapshotV11, 11)
	if j := s.Jobs["keyed"]; j == nil || j.SubmitKey != "sub-1" || j.CancelKey != "can-1" || j.State != Cancelled {
		t.Fatalf("decoded keyed job %+v", j)
	}
	if j := s.Jobs["again"]; j == nil || j.SubmitKey != "" || j.CancelKey != "" {
		t.Errorf("a job submitted without a key decodes with one: %+v", j)
	}
	// The state decoded from the fixture is the state the commands make,
	// but for the events version 12 added.
	if again := EncodeState(s); !bytes.Equal(got, again) {
		t.Fatalf("the version 11 fixture decodes to another state than the commands make (%d bytes against %d)", len(again), len(got))
	}
	// Older snapshots decode without keys.
	_, old := decodeFixture(t, snapshotV10, 10)
	for id, j := range old.Jobs {
		if j.SubmitKey != "" || j.CancelKey != "" {
			t.Fatalf("version 10 job %s with idempotency keys", id)
		}
	}
}
