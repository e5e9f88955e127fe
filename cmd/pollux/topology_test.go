package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/optimizer"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
	"pollux/testbed/launch"
)

// TestRacksAndGPUTypesThroughAgents runs 3 servers (racks r0, r1, r0) and
// 4 agents declaring their racks and GPU types as separate processes:
// a0 (r0, t4), a1 (r1, t4), a2 (r0, a100), a3 (r1, a100). It checks from
// outside the allocator, through the API and the workers' own records,
// that: the API shows every node's rack and type and every server's
// rack, and warns that a majority of the voters share r0; submissions
// whose constraints can never be met are refused; every incarnation runs
// on one GPU type; a job pinned to a100 runs only there; a job requiring
// one rack never spans racks; a job of 8 replicas spans the two racks of
// one type; and an agent restarted with another GPU type is re-registered
// with it, the a100 job leaving it.
func TestRacksAndGPUTypesThroughAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 7-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	dir := t.TempDir()
	types := []string{"t4", "t4", "a100", "a100"}
	c := startCluster(ctx, t, launch.Options{Dir: dir,
		Servers: 3, Agents: 4, GPUsPerAgent: 4, Racks: 2, ServerRacks: true, GPUTypes: types,
		Interval: time.Second, TimeScale: 400, Observe: true, Scenario: "racks-and-types"})
	defer c.finish()
	typeOf := func(node string, at int64, restarted int64) string {
		i := slices.IndexFunc(c.Agents, func(m *launch.Member) bool { return m.ID == node })
		if node == "a3" && restarted != 0 && at > restarted {
			return "t4"
		}
		return types[i]
	}
	rackOf := func(node string) string {
		return launch.Rack(slices.IndexFunc(c.Agents, func(m *launch.Member) bool { return m.ID == node }), 2)
	}
	hc := c.HTTPClient(5 * time.Second)
	get := func(path string, out any) {
		t.Helper()
		resp, err := hc.Get("https://" + c.Servers[0].HTTP + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}

	// The nodes as the API shows them. Start waits until some server
	// counts every GPU; s0's own membership view may lag it a moment.
	// waitNodes polls s0's nodes until bad finds nothing wrong with them.
	var nodes []api.Node
	waitNodes := func(bad func() string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			get(api.PathNodes, &nodes)
			why := bad()
			if why == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Error(why)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitNodes(func() string {
		for i, m := range c.Agents {
			k := slices.IndexFunc(nodes, func(n api.Node) bool { return n.ID == m.ID })
			if k < 0 || nodes[k].Rack != launch.Rack(i, 2) || nodes[k].GPUType != types[i] || nodes[k].Topology != "rack="+launch.Rack(i, 2) {
				return fmt.Sprintf("node %s: %+v", m.ID, nodes)
			}
		}
		return ""
	})
	// The servers' racks, and the warning that r0 holds two voters of three.
	var peers []api.Peer
	get(api.PathPeers, &peers)
	if rack, ids := api.RackMajority(peers); rack != "r0" || !slices.Equal(ids, []string{"s0", "s2"}) {
		t.Errorf("peers %+v: majority %q %v", peers, rack, ids)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(c.Servers[1].Log)
		if bytes.Contains(b, []byte("a majority of the voters share one rack")) && bytes.Contains(b, []byte("rack=r0 voters=s0,s2")) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("server s1 did not warn that r0 holds a majority of the voters")
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Constraints that can never be met are refused at submission.
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	for _, bad := range []struct {
		job     launch.Job
		mention string
	}{
		{launch.Job{Name: "v100", App: "cifar10", GPUType: "v100"}, "no node of the cluster has GPUs of this type (types: a100, t4)"},
		{launch.Job{Name: "big-rack", App: "cifar10", MinReplicas: 5, Topology: optimizer.TopologyConstraint{Required: "rack"}},
			"the largest rack (r0, a100 GPUs) has 4 (a job runs on one GPU type at a time)"},
		{launch.Job{Name: "zone", App: "cifar10", Topology: optimizer.TopologyConstraint{Preferred: "zone"}}, "not one of the cluster's levels (rack)"},
	} {
		spec, err := bad.job.Spec(cat, 16)
		if err != nil {
			t.Fatal(err)
		}
		if a := cl.SubmitAny(ctx, bad.job.Name, spec, 250*time.Millisecond, 30*time.Second); a.Code != http.StatusBadRequest || !strings.Contains(a.Err, bad.mention) {
			t.Errorf("job %s: %v, want a 400 mentioning %q", bad.job.Name, a, bad.mention)
		}
	}

	// An agent whose topology does not fit the cluster's levels is
	// refused when it joins.
	if err := c.TLS().Add(pki.RoleAgent, "zoned", nil); err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(selfExec), "agent", "--name", "zoned", "--gpus", "2", "--topology", "rack=r0,zone=z1",
		"--join", c.Servers[0].Gossip, "--fast-gossip", "--data-dir", filepath.Join(dir, "zoned"))
	args = append(args, c.TLS().Flags("zoned")...)
	zoned := exec.CommandContext(ctx, args[0], args[1:]...)
	zoned.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1")
	var zonedErr bytes.Buffer
	zoned.Stderr = &zonedErr
	err = zoned.Run()
	if code := zoned.ProcessState.ExitCode(); code != 2 || !strings.Contains(zonedErr.String(), "refused at join") ||
		!strings.Contains(zonedErr.String(), `level "zone" in "rack=r0,zone=z1" is not one of the cluster's levels (rack)`) {
		t.Errorf("agent with a zone: %v, exit %d\n%s", err, code, tail(zonedErr.Bytes(), 2000))
	}

	// The workload, sampled every tick from the API.
	jobs := []launch.Job{
		{Name: "span-8", App: "cifar10", MinReplicas: 8},
		{Name: "a100-only", App: "cifar10", GPUType: "a100"},
		{Name: "t4-rack", App: "cifar10", GPUType: "t4", Topology: optimizer.TopologyConstraint{Required: "rack"}},
		{Name: "any", App: "ncf", After: time.Second},
	}
	var restartedAt int64
	restarted := false
	var seen []string
	var policies []string
	res, err := c.Run(ctx, cat, jobs, launch.RunOptions{TimeScale: 400, Tick: 250 * time.Millisecond,
		OnTick: func(elapsed time.Duration) {
			js, _, err := cl.JobsAny(ctx)
			if err != nil {
				return
			}
			for _, j := range js {
				ts, racks := map[string]bool{}, map[string]bool{}
				for _, p := range j.Placement {
					ts[p.GPUType], racks[p.Rack] = true, true
				}
				if len(j.Placement) > 0 {
					seen = append(seen, fmt.Sprintf("%s:%v", j.ID, j.Placement))
				}
				switch {
				case len(ts) > 1:
					t.Errorf("%s placed over two GPU types: %+v", j.ID, j.Placement)
				case j.ID == "a100-only" && len(ts) == 1 && !ts["a100"]:
					t.Errorf("a100-only placed on %+v", j.Placement)
				case j.ID == "t4-rack" && (len(racks) > 1 || len(ts) == 1 && !ts["t4"]):
					t.Errorf("t4-rack placed on %+v", j.Placement)
				}
			}
			if st, err := cl.StatusAny(ctx); err == nil && st.LastRound != nil && !slices.Contains(policies, st.LastRound.Policy) {
				policies = append(policies, st.LastRound.Policy)
			}
			if !restarted && elapsed > 6*time.Second {
				restarted = true
				a3 := c.Agents[3]
				t.Logf("restarting agent a3 as a t4 machine after %v", elapsed)
				if err := c.Kill(a3, "", 0); err != nil {
					t.Error(err)
				}
				restartedAt = mono.Now()
				a3.SetFlag("--gpu-type", "t4")
				if err := c.Start(ctx, a3, "", 0); err != nil {
					t.Error(err)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := launch.WriteResults(&table, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("results:\n%s\npolicies seen: %v", table.String(), policies)
	if len(res) != len(jobs) {
		t.Errorf("%d results, want %d", len(res), len(jobs))
	}
	// Every job declared its application's epochs (what pollux-het reads
	// its progress against), and the API shows them.
	for _, r := range res {
		if want := cat[r.Job.App].MaxEpochs(); r.Job.Epochs != want || r.Job.Epoch > want {
			t.Errorf("job %s: epoch %d of %d declared, want %d declared", r.Job.ID, r.Job.Epoch, r.Job.Epochs, want)
		}
	}
	if !slices.Contains(policies, "pollux-het") {
		t.Errorf("no round decided by pollux-het on a cluster of two GPU types: %v", policies)
	}
	// The restarted agent is a t4 machine now.
	waitNodes(func() string {
		k := slices.IndexFunc(nodes, func(n api.Node) bool { return n.ID == "a3" })
		if k >= 0 && nodes[k].GPUType == "t4" && nodes[k].Health == "alive" {
			return ""
		}
		return fmt.Sprintf("a3 after its restart: %+v", nodes)
	})
	if err := c.Stop(); err != nil {
		t.Error(err)
	}

	// The workers' own records: where each incarnation really ran.
	workers, err := record.ReadRoot(filepath.Join(dir, "records"))
	if err != nil {
		t.Fatal(err)
	}
	type inc struct {
		job string
		inc uint64
	}
	nodesOf := map[inc]map[string]bool{}
	typesOf := map[inc]map[string]bool{}
	for _, w := range workers {
		s := w.Start()
		k := inc{s.Job, s.Inc}
		if nodesOf[k] == nil {
			nodesOf[k], typesOf[k] = map[string]bool{}, map[string]bool{}
		}
		nodesOf[k][w.Node] = true
		typ := typeOf(w.Node, s.T, restartedAt)
		typesOf[k][typ] = true
		if s.Job == "a100-only" && typ != "a100" {
			t.Errorf("a100-only incarnation %d ran a worker on %s (%s)", s.Inc, w.Node, typ)
		}
	}
	spanned := false
	for k, ns := range nodesOf {
		racks := map[string]bool{}
		for n := range ns {
			racks[rackOf(n)] = true
		}
		if len(typesOf[k]) > 1 {
			t.Errorf("%s incarnation %d ran on two GPU types: nodes %v", k.job, k.inc, ns)
		}
		if k.job == "t4-rack" && len(racks) > 1 {
			t.Errorf("t4-rack incarnation %d spanned racks: nodes %v", k.inc, ns)
		}
		spanned = spanned || k.job == "span-8" && len(racks) == 2
	}
	if len(nodesOf) == 0 {
		t.Fatal("no worker records")
	}
	if !spanned {
		t.Errorf("span-8 (8 replicas, 4 GPUs per node, 2 nodes per type) never ran over both racks: %v", nodesOf)
	}
	t.Logf("%d incarnations recorded; placements seen (first 10): %v", len(nodesOf), seen[:min(len(seen), 10)])
}

// TestPlaceFlagsBadInput: a malformed topology or GPU type, levels out of
// order, an unknown policy or a ratio below 1 stop an agent or a server
// at start-up with exit status 2 and a message naming the flag.
func TestPlaceFlagsBadInput(t *testing.T) {
	dir := t.TempDir()
	server := []string{"server", "--id", "s", "--data-dir", dir}
	agent := []string{"agent", "--name", "a", "--gpus", "1"}
	tests := []struct {
		name    string
		args    []string
		mention string
	}{
		{"zone before rack", append(slices.Clone(agent), "--topology", "zone=z1,rack=r1"), `--topology: cluster: bad node metadata: topology "zone=z1,rack=r1"`},
		{"no rack", append(slices.Clone(agent), "--topology", "zone=z1"), `the first (innermost) level must be "rack"`},
		{"not level=domain", append(slices.Clone(agent), "--topology", "rack"), `"rack" is not level=domain`},
		{"upper-case rack", append(slices.Clone(agent), "--topology", "rack=R1"), "lower-case letters"},
		{"rack twice", append(slices.Clone(agent), "--topology", "rack=r1,rack=r2"), "listed twice"},
		{"bad GPU type", append(slices.Clone(agent), "--gpu-type", "A100"), `--gpu-type: optimizer: bad topology: GPU type name "A100"`},
		{"--rack and --topology disagree", append(slices.Clone(agent), "--rack", "r1", "--topology", "rack=r2"), "disagree"},
		{"levels out of order", append(slices.Clone(server), "--topology-levels", "zone,rack"), `--topology-levels: optimizer: bad topology: levels "zone,rack"`},
		{"server topology missing a level", append(slices.Clone(server), "--topology-levels", "rack,zone", "--topology", "rack=r1"),
			`--topology does not fit --topology-levels`},
		{"unknown policy", append(slices.Clone(server), "--policy", "fifo"), `--policy "fifo": want auto, pollux, pollux-het, sia, pollux-unaware or tiresias`},
		{"removed cross-rack ratio", append(slices.Clone(server), "--cross-rack-ratio", "2"), "unknown flag: --cross-rack-ratio"},
	}
	for _, tt := range tests {
		args := append(slices.Clone(selfExec), tt.args...)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(stderr.String(), tt.mention) {
			t.Errorf("%s: exit %d, stderr %s; want 2 mentioning %q", tt.name, code, tail(stderr.Bytes(), 600), tt.mention)
		}
	}
}

// TestServerLevelsAreTheCluster's: a cluster bootstrapped with levels
// rack,zone keeps them; its server restarted with --topology-levels rack
// refuses to run, and so does one whose --topology misses the zone.
func TestServerLevelsAreTheClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dir := t.TempDir()
	ports, err := launch.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	raftAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	run := func(extra ...string) (int, string) {
		args := append(slices.Clone(selfExec), "server", "--id", "ts0", "--data-dir", filepath.Join(dir, "ts0"),
			"--raft", raftAddr, "--http", httpAddr, "--peers", "ts0="+raftAddr+"="+httpAddr, "--bootstrap",
			"--checkpoint-root", filepath.Join(dir, "ckpt"), "--log-level", "info")
		args = append(append(args, testBundle().Flags("ts0")...), extra...)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), stderr.String()
	}
	// Bootstrapped with rack,zone and a topology that fits them, the
	// server runs: it is stopped once it advertises its levels.
	args := append(slices.Clone(selfExec), "server", "--id", "ts0", "--data-dir", filepath.Join(dir, "ts0"),
		"--raft", raftAddr, "--http", httpAddr, "--peers", "ts0="+raftAddr+"="+httpAddr, "--bootstrap",
		"--checkpoint-root", filepath.Join(dir, "ckpt"), "--topology-levels", "rack,zone", "--topology", "rack=r1,zone=z1")
	args = append(args, testBundle().Flags("ts0")...)
	first := exec.Command(args[0], args[1:]...)
	first.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1")
	var log logbuf.Buffer
	first.Stderr = &log
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(log.Lines("server: cluster configuration")) == 0 {
		if time.Now().After(deadline) {
			_ = first.Process.Kill()
			_ = first.Wait()
			t.Fatalf("the bootstrapped server never configured the cluster:\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The server checks its levels once the cluster is configured, and a
	// mismatch would stop it: the line saying they were checked and
	// advertised shows the check passed.
	for len(log.Lines("server: topology levels checked and advertised", "levels=rack,zone")) == 0 {
		if time.Now().After(deadline) {
			_ = first.Process.Kill()
			_ = first.Wait()
			t.Fatalf("the bootstrapped server never advertised its levels:\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = first.Process.Signal(syscall.SIGTERM)
	if err := first.Wait(); err != nil {
		t.Fatalf("the server with fitting levels and topology: %v\n%s", err, log.String())
	}
	for _, tt := range []struct {
		name  string
		extra []string
		// mentions: the error names one of them (a server that names
		// levels is refused by whichever comes first: its check of the
		// replicated levels, or the state machine refusing its InitCluster).
		mentions []string
	}{
		{"other levels", []string{"--topology-levels", "rack"}, []string{"--topology-levels rack: the cluster's levels are rack,zone (set at bootstrap)"}},
		{"levels of another name", []string{"--topology-levels", "rack,block", "--topology", "rack=r1,block=b1"},
			[]string{"the cluster's topology levels are rack,zone (set at bootstrap), not rack,block",
				"--topology-levels rack,block: the cluster's levels are rack,zone (set at bootstrap)"}},
		{"a topology without the zone", []string{"--topology", "rack=r1"}, []string{`server: --topology: cluster: bad node metadata: topology "rack=r1": optimizer: bad topology: level "zone" missing`}},
	} {
		code, stderr := run(tt.extra...)
		if code != 2 || !slices.ContainsFunc(tt.mentions, func(m string) bool { return strings.Contains(stderr, m) }) {
			t.Errorf("%s: exit %d, want 2 mentioning one of %q:\n%s", tt.name, code, tt.mentions, tail([]byte(stderr), 1500))
		}
	}
}

// TestServerPolicyNames checks that --policy takes each live policy from
// the registry, tiresias on both kinds of round.
func TestServerPolicyNames(t *testing.T) {
	for _, tc := range []struct{ name, single, typed string }{
		{"auto", "pollux", "pollux-het"}, {"pollux", "pollux", "pollux"}, {"tiresias", "tiresias", "tiresias"}, {"sia", "sia", "sia"},
	} {
		single, typed, err := serverPolicy(tc.name)
		if err != nil || single.Name() != tc.single || typed.Name() != tc.typed {
			t.Errorf("--policy %s: %v, %v, %v; want %s and %s", tc.name, single, typed, err, tc.single, tc.typed)
		}
	}
}
