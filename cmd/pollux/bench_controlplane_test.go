package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os/exec"
	"slices"
	"testing"
	"time"

	"pollux/internal/testbin"
	"pollux/testbed/controlplane"
)

// benchKeys are the fields of `pollux bench controlplane --json`.
var benchKeys = []string{"actor_systems", "agent_lease_s", "elapsed_s", "failover_to_first_round_s", "failovers", "first_round_after_failover_s",
	"fitness_vs_full", "goroutines", "gossip_members", "interval_s", "jobs", "lease_lapses", "node_endpoints", "node_processes", "nodes", "peak_rss_mib", "raft_bytes_per_round",
	"raft_writes_per_round", "reports_per_s", "round_s", "rounds", "search_effort", "setup_s", "tls", "transport"}

// checkBenchReport checks the JSON shape of a report of nodes nodes,
// jobs jobs, rounds rounds and failovers failovers, and that every
// figure was measured: every round decided something and was judged
// against a search of full effort, the failovers' times are ordered
// (the election before the first round), every node and server in the
// leader's gossip.
func checkBenchReport(t *testing.T, out []byte, nodes, jobs, rounds, failovers int) controlplane.Report {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	keys := slices.Sorted(maps.Keys(raw))
	if !slices.Equal(keys, benchKeys) {
		t.Fatalf("keys %v, want %v", keys, benchKeys)
	}
	var rep controlplane.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Nodes != nodes || rep.Jobs != jobs || !(rep.RoundS.Median > 0) || rep.RoundS.P95 < rep.RoundS.Median ||
		!(rep.RaftWritesPerRound >= 1) || !(rep.RaftBytesPerRound > 0) || !(rep.ReportsPerS > 0) ||
		!(rep.FirstRoundAfterFailoverS.Median > 0) || rep.FirstRoundAfterFailoverS.Max < rep.FirstRoundAfterFailoverS.Median ||
		!(rep.FailoverToFirstRoundS.Median > 0) || rep.GossipMembers != nodes+3 || !(rep.PeakRSSMiB > 0) || !(rep.SetupS > 0) ||
		len(rep.Rounds) != rounds || len(rep.Failovers) != failovers || !(rep.FitnessVsFull.Min > 0) || rep.FitnessVsFull.Median < rep.FitnessVsFull.Min {
		t.Fatalf("report %s", out)
	}
	for _, r := range rep.Rounds {
		if r.Policy != "pollux" || !(r.SearchEffort > 0) || !(r.Fitness > 0) || !(r.FullFitness > 0) || r.FitnessVsFull != r.Fitness/r.FullFitness {
			t.Errorf("timed round %+v: want a search judged against the full one", r)
		}
		if !(r.DecidedS > 0) || r.DecidedS > r.RoundS {
			t.Errorf("timed round %+v: decided %v s into a round of %v s", r, r.DecidedS, r.RoundS)
		}
	}
	for _, f := range rep.Failovers {
		if f.Killed == f.NewLeader || !(f.ElectedAfterKillS > 0) || f.FirstRoundCommittedAfterKillS < f.ElectedAfterKillS ||
			!(f.Round.FullFitness > 0) || f.Round.Policy == "" {
			t.Errorf("failover %+v", f)
		}
	}
	return rep
}

// TestBenchControlPlaneShape runs the control-plane benchmark small, on
// one actor system (protoactor's remote races with a second one in a
// process under the race detector: TestBenchControlPlaneTLS runs the
// remote transport), with real gossip, and checks the JSON.
func TestBenchControlPlaneShape(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane")
	}
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(testWriter{t})
	root.SetArgs([]string{"bench", "controlplane", "--nodes", "6", "--jobs", "10", "--rounds", "3", "--failovers", "1",
		"--interval", "300ms", "--settle", "2s", "--transport", "local", "--agent-lease", "3s", "--json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	rep := checkBenchReport(t, out.Bytes(), 6, 10, 3, 1)
	if rep.AgentLeaseS != 3 {
		t.Errorf("agent_lease_s %v, want 3 (--agent-lease 3s)", rep.AgentLeaseS)
	}
	if rep.Transport != "local" || rep.NodeEndpoints != 1 || rep.ActorSystems != 1 {
		t.Errorf("local transport: %d node endpoints, %d actor systems; want one shared", rep.NodeEndpoints, rep.ActorSystems)
	}
}

// TestBenchControlPlaneTLS runs the benchmark small as the must-show
// runs it: every node and server an actor system with a TLS listener of
// its own and a gossip member of its own. protoactor's remote races
// with a second one in a process (it sets gRPC's global logger on every
// start), so the benchmark runs in a `pollux` built here without the
// race detector.
func TestBenchControlPlaneTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pollux and runs a control plane")
	}
	bin := testbin.Build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "bench", "controlplane", "--nodes", "8", "--jobs", "12", "--rounds", "3", "--failovers", "1",
		"--interval", "300ms", "--settle", "2s", "--json")
	cmd.Stdout, cmd.Stderr = &out, testWriter{t}
	if err := cmd.Run(); err != nil {
		t.Fatalf("pollux bench controlplane: %v\n%s", err, out.String())
	}
	rep := checkBenchReport(t, out.Bytes(), 8, 12, 3, 1)
	if rep.Transport != "remote" || !rep.TLS || rep.NodeEndpoints != 8 || rep.ActorSystems != 8+3 || rep.NodeProcesses != 1 {
		t.Errorf("want 8 node endpoints and 11 actor systems over TLS, the nodes in a process of their own: %s", out.String())
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
