package state

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// ownedSpec is testSpec without a checkpoint directory, resuming from
// from ("" none).
func ownedSpec(from string) JobSpec {
	s := testSpec()
	s.CheckpointDir, s.ResumeFrom = "", from
	return s
}

// tenancyFSM is aclFSM plus, for alice, a finished job "done-a" and a
// live job "live-a" (both owned), and for bob a finished "done-b".
func tenancyFSM(t testing.TB) *applier {
	t.Helper()
	a := aclFSM(t)
	a.must(t, 1,
		&SubmitJob{ID: "done-a", Spec: ownedSpec(""), SubmitTime: 7, Submitter: "acc-alice", Owned: true},
		&CancelJob{ID: "done-a", By: "acc-alice", Time: 8},
		&SubmitJob{ID: "live-a", Spec: ownedSpec(""), SubmitTime: 9, Submitter: "acc-alice", Owned: true},
		&SubmitJob{ID: "done-b", Spec: ownedSpec(""), SubmitTime: 10, Submitter: "acc-bob", Owned: true},
		&CancelJob{ID: "done-b", By: "acc-bob", Time: 11},
	)
	return a
}

// TestCheckpointOwnership: an owned submission gets ROOT/<id>, takes
// over a finished job's directory only for the token that submitted
// that job, and never one a live job holds; every refusal changes
// nothing.
func TestCheckpointOwnership(t *testing.T) {
	tests := []struct {
		name      string
		by        string
		dir, from string
		want      error  // nil: accepted
		mention   string // in the refusal
		wantDir   string // the accepted job's directory
	}{
		{name: "own directory", by: "acc-bob", wantDir: "/ckpt/new"},
		{name: "own directory named", by: "acc-bob", dir: "/ckpt/new", wantDir: "/ckpt/new"},
		{name: "resume own finished job", by: "acc-alice", from: "done-a", wantDir: "/ckpt/done-a"},
		{name: "resume own finished job naming its directory", by: "acc-alice", from: "done-a", dir: "/ckpt/done-a", wantDir: "/ckpt/done-a"},
		{name: "squat another's live job's directory", by: "acc-bob", dir: "/ckpt/live-a", want: ErrCheckpointHeld, mention: `held by job "live-a"`},
		{name: "squat a directory inside a live job's", by: "acc-bob", dir: "/ckpt/live-a/x", want: ErrCheckpointHeld, mention: `held by job "live-a"`},
		{name: "squat a directory holding a live job's", by: "acc-bob", dir: "/ckpt", want: ErrCheckpointHeld, mention: `held by job "alices"`},
		{name: "another's finished job's directory", by: "acc-bob", dir: "/ckpt/done-a", want: ErrPermission, mention: "not its own"},
		{name: "a directory nobody has", by: "acc-bob", dir: "/ckpt/future-b", want: ErrPermission, mention: "not its own"},
		{name: "resume another's job", by: "acc-bob", from: "done-a", want: ErrPermission, mention: "submitted by token acc-alice (alice)"},
		{name: "resume own live job", by: "acc-alice", from: "live-a", want: ErrCheckpointHeld, mention: `held by job "live-a"`},
		{name: "resume an unknown job", by: "acc-alice", from: "gone", want: ErrInvalid, mention: "does not hold"},
		{name: "resume naming another directory", by: "acc-alice", from: "done-a", dir: "/ckpt/done-b", want: ErrInvalid, mention: "whose checkpoint directory is /ckpt/done-a"},
		{name: "admin resumes another's job", by: "acc-admin", from: "done-b", want: ErrPermission, mention: "submitted by token acc-bob"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tenancyFSM(t)
			before := EncodeState(a.state())
			spec := ownedSpec(tt.from)
			spec.CheckpointDir = tt.dir
			err := a.apply(t, 1, &SubmitJob{ID: "new", Spec: spec, SubmitTime: 20, Submitter: tt.by, Owned: true})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got := a.s.CheckpointDir(a.s.Jobs["new"]); got != tt.wantDir {
					t.Errorf("checkpoint directory %q, want %q", got, tt.wantDir)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("error %v, want %v mentioning %q", err, tt.want, tt.mention)
			}
			if !bytes.Equal(before, EncodeState(a.state())) {
				t.Error("the refused submission changed the state")
			}
		})
	}
}

// TestCheckpointTakenOverOnce: two jobs cannot resume from the same
// finished job while the first runs; once it finished, the next may.
func TestCheckpointTakenOverOnce(t *testing.T) {
	a := tenancyFSM(t)
	a.must(t, 1, &SubmitJob{ID: "resume-1", Spec: ownedSpec("done-a"), SubmitTime: 20, Submitter: "acc-alice", Owned: true})
	err := a.apply(t, 1, &SubmitJob{ID: "resume-2", Spec: ownedSpec("done-a"), SubmitTime: 21, Submitter: "acc-alice", Owned: true})
	if !errors.Is(err, ErrCheckpointHeld) || !strings.Contains(err.Error(), `"resume-1"`) {
		t.Fatalf("second take-over: %v", err)
	}
	a.must(t, 1, &CancelJob{ID: "resume-1", By: "acc-alice", Time: 22},
		// A chain: resuming from the job that resumed.
		&SubmitJob{ID: "resume-2", Spec: ownedSpec("resume-1"), SubmitTime: 23, Submitter: "acc-alice", Owned: true})
	if got := a.s.CheckpointDir(a.s.Jobs["resume-2"]); got != "/ckpt/done-a" {
		t.Errorf("the chain's directory %q", got)
	}
	// After its owner is pruned, a new job of the same name (another
	// submitter's) cannot take the directory a live job holds.
	a.must(t, 1, &Prune{Jobs: []string{"done-a"}})
	err = a.apply(t, 1, &SubmitJob{ID: "done-a", Spec: ownedSpec(""), SubmitTime: 24, Submitter: "acc-bob", Owned: true})
	if !errors.Is(err, ErrCheckpointHeld) {
		t.Fatalf("a new job in a held directory: %v", err)
	}
}

// TestLegacySubmissionsKeepTheirRules: entries written before the
// tenancy rules (Owned false) apply as they did: any directory below
// the root, no quota.
func TestLegacySubmissionsKeepTheirRules(t *testing.T) {
	a := tenancyFSM(t)
	a.must(t, 1, &SetQuota{Accessor: "acc-bob", Quota: Quota{Jobs: 1}, By: "acc-admin"})
	for i := range 3 {
		spec := testSpec()
		spec.CheckpointDir = "/ckpt/live-a"
		a.must(t, 1, &SubmitJob{ID: fmt.Sprintf("old-%d", i), Spec: spec, SubmitTime: 20, Submitter: "acc-bob"})
	}
}

// TestQuotas: a submitter's running plus pending jobs and spec bytes,
// and the state budget, bound owned submissions; finished jobs leave the
// job count but keep their bytes until pruned; a refusal changes
// nothing.
func TestQuotas(t *testing.T) {
	a := tenancyFSM(t)
	a.must(t, 1, &SetQuota{Accessor: "acc-bob", Quota: Quota{Jobs: 2}, By: "acc-admin"})
	submit := func(id, by string, spec JobSpec) error {
		return a.apply(t, 1, &SubmitJob{ID: id, Spec: spec, SubmitTime: 30, Submitter: by, Owned: true})
	}
	for _, id := range []string{"b1", "b2"} {
		if err := submit(id, "acc-bob", ownedSpec("")); err != nil {
			t.Fatal(err)
		}
	}
	before := EncodeState(a.state())
	err := submit("b3", "acc-bob", ownedSpec(""))
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "holds 2 running or pending jobs") {
		t.Fatalf("third job: %v", err)
	}
	if !bytes.Equal(before, EncodeState(a.state())) {
		t.Error("the refusal changed the state")
	}
	// Alice has the default quota.
	if err := submit("a3", "acc-alice", ownedSpec("")); err != nil {
		t.Fatal(err)
	}
	// A finished job frees its place.
	a.must(t, 1, &CancelJob{ID: "b1", By: "acc-bob", Time: 31})
	if err := submit("b3", "acc-bob", ownedSpec("")); err != nil {
		t.Fatal(err)
	}

	// Spec bytes: a job of big arguments.
	big := ownedSpec("")
	big.App, big.Command = "", []string{"/usr/bin/python3"}
	for range 200 {
		big.Command = append(big.Command, strings.Repeat("x", 4000))
	}
	u := a.s.UsageOf("acc-bob")
	a.must(t, 1, &SetQuota{Accessor: "acc-bob", Quota: Quota{Jobs: 10, SpecBytes: u.SpecBytes + SpecSize(&big)}, By: "acc-admin"})
	if err := submit("big-1", "acc-bob", big); err != nil {
		t.Fatal(err)
	}
	a.must(t, 1, &CancelJob{ID: "big-1", By: "acc-bob", Time: 32})
	if err := submit("big-2", "acc-bob", big); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "bytes of job specs") {
		t.Fatalf("bytes beyond the quota: %v", err)
	}
	// Pruned, its bytes are free again.
	a.must(t, 1, &Prune{Jobs: []string{"big-1"}})
	if err := submit("big-2", "acc-bob", big); err != nil {
		t.Fatal(err)
	}

	// The state budget bounds everyone together, anonymous submissions
	// too, and the events count in it.
	a.must(t, 1, &SetQuota{Budget: a.s.SpecBytes() + SpecSize(&big), By: "acc-admin"})
	if err := submit("big-3", "acc-alice", big); !errors.Is(err, ErrStateFull) || !strings.Contains(err.Error(), "of events") {
		t.Fatalf("beyond the budget with the events: %v", err)
	}
	a.must(t, 1, &SetQuota{Budget: a.s.SpecBytes() + a.s.Events.Bytes() + SpecSize(&big), By: "acc-admin"})
	if err := submit("big-3", "acc-alice", big); err != nil {
		t.Fatal(err)
	}
	before = EncodeState(a.state())
	for _, by := range []string{"acc-alice", "acc-admin", ""} {
		if err := submit("big-4", by, big); !errors.Is(err, ErrStateFull) {
			t.Fatalf("beyond the budget, by %q: %v", by, err)
		}
	}
	if !bytes.Equal(before, EncodeState(a.state())) {
		t.Error("the refusals changed the state")
	}
}

// TestSetQuota: only an admin sets quotas, of known tokens; a zero
// quota removes a submitter's own; values are bounded.
func TestSetQuota(t *testing.T) {
	tests := []struct {
		name string
		c    SetQuota
		want error
	}{
		{"admin sets a submitter's", SetQuota{Accessor: "acc-bob", Quota: Quota{Jobs: 5}, By: "acc-admin"}, nil},
		{"admin sets the defaults", SetQuota{Quota: Quota{Rate: 1}, Budget: 1 << 20, By: "acc-ops"}, nil},
		{"a server sets one", SetQuota{Accessor: "acc-bob", Quota: Quota{Burst: 2}}, nil},
		{"submitter raises its own", SetQuota{Accessor: "acc-bob", Quota: Quota{Jobs: 5000}, By: "acc-bob"}, ErrPermission},
		{"reader", SetQuota{Quota: Quota{Jobs: 5}, By: "acc-reader"}, ErrPermission},
		{"unknown token", SetQuota{Accessor: "acc-nobody", Quota: Quota{Jobs: 5}, By: "acc-admin"}, ErrUnknownToken},
		{"budget of a token", SetQuota{Accessor: "acc-bob", Budget: 5, By: "acc-admin"}, ErrInvalid},
		{"negative jobs", SetQuota{Accessor: "acc-bob", Quota: Quota{Jobs: -1}, By: "acc-admin"}, ErrInvalid},
		{"absurd rate", SetQuota{Quota: Quota{Rate: 1e9}, By: "acc-admin"}, ErrInvalid},
		{"budget beyond a snapshot", SetQuota{Budget: MaxSnapshot, By: "acc-admin"}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := aclFSM(t)
			before := EncodeState(a.state())
			c := tt.c
			_, err := ApplyTo(a.s, &c, 1)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if err != nil && !bytes.Equal(before, EncodeState(a.state())) {
				t.Error("a refused quota changed the state")
			}
		})
	}
	a := aclFSM(t)
	a.must(t, 1, &SetQuota{Accessor: "acc-bob", Quota: Quota{Jobs: 5}, By: "acc-admin"})
	if q, ok := a.s.Quotas.Set("acc-bob"); !ok || q.Jobs != 5 || a.s.Quotas.Of("acc-bob").Rate != DefaultQuota.Rate {
		t.Fatalf("bob's quota %+v", q)
	}
	a.must(t, 1, &SetQuota{Accessor: "acc-bob", By: "acc-admin"})
	if _, ok := a.s.Quotas.Set("acc-bob"); ok || len(a.s.Quotas.Accessors()) != 0 {
		t.Error("a zero quota did not remove bob's own")
	}
}

// TestOwnedSubmissionEncoding: an owned submission decodes as one, with
// its resumed job, whatever other blocks it has; every encoding is the
// only one of its command.
func TestOwnedSubmissionEncoding(t *testing.T) {
	for _, c := range []*SubmitJob{
		{ID: "j", Spec: ownedSpec(""), SubmitTime: 1, Owned: true},
		{ID: "j", Spec: ownedSpec("prev"), SubmitTime: 1, Submitter: "acc", Owned: true},
		{ID: "j", Spec: testSpec(), SubmitTime: 1},
		{ID: "j", Spec: testSpec(), SubmitTime: 1, Submitter: "acc"},
	} {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Decode(b)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		got := d.(*SubmitJob)
		if got.Owned != c.Owned || got.Spec.ResumeFrom != c.Spec.ResumeFrom || got.Submitter != c.Submitter {
			t.Errorf("decoded %+v, want %+v", got, c)
		}
	}
	// Resuming needs the tenancy rules, and not from itself.
	for _, c := range []*SubmitJob{
		{ID: "j", Spec: ownedSpec("prev"), SubmitTime: 1},
		{ID: "j", Spec: ownedSpec("j"), SubmitTime: 1, Owned: true},
	} {
		if _, err := Encode(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v encodes: %v", c, err)
		}
	}
}

// BenchmarkOwnedSubmit is the state machine's checks of one owned
// submission (checkpoint holders, quota, budget) in a state of 10,000
// jobs of 100 submitters.
func BenchmarkOwnedSubmit(b *testing.B) {
	a := aclFSM(b)
	for i := range 100 {
		a.s.ACL.add(token(fmt.Sprintf("acc-%03d", i), "t", RoleSubmit, fmt.Sprintf("s-%03d", i), 1))
	}
	for i := range 10000 {
		spec := ownedSpec("")
		a.s.Jobs[fmt.Sprintf("job-%05d", i)] = &Job{ID: fmt.Sprintf("job-%05d", i), Spec: spec, State: Pending, SubmitTime: 1,
			Submitter: fmt.Sprintf("acc-%03d", i%100), SubmitterName: "t", specBytes: SpecSize(&spec)}
	}
	c := &SubmitJob{ID: "one-more", Spec: ownedSpec(""), SubmitTime: 2, Submitter: "acc-007", Owned: true}
	for b.Loop() {
		if _, err := admitOwned(a.s, c, "t"); err != nil {
			b.Fatal(err)
		}
	}
}
