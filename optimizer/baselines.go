package optimizer

import (
	"fmt"
	"math"
	"sort"
)

// TiresiasThreshold is the attained service, in GPU-seconds (16
// GPU-hours), at which Tiresias demotes a job to its second queue.
const TiresiasThreshold = 16 * 3600.0

// Tiresias is the two-queue discretised least-attained-service baseline
// (pollux-spec.md section 5) with fixed job sizes: each round it admits,
// queue 0 then queue 1 in submission order, every job whose Replicas fit
// in the GPUs left, and preempts the others. Stateless: prev is ignored
// (docs/policies.md, "The baselines").
type Tiresias struct{}

// Name implements Policy.
func (Tiresias) Name() string { return "tiresias" }

// Allocate implements Policy.
func (Tiresias) Allocate(snap *Snapshot, _ *State) (Result, error) {
	if snap == nil {
		return Result{}, fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	tp, err := check(snap)
	if err != nil {
		return Result{}, err
	}
	jobs := snap.Jobs
	queue := func(j int) int {
		if jobs[j].Executed*float64(jobs[j].Replicas) >= TiresiasThreshold {
			return 1
		}
		return 0
	}
	order := make([]int, len(jobs))
	for j := range order {
		order[j] = j
	}
	sort.SliceStable(order, func(a, b int) bool {
		ja, jb := order[a], order[b]
		if qa, qb := queue(ja), queue(jb); qa != qb {
			return qa < qb
		}
		if jobs[ja].SubmitTime != jobs[jb].SubmitTime {
			return jobs[ja].SubmitTime < jobs[jb].SubmitTime
		}
		return jobs[ja].ID < jobs[jb].ID
	})
	left := snap.TotalGPUs()
	admitted := make([]bool, len(jobs))
	for _, j := range order {
		if k := jobs[j].Replicas; k >= 1 && k <= left {
			admitted[j] = true
			left -= k
		}
	}
	res := Result{Placements: make([]Placement, len(jobs)), Layouts: make([][]int, len(jobs))}
	free := keepCurrent(snap, order, res.Placements, func(j int) bool {
		return admitted[j] && jobs[j].Current.Replicas() == jobs[j].Replicas && !violates(snap, tp, j, jobs[j].Current)
	})
	for _, j := range order {
		if admitted[j] && res.Placements[j] == nil {
			res.Placements[j], res.Layouts[j] = takeMostFreeIn(snap, tp, j, free, jobs[j].Replicas)
		}
	}
	return res, nil
}

// keepCurrent gives every job that keep selects, in order, its current
// placement if that still fits, and returns the GPUs left on each node.
func keepCurrent(snap *Snapshot, order []int, out []Placement, keep func(j int) bool) []int {
	free := make([]int, len(snap.Nodes))
	for n, node := range snap.Nodes {
		free[n] = node.GPUs
	}
	for _, j := range order {
		cur := normalize(snap.Jobs[j].Current)
		if !keep(j) || len(cur) == 0 {
			continue
		}
		fits := true
		for _, nc := range cur {
			fits = fits && nc.Count <= free[nc.Node]
		}
		if !fits {
			continue
		}
		for _, nc := range cur {
			free[nc.Node] -= nc.Count
		}
		out[j] = append(Placement(nil), cur...)
	}
	return free
}

// takeMostFree takes k GPUs, repeatedly as many as needed from the node
// with the most free GPUs (ties to the lowest index), updating free. It
// returns what it could take (less than k only if the cluster is full),
// and the counts in the order the nodes were taken: the artifact builds a
// job's placement tuple in that order, and the tuple decides which
// measured step time applies (placements 142 and 124 differ).
func takeMostFree(free []int, k int) (Placement, []int) {
	var pl Placement
	var layout []int
	for k > 0 {
		best := -1
		for n, f := range free {
			if f > 0 && (best < 0 || f > free[best]) {
				best = n
			}
		}
		if best < 0 {
			break
		}
		c := min(free[best], k)
		free[best] -= c
		k -= c
		pl = append(pl, NodeCount{Node: best, Count: c})
		layout = append(layout, c)
	}
	return normalize(pl), layout
}

// Optimus is the Optimus+Oracle baseline (pollux-spec.md section 5): one
// GPU per job in submission order, then GPUs one at a time to the job
// whose Oracle step time gains most times its remaining iterations.
// Stateless: prev is ignored (docs/policies.md, "The baselines").
type Optimus struct{}

// Name implements Policy.
func (Optimus) Name() string { return "optimus" }

// Allocate implements Policy.
func (Optimus) Allocate(snap *Snapshot, _ *State) (Result, error) {
	if snap == nil {
		return Result{}, fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	tp, err := check(snap)
	if err != nil {
		return Result{}, err
	}
	jobs := snap.Jobs
	order := make([]int, len(jobs))
	for j := range order {
		order[j] = j
		if jobs[j].Oracle == nil {
			return Result{}, fmt.Errorf("%w: %q", ErrNoOracle, jobs[j].ID)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		ja, jb := order[a], order[b]
		if jobs[ja].SubmitTime != jobs[jb].SubmitTime {
			return jobs[ja].SubmitTime < jobs[jb].SubmitTime
		}
		return jobs[ja].ID < jobs[jb].ID
	})
	left := snap.TotalGPUs()
	k := make([]int, len(jobs))
	gain := make([]float64, len(jobs))
	update := func(j int) {
		o := jobs[j].Oracle
		if k[j]+1 > jobs[j].MaxReplicas || left < 1 {
			gain[j] = 0
			return
		}
		g := (o.StepTime(k[j]) - o.StepTime(k[j]+1)) * o.RemainingIters()
		if math.IsNaN(g) {
			g = 0
		}
		gain[j] = g
	}
	for _, j := range order {
		if left < 1 || jobs[j].MaxReplicas < 1 {
			continue
		}
		k[j] = 1
		left--
	}
	for _, j := range order {
		if k[j] > 0 {
			update(j)
		}
	}
	for left > 0 {
		best := -1
		for _, j := range order {
			if gain[j] > 0 && (best < 0 || gain[j] > gain[best]) {
				best = j
			}
		}
		if best < 0 {
			break
		}
		k[best]++
		left--
		update(best)
	}
	res := Result{Placements: make([]Placement, len(jobs)), Layouts: make([][]int, len(jobs))}
	free := keepCurrent(snap, order, res.Placements, func(j int) bool {
		return k[j] > 0 && jobs[j].Current.Replicas() == k[j] && !violates(snap, tp, j, jobs[j].Current)
	})
	byK := append([]int(nil), order...)
	sort.SliceStable(byK, func(a, b int) bool { return k[byK[a]] < k[byK[b]] })
	for _, j := range byK {
		if k[j] > 0 && res.Placements[j] == nil {
			res.Placements[j], res.Layouts[j] = takeMostFreeIn(snap, tp, j, free, k[j])
		}
	}
	return res, nil
}
