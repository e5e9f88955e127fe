package allocator_test

import (
	"math"
	"testing"
	"time"

	"pollux/consensus/state"
	"pollux/internal/poll"
	"pollux/optimizer/goodput"
	"pollux/testbed/fabric"
)

// crossRackBound and crossRackFloor bound how far the job actor's
// fitted cross-rack term may lie from the emulated network's: 15 % of
// it plus 5 ms.
const (
	crossRackBound = 0.15
	crossRackFloor = 0.005
)

// A live cluster of two racks whose emulated workers share the
// simulator's link model: the job actor learns the cross-rack term from
// its workers' step times alone (the allocator is told no ratio), to
// within crossRackBound and crossRackFloor of the network's true one.
// Once a rack has room again the allocator moves the job into it when
// the uplinks are oversubscribed (the term is large), and leaves it
// across the racks on a non-blocking network (the term is ~0: moving
// would only cost a restart).
//
// The nodes have one GPU each and the job wants exactly two, so where it
// runs is set by the nodes alive: first both of rack 0 (n0, n1: measured
// within one rack), then n0 and rack 1's n2 (across racks), then all
// four.
func TestLiveClusterLearnsTheCrossRackCost(t *testing.T) {
	if testing.Short() {
		t.Skip("a live cluster over three phases")
	}
	for _, tc := range []struct {
		name string
		over float64
		// oneRack: the job ends within one rack; otherwise it stays
		// across them for stayRounds rounds.
		oneRack bool
	}{
		{"oversubscribed 4:1", 4, true},
		{"non-blocking", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) { liveCrossRack(t, tc.over, tc.oneRack) })
	}
}

// stayRounds is how many committed rounds a job that should not move is
// watched for.
const stayRounds = 25

func liveCrossRack(t *testing.T, over float64, oneRack bool) {
	const app = "imagenet"
	net := fabric.Config{Oversubscription: over}
	links, err := fabric.NewLinks(net, []int{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 2, gpus: 1, timeScale: 20, nodeGrace: 300 * time.Millisecond,
		racks: map[string]int{"n0": 0, "n1": 0, "n2": 1, "n3": 1}, links: links})
	// One batch configuration on two GPUs (m = 100, no accumulation):
	// the points within and across racks differ by the network alone.
	c.submitSpec("j", state.JobSpec{Name: "j", App: app, MinReplicas: 2, MaxReplicas: 2,
		Limits: goodput.Limits{InitBatch: 200, MaxBatch: 200, MinLocal: 100, MaxLocal: 100}})

	// The true term: the job alone across the racks, one node in each.
	f, err := fabric.New(net, []int{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	flow := fabric.Flow{0: 1, 1: 1}
	rates, err := f.Rates([]fabric.Flow{flow})
	if err != nil {
		t.Fatal(err)
	}
	bytes, _ := fabric.GradientBytes(app)
	truth := f.Extra(flow, bytes, rates[0]) / goodput.RackShare(2)
	if (truth > 0) != (over > 1) {
		t.Fatalf("the network adds %v across racks at oversubscription %v", truth, over)
	}

	job := func() *state.Job {
		j, _ := c.any().srv.LocalJob("j")
		return j
	}
	measured := func(racks int) func() bool {
		return func() bool {
			j := job()
			if j == nil {
				return false
			}
			for _, e := range j.Profile {
				if e.Nodes == 2 && e.Racks == racks && e.Count >= 3 {
					return true
				}
			}
			return false
		}
	}
	poll.Until(t, 60*time.Second, "measurements within rack 0", measured(0))
	if x := job().Bid.Params.AlphaX; x != 0 {
		t.Fatalf("cross-rack term %v fitted before any measurement across racks", x)
	}

	c.partition("n1", true)
	c.addNode("n2")
	poll.Until(t, 60*time.Second, "measurements across the racks", measured(2))
	var fitted float64
	defer func() {
		if t.Failed() {
			j := job()
			t.Logf("true term %v; job's bid %+v; profile %+v", truth, j.Bid.Params, j.Profile)
		}
	}()
	poll.Until(t, 60*time.Second, "a fitted cross-rack term near the network's", func() bool {
		fitted = job().Bid.Params.AlphaX
		return fitted > 0 && math.Abs(fitted-truth) <= crossRackBound*truth+crossRackFloor
	})
	t.Logf("cross-rack term: fitted %.4g s, true %.4g s", fitted, truth)

	c.partition("n1", false)
	c.addNode("n3")
	rack := map[string]int{"n0": 0, "n1": 0, "n2": 1, "n3": 1}
	within := func() (bool, int) {
		slots := c.any().srv.LocalState().Allocation.Jobs["j"]
		return len(slots) == 2 && rack[slots[0].Node] == rack[slots[1].Node], len(slots)
	}
	if oneRack {
		poll.Until(t, 60*time.Second, "the job placed within one rack", func() bool { ok, _ := within(); return ok })
		return
	}
	poll.Until(t, 30*time.Second, "all four nodes alive", func() bool {
		alive := 0
		for _, n := range c.any().srv.LocalState().Nodes {
			if n.Health == state.Alive {
				alive++
			}
		}
		return alive == 4
	})
	mark := c.roundMark()
	c.waitRounds("rounds with all four nodes", mark, stayRounds, nil)
	if ok, n := within(); ok || n != 2 {
		t.Fatalf("on a non-blocking network the job moved (within one rack %v, %d slots)", ok, n)
	}
}
