package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"pollux/testbed/controlplane"
)

// TestBenchControlPlaneShape runs the control-plane benchmark small, on
// one actor system (protoactor's remote races with a second one in a
// process under the race detector), and checks the exact JSON shape the
// issue names and that every figure was measured.
func TestBenchControlPlaneShape(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(testWriter{t})
	root.SetArgs([]string{"bench", "controlplane", "--nodes", "6", "--jobs", "10", "--rounds", "3", "--failovers", "1",
		"--interval", "300ms", "--settle", "2s", "--transport", "local", "--json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var keys []string
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"first_round_after_failover_s", "jobs", "nodes", "raft_bytes_per_round", "raft_writes_per_round", "reports_per_s", "round_s"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	var rep controlplane.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Nodes != 6 || rep.Jobs != 10 || !(rep.RoundS.Median > 0) || rep.RoundS.P95 < rep.RoundS.Median ||
		!(rep.RaftWritesPerRound >= 1) || !(rep.RaftBytesPerRound > 0) || !(rep.ReportsPerS > 0) ||
		!(rep.FirstRoundAfterFailoverS.Median > 0) || rep.FirstRoundAfterFailoverS.Max < rep.FirstRoundAfterFailoverS.Median {
		t.Fatalf("report %+v", rep)
	}
}

func TestBenchControlPlaneBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--nodes", "0"},
		{"--transport", "pigeon"},
		{"--interval", "0s"},
		{"--nodes", "99999"},
		{"--log-level", "loud"},
	} {
		if code := run(append([]string{"bench", "controlplane"}, args...)); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
