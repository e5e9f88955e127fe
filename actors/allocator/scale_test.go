package allocator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pollux/actors/allocator"
	"pollux/actors/node"
	"pollux/cluster"
	"pollux/cluster/provider"
	"pollux/consensus/state"
	"pollux/internal/poll"
	"pollux/optimizer"
	"pollux/testbed/emulator"
)

// fakeProvider adds machines as in-process nodes of the test cluster
// and counts every call, as an observer outside the allocator: a
// machine asked for twice shows here whatever the allocator believes.
type fakeProvider struct {
	c       *tcluster
	mu      sync.Mutex
	adds    map[string]int
	removes map[string]int
	nodes   map[string]*node.Node
	hold    chan struct{} // if set, Add waits for it (a slow boot)
	asked   chan string   // every Add announces itself
	ghost   bool          // Add succeeds but the machine never joins
}

func newFakeProvider(c *tcluster) *fakeProvider {
	return &fakeProvider{c: c, adds: map[string]int{}, removes: map[string]int{}, nodes: map[string]*node.Node{}, asked: make(chan string, 64)}
}

func (p *fakeProvider) Add(ctx context.Context, name string) error {
	p.mu.Lock()
	p.adds[name]++
	hold, ghost := p.hold, p.ghost
	p.mu.Unlock()
	select {
	case p.asked <- name:
	default:
	}
	if ghost {
		return nil
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Idempotent, as providers are: a machine that runs is not started
	// again (the count above still shows the second call).
	p.mu.Lock()
	exists := p.nodes[name] != nil
	p.mu.Unlock()
	if exists {
		return nil
	}
	nd, err := p.c.startNode(name)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.nodes[name] = nd
	p.mu.Unlock()
	return nil
}

func (p *fakeProvider) Remove(ctx context.Context, name string) error {
	p.mu.Lock()
	p.removes[name]++
	nd := p.nodes[name]
	delete(p.nodes, name)
	p.mu.Unlock()
	if nd == nil {
		return nil
	}
	p.c.mu.Lock()
	p.c.agents = slices.DeleteFunc(p.c.agents, func(m cluster.Member) bool { return m.Name == name })
	p.c.mu.Unlock()
	return nd.Stop(10 * time.Second)
}

func (p *fakeProvider) counts() (adds, removes map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps(p.adds), maps(p.removes)
}

func maps(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func autoscaleOpts(p **fakeProvider, maxNodes int, join time.Duration) func(c *tcluster) *allocator.Autoscale {
	return func(c *tcluster) *allocator.Autoscale {
		if *p == nil {
			*p = newFakeProvider(c)
		}
		return &allocator.Autoscale{Settings: optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MinNodes: 1, MaxNodes: maxNodes},
			Provider: *p, NodeCost: 3.9, JoinTimeout: join}
	}
}

// The leader dies while the provider boots the machine it asked for:
// the new leader finds the request committed, waits for the machine to
// join instead of asking for it again, and records it up. No machine is
// ever asked for twice.
func TestAutoscaleFailoverDuringScaleUpAsksOnce(t *testing.T) {
	var p *fakeProvider
	c := newTCluster(t, clusterOpts{servers: 3, nodes: 1, gpus: 4, timeScale: 100, autoscale: autoscaleOpts(&p, 3, 10*time.Minute)})
	hold := make(chan struct{})
	p.mu.Lock()
	p.hold = hold
	p.mu.Unlock()
	for i := range 3 {
		c.submit(fmt.Sprintf("j%d", i), "cifar10", 8)
	}
	var first string
	select {
	case first = <-p.asked:
	case <-time.After(60 * time.Second):
		t.Fatal("no scale-up within 60 s")
	}
	old := c.leader()
	st := old.srv.LocalState()
	if m := st.Scale.Nodes[first]; m == nil || m.Phase != state.ScaleBooting {
		t.Fatalf("the provider was asked for %s before the decision was committed: %+v", first, st.Scale)
	}
	c.kill(old)
	next := c.leader()
	// Let the new leader run rounds while the machine still boots.
	poll.Until(t, 20*time.Second, "rounds of the new leader", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, r := range c.rounds {
			if r.Term > st.Allocation.Term && r.Committed {
				n++
			}
		}
		return n >= 3
	})
	close(hold)
	// Up at some point (with the jobs done it may be drained soon after).
	poll.Until(t, 60*time.Second, first+" up", func() bool {
		m := next.srv.LocalState().Scale.Nodes[first]
		return m != nil && m.Phase != state.ScaleBooting
	})
	c.waitRounds("more rounds, more chances to ask twice", c.roundMark(), 5, nil)
	adds, _ := p.counts()
	for name, n := range adds {
		if n != 1 {
			t.Errorf("the provider was asked for %s %d times", name, n)
		}
	}
	if adds[first] != 1 {
		t.Errorf("adds %v", adds)
	}
	// Every machine asked for is managed under its own name.
	sc := next.srv.LocalState().Scale
	if sc.Seq < uint64(len(adds)) {
		t.Errorf("state asked for %d machines, the provider saw %d", sc.Seq, len(adds))
	}
}

// A machine the autoscaler drains has its jobs moved: they stop with a
// checkpoint and resume from it elsewhere (the checkpoint files, read
// from outside, never go back), and the machine is removed only once it
// runs nothing.
func TestAutoscaleDrainMovesJobsFromCheckpoints(t *testing.T) {
	var p *fakeProvider
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 4, timeScale: 300, autoscale: autoscaleOpts(&p, 2, time.Minute)})
	jobs := []string{"a", "b", "c"}
	for _, id := range jobs {
		c.submit(id, "cifar10", 8)
	}
	// Watch every job's checkpoint file from outside.
	type sample struct {
		inc      uint64
		progress float64
	}
	var mu sync.Mutex
	samples := map[string][]sample{}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			for _, id := range jobs {
				ck, err := emulator.Restore(filepath.Join(c.root, id), id)
				if err != nil || ck.Incarnation == 0 {
					continue
				}
				mu.Lock()
				s := samples[id]
				if len(s) == 0 || s[len(s)-1] != (sample{ck.Incarnation, ck.Progress}) {
					samples[id] = append(s, sample{ck.Incarnation, ck.Progress})
				}
				mu.Unlock()
			}
		}
	}()
	l := c.leader()
	var machine string
	poll.Until(t, 60*time.Second, "a machine up running a job", func() bool {
		st := l.srv.LocalState()
		for name, m := range st.Scale.Nodes {
			if m.Phase == state.ScaleUp && st.UsedGPUs()[name] > 0 {
				machine = name
				return true
			}
		}
		return false
	})
	// Which jobs run there, and let them checkpoint at least once.
	var moved []string
	st := l.srv.LocalState()
	for id, slots := range st.Allocation.Jobs {
		if slices.ContainsFunc(slots, func(s state.Slot) bool { return s.Node == machine }) {
			moved = append(moved, id)
		}
	}
	poll.Until(t, 60*time.Second, "a checkpoint of every job on "+machine, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range moved {
			if !slices.ContainsFunc(samples[id], func(s sample) bool { return s.inc == st.Jobs[id].Incarnation }) {
				return false
			}
		}
		return true
	})
	// Drain it as the leader decides (its term; the decision is what the
	// policy would commit when the utility falls).
	term, _ := l.srv.Leadership()
	if err := l.srv.ApplyCommand(ctxT(t), &state.ScaleDecision{Term: term, Time: float64(time.Now().UnixNano()) / 1e9,
		Desired: 1, Drain: []string{machine}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, machine+" removed", func() bool {
		_, removes := p.counts()
		return removes[machine] > 0
	})
	// When it was removed, nothing of it was placed.
	for id, slots := range l.srv.LocalState().Allocation.Jobs {
		if slices.ContainsFunc(slots, func(s state.Slot) bool { return s.Node == machine }) {
			t.Errorf("job %s still placed on removed %s", id, machine)
		}
	}
	final := c.waitAll(120*time.Second, jobs...)
	for _, id := range jobs {
		if final.Jobs[id].State != state.Completed {
			t.Errorf("job %s %v", id, final.Jobs[id].State)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range moved {
		s := samples[id]
		for i := 1; i < len(s); i++ {
			if s[i].progress < s[i-1].progress {
				t.Errorf("job %s went back from %v (incarnation %d) to %v (incarnation %d): not resumed from its checkpoint",
					id, s[i-1].progress, s[i-1].inc, s[i].progress, s[i].inc)
			}
		}
		// Its checkpoints span incarnations before and after the drain.
		incs := map[uint64]bool{}
		for _, x := range s {
			incs[x.inc] = true
		}
		if len(incs) < 2 {
			t.Errorf("job %s on the drained machine checkpointed in %d incarnations: %v", id, len(incs), s)
		}
	}
	if len(moved) == 0 {
		t.Fatal("no job ran on the drained machine")
	}
}

// A provider command that hangs is killed at its timeout, retried, and
// the machine given up: removed through the provider, forgotten by the
// state, never registered; the cluster stays as it was (its one node
// runs the jobs) and a later decision asks for a machine of a new name.
func TestAutoscaleHangingProviderLeavesClusterAsItWas(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 4, timeScale: 300, autoscale: func(c *tcluster) *allocator.Autoscale {
		x, err := provider.NewExec(provider.Exec{
			AddCommand:    []string{"/bin/sh", "-c", `echo "add $0" >> ` + calls + `; sleep 30`},
			RemoveCommand: []string{"/bin/sh", "-c", `echo "remove $0" >> ` + calls},
			Timeout:       200 * time.Millisecond, Attempts: 2, Backoff: 10 * time.Millisecond, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		return &allocator.Autoscale{Settings: optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MinNodes: 1, MaxNodes: 3},
			Provider: x, JoinTimeout: time.Minute}
	}})
	for i := range 3 {
		c.submit(fmt.Sprintf("j%d", i), "cifar10", 8)
	}
	l := c.leader()
	poll.Until(t, 60*time.Second, "a machine given up", func() bool {
		b, _ := os.ReadFile(calls)
		return strings.Contains(string(b), "remove auto-1")
	})
	b, _ := os.ReadFile(calls)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	// Two attempts to add auto-1, both killed at the timeout, then its removal.
	var first []string
	for _, line := range lines {
		if strings.HasSuffix(line, " auto-1") {
			first = append(first, line)
		}
	}
	if !slices.Equal(first[:min(3, len(first))], []string{"add auto-1", "add auto-1", "remove auto-1"}) {
		t.Errorf("calls for auto-1: %q", first)
	}
	poll.Until(t, 10*time.Second, "auto-1 forgotten", func() bool { return l.srv.LocalState().Scale.Nodes["auto-1"] == nil })
	st := l.srv.LocalState()
	if st.Nodes["auto-1"] != nil {
		t.Errorf("auto-1 registered: %+v", st.Nodes["auto-1"])
	}
	// The jobs complete on the one node.
	final := c.waitAll(120*time.Second, "j0", "j1", "j2")
	for id, j := range final.Jobs {
		if j.State != state.Completed {
			t.Errorf("job %s %v", id, j.State)
		}
	}
	for _, n := range final.Nodes {
		if n.ID != "n0" && n.Health == state.Alive {
			t.Errorf("node %s joined", n.ID)
		}
	}
}

// A machine the provider says it added but that never joins is given up
// after the join timeout: removed through the provider (not paid for
// after), forgotten, and never asked for again; the next machines have
// new names.
func TestAutoscaleMachineThatNeverJoinsIsGivenUp(t *testing.T) {
	var p *fakeProvider
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 4, timeScale: 100, autoscale: autoscaleOpts(&p, 3, 2*time.Second)})
	p.mu.Lock()
	p.ghost = true
	p.mu.Unlock()
	for i := range 3 {
		c.submit(fmt.Sprintf("j%d", i), "cifar10", 8)
	}
	l := c.leader()
	var asked []string
	poll.Until(t, 60*time.Second, "a machine given up and another asked for", func() bool {
		adds, removes := p.counts()
		asked = asked[:0]
		for name := range adds {
			asked = append(asked, name)
		}
		return removes["auto-1"] > 0 && len(adds) > 1
	})
	adds, removes := p.counts()
	for name, n := range adds {
		if n != 1 {
			t.Errorf("%s asked for %d times", name, n)
		}
	}
	if removes["auto-1"] != 1 {
		t.Errorf("auto-1 removed %d times", removes["auto-1"])
	}
	poll.Until(t, 10*time.Second, "auto-1 forgotten", func() bool { return l.srv.LocalState().Scale.Nodes["auto-1"] == nil })
	st := l.srv.LocalState()
	// Seq counts every machine asked for: none is counted twice.
	if st.Scale.Seq < uint64(len(adds)) || st.Scale.Nodes["auto-1"] != nil {
		t.Errorf("state %+v after asking for %v", st.Scale, asked)
	}
}

// With a scale-down delay, the machines the jobs needed stay after the
// jobs are gone until the desired size has been lower for that long:
// the provider is asked to remove nothing meanwhile. (Without one, the
// tests above see machines removed at the next rounds.)
func TestAutoscaleScaleDownDelayHoldsMachines(t *testing.T) {
	var p *fakeProvider
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 4, timeScale: 300, autoscale: func(c *tcluster) *allocator.Autoscale {
		as := autoscaleOpts(&p, 3, time.Minute)(c)
		as.ScaleDownDelay = time.Hour
		return as
	}})
	jobs := []string{"a", "b", "c"}
	for _, id := range jobs {
		c.submit(id, "cifar10", 8)
	}
	l := c.leader()
	poll.Until(t, 60*time.Second, "a machine up", func() bool {
		for _, m := range l.srv.LocalState().Scale.Nodes {
			if m.Phase == state.ScaleUp {
				return true
			}
		}
		return false
	})
	c.waitAll(120*time.Second, jobs...)
	c.waitRounds("15 rounds with nothing to run", c.roundMark(), 15, nil)
	adds, removes := p.counts()
	if len(removes) != 0 {
		t.Errorf("machines removed within the delay: %v (added %v)", removes, adds)
	}
	up := 0
	for _, m := range l.srv.LocalState().Scale.Nodes {
		if m.Phase == state.ScaleUp {
			up++
		}
	}
	if up == 0 {
		t.Errorf("no machine up after the jobs: %+v", l.srv.LocalState().Scale)
	}
}

// On a cluster of a t4 node and an a100 node whose node template is an
// a100, jobs that would use more GPUs make the autoscaler (pollux-het's
// size decision) ask for machines, which join as a100 nodes (the
// provider starts machines of the template's type, as an operator
// configures one instance type); the other type's node stays.
func TestAutoscaleSeveralGPUTypesGrowsByTheTemplateType(t *testing.T) {
	var p *fakeProvider
	types := map[string]string{"n0": "t4", "n1": "a100"}
	for i := range 8 {
		types[allocator.MachineName("auto", uint64(i+1))] = "a100"
	}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 2, gpus: 4, timeScale: 300, gpuTypes: types, slower: map[string]float64{"t4": 3},
		autoscale: func(c *tcluster) *allocator.Autoscale {
			as := autoscaleOpts(&p, 4, time.Minute)(c)
			as.Settings.Template.Type = "a100"
			return as
		}})
	jobs := []string{"a", "b", "c", "d"}
	for _, id := range jobs {
		c.submit(id, "cifar10", 8)
	}
	l := c.leader()
	var up string
	poll.Until(t, 60*time.Second, "a machine up", func() bool {
		for name, m := range l.srv.LocalState().Scale.Nodes {
			if m.Phase == state.ScaleUp {
				up = name
				return true
			}
		}
		return false
	})
	st := l.srv.LocalState()
	if n := st.Nodes[up]; n == nil || n.GPUType != "a100" {
		t.Fatalf("machine %s joined as %+v, want an a100 node", up, n)
	}
	if n := st.Nodes["n0"]; n == nil || n.Health != state.Alive {
		t.Fatalf("the t4 node %+v is gone", n)
	}
	c.mu.Lock()
	policies := map[string]int{}
	for _, r := range c.rounds {
		policies[r.Policy]++
	}
	c.mu.Unlock()
	if policies["pollux-het-autoscale"] == 0 {
		t.Errorf("rounds ran %v, none pollux-het-autoscale", policies)
	}
	c.waitAll(120*time.Second, jobs...)
	adds, _ := p.counts()
	for name, n := range adds {
		if n != 1 {
			t.Errorf("the provider was asked for %s %d times", name, n)
		}
	}
}

// The same cluster with a template of no GPU type: the rounds run
// pollux-het and decide no size (the reason is logged), so the provider
// is asked for nothing, whatever the jobs would use; the jobs complete on
// the nodes there are.
func TestAutoscaleSeveralGPUTypesWithoutTemplateTypeDecidesNoSize(t *testing.T) {
	var p *fakeProvider
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 2, gpus: 4, timeScale: 300, gpuTypes: map[string]string{"n0": "t4", "n1": "a100"},
		slower: map[string]float64{"t4": 3}, autoscale: autoscaleOpts(&p, 4, time.Minute)})
	jobs := []string{"a", "b", "c", "d"}
	for _, id := range jobs {
		c.submit(id, "cifar10", 8)
	}
	poll.Until(t, 60*time.Second, "15 rounds placing jobs", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, r := range c.rounds {
			if r.Committed && r.Jobs > 0 {
				n++
				if r.Policy != "pollux-het" {
					t.Errorf("a round on two types ran %s", r.Policy)
				}
			}
		}
		return n >= 15
	})
	if adds, _ := p.counts(); len(adds) != 0 {
		t.Fatalf("the provider was asked for %v", adds)
	}
	c.waitAll(120*time.Second, jobs...)
}
