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
// without a submitter nothing is checked or claimed.
func TestCheckpointClaim(t *testing.T) {
	tests := []struct {
		name    string
		first   string // the submitter of the job before ("" none ran)
		then    string
		refused bool
	}{
		{name: "a new directory", then: "acc-bob"},
		{name: "the same submitter again", first: "acc-alice", then: "acc-alice"},
		{name: "another submitter's directory", first: "acc-alice", then: "acc-bob", refused: true},
		{name: "no submitter", first: "acc-alice", then: ""},
		{name: "a claim only for a submitter", first: "", then: "acc-bob"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "job")
			ckpt := filepath.Join(dir, "checkpoint")
			if tt.first != "" || tt.name == "a claim only for a submitter" {
				if err := prepareCheckpointDir(root, dir, nil, tt.first); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(ckpt, []byte("the first job's"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := prepareCheckpointDir(root, dir, nil, tt.then)
			if tt.refused {
				if !errors.Is(err, errDenied) || !strings.Contains(err.Error(), "token "+tt.first) {
					t.Fatalf("error %v, want a denial naming token %s", err, tt.first)
				}
				if st, err := os.Stat(ckpt); err != nil || st.Mode().Perm() != 0o644 {
					t.Errorf("the first job's checkpoint changed: %v %v", st.Mode(), err)
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
			go func() { errs <- prepareCheckpointDir(root, dir, nil, "acc-alice") }()
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
