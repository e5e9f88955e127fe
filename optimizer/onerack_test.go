package optimizer_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"pollux/optimizer"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/")

// oneRackGolden is where the allocations of the search as it was before
// racks existed are recorded (go test -run OneRack -update ./optimizer
// wrote it at the commit before topology entered the optimizer).
const oneRackGolden = "testdata/onerack-golden.json"

// digest is a short hash of v's JSON form.
func digest(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// oneRackCases runs every policy on seeded rounds of a cluster without
// any topology and returns a digest of each allocation, by case name.
func oneRackCases(t *testing.T, decorate func(*optimizer.Snapshot)) map[string]string {
	t.Helper()
	out := map[string]string{}
	run := func(name string, p optimizer.Policy, snap *optimizer.Snapshot, prev *optimizer.State) *optimizer.State {
		res, err := p.Allocate(snap, prev)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = digest(t, res.Placements)
		return res.State
	}
	for seed := range uint64(40) {
		snap := randomSnapshot(t, seed)
		decorate(snap)
		st := run(fmt.Sprintf("pollux/%d", seed), smallPollux(2), snap, nil)
		next := *snap
		next.Seed++
		run(fmt.Sprintf("pollux-warm/%d", seed), smallPollux(2), &next, st)
		for _, p := range []optimizer.Policy{optimizer.NewHetPollux(), optimizer.NewSia(), optimizer.Tiresias{}, optimizer.Optimus{}, optimizer.NewGreedy()} {
			run(fmt.Sprintf("%s/%d", p.Name(), seed), p, snap, nil)
		}
	}
	for _, size := range []int{64, 512} {
		snap, err := optimizer.Synthetic(size, 4, size/2, uint64(size))
		if err != nil {
			t.Fatal(err)
		}
		decorate(snap)
		p := optimizer.NewPollux()
		st := run(fmt.Sprintf("synthetic-%d", size), p, snap, nil)
		next := *snap
		next.Seed++
		run(fmt.Sprintf("synthetic-%d-warm", size), p, &next, st)
	}
	return out
}

// TestOneRackAllocationsUnchanged: on a cluster of one rack, every policy
// gives exactly the allocations it gave before topology existed.
func TestOneRackAllocationsUnchanged(t *testing.T) {
	got := oneRackCases(t, func(*optimizer.Snapshot) {})
	path := filepath.FromSlash(oneRackGolden)
	if *updateGolden {
		data, err := json.MarshalIndent(got, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	compareDigests(t, want, got)
}

func compareDigests(t *testing.T, want, got map[string]string) {
	t.Helper()
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(got) != len(want) {
		t.Errorf("%d cases, golden has %d", len(got), len(want))
	}
	for _, name := range names {
		if got[name] != want[name] {
			t.Errorf("%s: allocation differs from the golden one", name)
		}
	}
}
