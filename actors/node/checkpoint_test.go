package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckpointClaim: the first job in a checkpoint directory claims it
// for its submitter; a later job of the same submitter (resuming) gets
// it, one of another submitter (a job of the same name after the
// first was pruned) is refused before anything in it changes, and
// without a submitter nothing is checked or claimed. A directory that
// was there before any claim is claimed if it is empty, or if the
// cluster gave it to a job resuming one of the same submitter's; one
// holding files but no claim is refused.
func TestCheckpointClaim(t *testing.T) {
	tests := []struct {
		name string
		// first is the submitter of the job before ("" none ran, or one
		// without tokens if unclaimed); unclaimed: it left its
		// directory without a claim (before claims); empty: it left
		// the directory empty.
		first     string
		unclaimed bool
		empty     bool
		then      string
		resume    bool
		refused   string // what the denial names ("": none)
	}{
		{name: "a new directory", then: "acc-bob"},
		{name: "the same submitter again", first: "acc-alice", then: "acc-alice"},
		{name: "another submitter's directory", first: "acc-alice", then: "acc-bob", refused: "token acc-alice"},
		{name: "another submitter's, resuming", first: "acc-alice", then: "acc-bob", resume: true, refused: "token acc-alice"},
		{name: "no submitter", first: "acc-alice", then: ""},
		{name: "unclaimed with files", unclaimed: true, then: "acc-bob", refused: "no claim of a submitter"},
		{name: "unclaimed with files, resuming", unclaimed: true, then: "acc-bob", resume: true},
		{name: "unclaimed and empty", unclaimed: true, empty: true, then: "acc-bob"},
		{name: "unclaimed, no submitter", unclaimed: true, then: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "job")
			ckpt := filepath.Join(dir, "checkpoint")
			if tt.first != "" || tt.unclaimed {
				if err := prepareCheckpointDir(root, dir, nil, tt.first, false); err != nil {
					t.Fatal(err)
				}
				if !tt.empty {
					if err := os.WriteFile(ckpt, []byte("the first job's"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			err := prepareCheckpointDir(root, dir, nil, tt.then, tt.resume)
			if tt.refused != "" {
				if !errors.Is(err, errDenied) || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("error %v, want a denial naming %s", err, tt.refused)
				}
				if st, err := os.Stat(ckpt); err != nil || st.Mode().Perm() != 0o644 {
					t.Errorf("the first job's checkpoint changed: %v %v", st.Mode(), err)
				}
				if _, err := os.Stat(filepath.Join(root, ".job.submitter")); tt.unclaimed && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused directory was claimed: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(root, ".job.submitter"))
			want := tt.first
			if want == "" {
				want = tt.then
			}
			switch {
			case want == "" && !errors.Is(err, os.ErrNotExist):
				t.Errorf("a claim without a submitter: %q %v", b, err)
			case want != "" && strings.TrimSpace(string(b)) != want:
				t.Errorf("claim %q (%v), want %q", b, err, want)
			}
		})
	}
}

// TestCheckpointClaimAtOnce: the agents of a job's nodes, sharing the
// root, prepare its directory at once: each gets it, none reads half a
// claim.
func TestCheckpointClaimAtOnce(t *testing.T) {
	for range 50 {
		root := t.TempDir()
		dir := filepath.Join(root, "job")
		errs := make(chan error, 8)
		for range cap(errs) {
			go func() { errs <- prepareCheckpointDir(root, dir, nil, "acc-alice", false) }()
		}
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if ents, _ := os.ReadDir(root); len(ents) != 2 {
			t.Fatalf("the root holds %d entries, want the directory and its claim: %v", len(ents), ents)
		}
	}
}
