package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/actors/agent"
	"pollux/cluster/provider"
	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

// typedScaleWatch is what TestAutoscaleSeveralGPUTypes sees of the
// cluster from outside, sample by sample: the API's status, nodes and
// jobs, and the agent processes.
type typedScaleWatch struct {
	began time.Time
	// managed are the machines the status's autoscale section named;
	// added the agents of the provider's directory seen running, with
	// their command lines; typed the GPU type each node registered with.
	managed map[string]bool
	added   map[string]string
	typed   map[string]string
	// ranOn are the jobs placed on each node; policies the round
	// policies the status reported.
	ranOn    map[string]map[string]bool
	policies map[string]bool
	// firstAsked and firstA100 are when (since began) the status first
	// named a machine and an a100 node first registered; t4NotAlive
	// counts the samples that listed the t4 node suspect or dead.
	firstAsked, firstA100 time.Duration
	samples, t4NotAlive   int
	// peak is the most added agents seen running at once.
	peak     int
	problems []string
}

func (w *typedScaleWatch) problem(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); !slices.Contains(w.problems, msg) {
		w.problems = append(w.problems, msg)
	}
}

// sample reads the leader's status, nodes and jobs and the running agent
// processes once; it reports whether the cluster is back to the t4 agent
// alone (no machine running or managed, no added node alive) and how many
// jobs completed.
func (w *typedScaleWatch) sample(ctx context.Context, c *launch.Cluster, cl *launch.Client) (alone bool, completed int) {
	now := time.Since(w.began)
	t4 := c.Agents[0]
	if !t4.Running() {
		w.problem("the t4 agent's process is gone at %v", now.Round(time.Millisecond))
	}
	running := provider.Running(c.AutoscaleDir())
	w.peak = max(w.peak, len(running))
	for _, name := range running {
		if _, ok := w.added[name]; !ok {
			b, _ := os.ReadFile(filepath.Join("/proc", pidOf(c.AutoscaleDir(), name), "cmdline"))
			w.added[name] = strings.ReplaceAll(string(b), "\x00", " ")
		}
	}
	st, err := cl.StatusAny(ctx)
	if err != nil || st.Stale {
		return false, 0
	}
	w.samples++
	machines := 0
	if st.Autoscale != nil {
		for _, m := range st.Autoscale.Machines {
			machines++
			w.managed[m.Name] = true
			if w.firstAsked == 0 {
				w.firstAsked = now
			}
			if m.Name == t4.ID {
				w.problem("the autoscaler manages the t4 agent: %+v", m)
			}
		}
	}
	if st.LastRound != nil && st.LastRound.Policy != "" {
		w.policies[st.LastRound.Policy] = true
	}
	leader := c.Member(st.Leader)
	if leader == nil {
		return false, 0
	}
	ns, err := cl.Nodes(ctx, leader, 5*time.Second)
	if err != nil {
		return false, 0
	}
	sawT4, addedAlive := false, 0
	for _, n := range ns {
		if n.ID == t4.ID {
			sawT4 = true
			// Gossip may suspect a node of a loaded machine for a moment:
			// that is not the autoscaler's doing, and is counted only.
			if n.Health == "left" || n.GPUType != "t4" || n.GPUs != 4 {
				w.problem("the t4 agent is listed as %+v at %v", n, now.Round(time.Millisecond))
			} else if n.Health != "alive" {
				w.t4NotAlive++
			}
			continue
		}
		if n.Health == "alive" {
			addedAlive++
		}
		if _, ok := w.typed[n.ID]; !ok {
			w.typed[n.ID] = n.GPUType
			if n.GPUType == "a100" && w.firstA100 == 0 {
				w.firstA100 = now
			}
		}
		if n.GPUType != "a100" || n.GPUs != 4 {
			w.problem("node %s registered as %q with %d GPUs, want a100 with 4", n.ID, n.GPUType, n.GPUs)
		}
	}
	if !sawT4 {
		w.problem("the t4 agent is not listed at %v", now.Round(time.Millisecond))
	}
	js, stale, err := cl.JobsAny(ctx)
	if err != nil || stale {
		return false, 0
	}
	for _, j := range js {
		switch j.State {
		case "completed":
			completed++
		case "failed", "cancelled":
			w.problem("job %s %s: %s", j.ID, j.State, j.Reason)
		}
		for _, p := range j.Placement {
			if p.Node != t4.ID && p.GPUType != "a100" {
				w.problem("job %s placed on %s as %q", j.ID, p.Node, p.GPUType)
			}
			if w.ranOn[p.Node] == nil {
				w.ranOn[p.Node] = map[string]bool{}
			}
			w.ranOn[p.Node][j.ID] = true
		}
	}
	return len(running) == 0 && machines == 0 && addedAlive == 0, completed
}

// pidOf is the pid the local provider wrote for machine name ("0" if none).
func pidOf(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name, "pid"))
	if err != nil {
		return "0"
	}
	return strings.TrimSpace(string(b))
}

// Autoscaling a cluster of several GPU types through real processes: a
// secured cluster (TLS, encrypted gossip, tokens) with one t4 agent the
// autoscaler did not add, servers running `--autoscale local
// --node-gpu-type a100`, and jobs that would use more GPUs than the t4
// node has. Observed from outside, every 200 ms: the API's autoscale
// section, nodes and placements, the agents' processes (their command
// lines) and, at the end, their own logs. The autoscaler adds machines
// that register as a100 nodes and run jobs; the t4 agent is never
// managed, drained or removed; once the jobs complete the added machines
// are removed (their processes gone, the nodes no longer alive); no
// process of the run is left once it stops.
func TestAutoscaleSeveralGPUTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a multi-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	began := time.Now()
	c := startCluster(ctx, t, launch.Options{Dir: dir, Servers: 3, Agents: 1,
		GPUsPerAgent: 4, GPUTypes: []string{"t4"}, TimeScale: 300,
		Autoscale: &launch.Autoscale{MinNodes: 1, MaxNodes: 3, BootDelay: time.Second, ScaleDownDelay: 2 * time.Second,
			JoinTimeout: time.Minute, GPUType: "a100"}})
	defer c.finish()
	t.Logf("cluster up after %v", time.Since(began).Round(time.Millisecond))
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	jobs := []string{"cifar10-0", "cifar10-1", "cifar10-2", "cifar10-3"}
	for _, name := range jobs {
		spec, err := launch.Job{Name: name, App: "cifar10"}.Spec(cat, 16)
		if err != nil {
			t.Fatal(err)
		}
		if a := cl.SubmitAny(ctx, name, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
			t.Fatalf("submitting %s: %s", name, a.Error())
		}
	}
	w := &typedScaleWatch{began: time.Now(), managed: map[string]bool{}, added: map[string]string{}, typed: map[string]string{},
		ranOn: map[string]map[string]bool{}, policies: map[string]bool{}}
	var done, shrunk time.Duration
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		alone, completed := w.sample(ctx, c.Cluster, cl)
		if done == 0 && completed == len(jobs) {
			done = time.Since(w.began)
		}
		if done > 0 && alone {
			shrunk = time.Since(w.began)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("after 3 minutes: %d of %d jobs completed, back to the t4 agent alone: %v; agents running %v, managed %v",
				completed, len(jobs), alone, provider.Running(c.AutoscaleDir()), w.managed)
		}
	}
	t.Logf("%d samples (the t4 node not alive in %d); at most %d agents added at once; first machine asked for at %v, first a100 node at %v, jobs completed at %v, back to the t4 agent at %v",
		w.samples, w.t4NotAlive, w.peak, w.firstAsked.Round(time.Millisecond), w.firstA100.Round(time.Millisecond), done.Round(time.Millisecond), shrunk.Round(time.Millisecond))
	for _, p := range w.problems {
		t.Error(p)
	}
	// --max-nodes 3 counts the t4 node: at most two machines at once.
	if w.peak > 2 {
		t.Errorf("%d added agents ran at once, above --max-nodes 3 with the t4 node", w.peak)
	}
	if !w.policies["pollux-het-autoscale"] {
		t.Errorf("the rounds ran %v, never pollux-het-autoscale", w.policies)
	}
	// Machines were added, each an a100 node started as one and running
	// jobs; the ones that joined are the ones the provider started.
	if len(w.added) == 0 {
		t.Fatal("the autoscaler started no agent")
	}
	usedAdded := 0
	for name, cmdline := range w.added {
		if !w.managed[name] {
			t.Errorf("agent %s runs but the status never named it", name)
		}
		if w.typed[name] != "a100" {
			t.Errorf("agent %s registered as %q, want a100", name, w.typed[name])
		}
		if !strings.Contains(cmdline, " --gpu-type a100") {
			t.Errorf("agent %s runs as %q, without --gpu-type a100", name, cmdline)
		}
		// Its ready line (the provider keeps its stdout) and its own
		// log: one start, declaring a100, and the workers it ran.
		var ready agent.Ready
		if b, err := os.ReadFile(filepath.Join(c.AutoscaleDir(), name, "stdout")); err != nil || json.Unmarshal(b, &ready) != nil ||
			ready.Name != name || ready.GPUType != "a100" || ready.GPUs != 4 {
			t.Errorf("agent %s's ready line %q (%v): want %s with 4 a100 GPUs", name, b, err, name)
		}
		b, err := os.ReadFile(filepath.Join(c.AutoscaleDir(), name, "agent.log"))
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		if n := strings.Count(log, "agent: ready"); n != 1 || !strings.Contains(log, "gpu_type=a100") {
			t.Errorf("agent %s's log: %d starts, a100 declared %v:\n%s", name, n, strings.Contains(log, "gpu_type=a100"), tail(b, 2000))
		}
		// Jobs ran there: the API placed them on it and its own log shows
		// their workers started (a placement a later round replaced before
		// the workers started shows none).
		var ran []string
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "msg=\"node: worker started\" agent="+name+" node="+name+" job=") {
				_, job, _ := strings.Cut(line, " job=")
				if job = strings.Fields(job)[0]; w.ranOn[name][job] && !slices.Contains(ran, job) {
					ran = append(ran, job)
				}
			}
		}
		t.Logf("%s: placed %v by the API, workers of %v started in its log", name, w.ranOn[name], ran)
		if len(ran) > 0 {
			usedAdded++
		}
	}
	if usedAdded == 0 {
		t.Errorf("no job ran on an added a100 machine (placed by the API and its workers started in the machine's log): placements %v", w.ranOn)
	}
	for name := range w.typed {
		if _, ok := w.added[name]; !ok {
			t.Errorf("node %s joined but the provider never ran it", name)
		}
	}
	// The t4 agent was never drained or removed: no server asked for it
	// to be removed, and its process ran throughout (checked per sample).
	for _, m := range c.Servers {
		b, _ := os.ReadFile(m.Log)
		for _, line := range strings.Split(string(b), "\n") {
			for _, what := range []string{"allocator: cluster size decided", "allocator: machine", "allocator: asking the provider", "allocator: autoscaling decides no"} {
				if strings.Contains(line, what) {
					t.Log(line)
				}
			}
			if strings.Contains(line, "node="+c.Agents[0].ID+" ") && strings.Contains(line, "allocator: ") &&
				(strings.Contains(line, "remove") || strings.Contains(line, "drain")) {
				t.Errorf("%s: %s", m.ID, line)
			}
		}
	}
	// Everything stops: the servers, the agents (added or not) and the
	// workers.
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
	if left := provider.Running(c.AutoscaleDir()); len(left) > 0 {
		t.Errorf("agents left running: %v", left)
	}
	for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
		if m.Running() {
			t.Errorf("%s still runs", m.ID)
		}
	}
	for _, job := range jobs {
		if pids := workersIn(dir, "POLLUX_JOB_ID="+job); len(pids) > 0 {
			t.Errorf("workers of %s left: %v", job, pids)
		}
	}
	noProcessesUnder(t, dir)
	t.Logf("wall time %v", time.Since(began).Round(time.Millisecond))
}
