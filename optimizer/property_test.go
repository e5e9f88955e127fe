package optimizer_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"pollux/optimizer"
)

// randomSnapshot is a seeded random round: a cluster of 2 to 40 nodes of
// 1 to 8 GPUs and 1 to 60 jobs, some with min_replicas.
func randomSnapshot(t testing.TB, seed uint64) *optimizer.Snapshot {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	per := 1 + rng.IntN(8)
	gpus := per * (2 + rng.IntN(39))
	snap, err := optimizer.Synthetic(gpus, per, 1+rng.IntN(60), seed)
	if err != nil {
		t.Fatal(err)
	}
	for j := range snap.Jobs {
		job := &snap.Jobs[j]
		if rng.IntN(4) == 0 {
			job.MinReplicas = 1 + rng.IntN(job.MaxReplicas)
		}
		job.Replicas = 1 + rng.IntN(8)
		job.Executed = rng.Float64() * 20000
		job.Oracle = fakeOracle{base: 1 + rng.Float64(), serial: rng.Float64(), iters: rng.Float64() * 1e5}
	}
	return snap
}

// fakeOracle has step time base/k + serial*log(k): diminishing returns.
type fakeOracle struct{ base, serial, iters float64 }

func (o fakeOracle) StepTime(k int) float64 {
	return o.base/float64(k) + o.serial*float64(k-1)*0.01
}
func (o fakeOracle) RemainingIters() float64 { return o.iters }

// checkFeasible checks capacity, one distributed job per node, [min, max]
// or 0, at most MaxJobNodes nodes, and placement shape.
func checkFeasible(t *testing.T, snap *optimizer.Snapshot, alloc []optimizer.Placement, replicasBound func(j int) (lo, hi int)) {
	t.Helper()
	if len(alloc) != len(snap.Jobs) {
		t.Fatalf("%d placements for %d jobs", len(alloc), len(snap.Jobs))
	}
	used := make([]int, len(snap.Nodes))
	dist := make([]int, len(snap.Nodes))
	for j, pl := range alloc {
		for i, nc := range pl {
			if nc.Count <= 0 || nc.Node < 0 || nc.Node >= len(snap.Nodes) || i > 0 && nc.Node <= pl[i-1].Node {
				t.Fatalf("job %d: malformed placement %v", j, pl)
			}
			used[nc.Node] += nc.Count
			if len(pl) > 1 {
				dist[nc.Node]++
			}
		}
		if k := pl.Replicas(); k > 0 {
			lo, hi := replicasBound(j)
			if k < lo || k > hi {
				t.Errorf("job %d: %d replicas outside [%d, %d]", j, k, lo, hi)
			}
		}
		if pl.Nodes() > optimizer.MaxJobNodes {
			t.Errorf("job %d on %d nodes", j, pl.Nodes())
		}
	}
	for n, node := range snap.Nodes {
		if used[n] > node.GPUs {
			t.Errorf("node %d: %d GPUs used of %d", n, used[n], node.GPUs)
		}
		if dist[n] > 1 {
			t.Errorf("node %d hosts %d distributed jobs", n, dist[n])
		}
	}
}

func smallPollux(workers int) *optimizer.Pollux {
	p := optimizer.NewPollux()
	p.Population, p.Generations, p.Workers = 12, 8, workers
	return p
}

func TestPolluxProperties(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			snap := randomSnapshot(t, seed)
			res, err := smallPollux(2).Allocate(snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkFeasible(t, snap, res.Placements, func(j int) (int, int) {
				return snap.Jobs[j].MinReplicas, snap.Jobs[j].MaxReplicas
			})
			obj, err := optimizer.NewObjective(snap, optimizer.DefaultPowerMean)
			if err != nil {
				t.Fatal(err)
			}
			if got := obj.Fitness(res.Placements); got != res.Diagnostics.Fitness {
				t.Errorf("reported fitness %v, objective says %v", res.Diagnostics.Fitness, got)
			}
			// Same seed, same allocation, whatever the number of workers
			// and whether the speedup cache is warm.
			single := smallPollux(1)
			for run := range 2 { // cold, then with a warm speedup cache
				again, err := single.Allocate(snap, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(res.Placements, again.Placements) {
					t.Errorf("run %d: same seed gave different allocations:\n%v\n%v", run, res.Placements, again.Placements)
				}
			}
			// A warm-started next round is feasible too.
			next := *snap
			next.Seed++
			warm, err := smallPollux(2).Allocate(&next, res.State)
			if err != nil {
				t.Fatal(err)
			}
			checkFeasible(t, snap, warm.Placements, func(j int) (int, int) {
				return snap.Jobs[j].MinReplicas, snap.Jobs[j].MaxReplicas
			})
			checkGPUStability(t, snap, res.Placements, warm.Placements)
		})
	}
}

// checkGPUStability assigns GPU ids to a, then to b, and checks that every
// job whose counts did not change keeps the very same GPUs.
func checkGPUStability(t *testing.T, snap *optimizer.Snapshot, a, b []optimizer.Placement) {
	t.Helper()
	ga, err := optimizer.AssignGPUs(snap.Nodes, snap.Jobs, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	gb, err := optimizer.AssignGPUs(snap.Nodes, snap.Jobs, b, ga)
	if err != nil {
		t.Fatal(err)
	}
	for j, job := range snap.Jobs {
		if len(gb[job.ID]) != b[j].Replicas() {
			t.Errorf("job %s: %d GPUs for %d replicas", job.ID, len(gb[job.ID]), b[j].Replicas())
		}
		if a[j].Equal(b[j]) && !reflect.DeepEqual(ga[job.ID], gb[job.ID]) {
			t.Errorf("job %s unchanged %v but moved from %v to %v", job.ID, a[j], ga[job.ID], gb[job.ID])
		}
	}
	seen := map[optimizer.GPU]string{}
	for id, gs := range gb {
		for _, g := range gs {
			if other, dup := seen[g]; dup {
				t.Errorf("GPU %v given to %s and %s", g, other, id)
			}
			seen[g] = id
		}
	}
}

func TestBaselineProperties(t *testing.T) {
	for seed := range uint64(40) {
		snap := randomSnapshot(t, seed)
		for _, p := range []optimizer.Policy{optimizer.Tiresias{}, optimizer.Optimus{}} {
			res, err := p.Allocate(snap, nil)
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, p.Name(), err)
			}
			checkFeasibleBaseline(t, snap, res.Placements, p.Name())
			again, _ := p.Allocate(snap, nil)
			if !reflect.DeepEqual(res.Placements, again.Placements) {
				t.Errorf("seed %d %s: not deterministic", seed, p.Name())
			}
		}
	}
}

// checkFeasibleBaseline checks capacity and sizes (the baselines do not
// apply the distributed-job rule: Tiresias and Optimus never did).
func checkFeasibleBaseline(t *testing.T, snap *optimizer.Snapshot, alloc []optimizer.Placement, name string) {
	t.Helper()
	used := make([]int, len(snap.Nodes))
	for j, pl := range alloc {
		for _, nc := range pl {
			used[nc.Node] += nc.Count
		}
		k := pl.Replicas()
		switch name {
		case "tiresias":
			if k != 0 && k != snap.Jobs[j].Replicas {
				t.Errorf("tiresias: job %d got %d GPUs, fixed size %d", j, k, snap.Jobs[j].Replicas)
			}
		case "optimus":
			if k > snap.Jobs[j].MaxReplicas {
				t.Errorf("optimus: job %d got %d GPUs, max %d", j, k, snap.Jobs[j].MaxReplicas)
			}
		}
	}
	for n, node := range snap.Nodes {
		if used[n] > node.GPUs {
			t.Errorf("%s: node %d over capacity (%d of %d)", name, n, used[n], node.GPUs)
		}
	}
}
