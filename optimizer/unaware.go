package optimizer

import (
	"fmt"
	"slices"
	"strconv"
)

// DefaultTypeOrder is the order in which PolluxUnaware keeps GPU types a
// job got equally many GPUs of (Sia's artifact: A100 first, T4 last);
// types not listed come after, by name.
var DefaultTypeOrder = []string{"dgx-ext", "dgx", "azure", "quad", "rtx", "aws"}

// PolluxUnaware is Pollux blind to GPU types, as Sia's artifact runs it on
// a heterogeneous cluster: every node is cut into virtual nodes of the
// smallest node size (an 8-GPU node is two 4-GPU ones), Pollux allocates
// the virtual cluster with each job's single model (fitted on every
// measurement whatever the type), and a job whose allocation spans several
// types keeps only the GPUs of the type it got most of (ties: TypeOrder),
// dropping the others. The virtual allocation after that repair is the
// next round's current allocation.
type PolluxUnaware struct {
	Inner *Pollux
	// TypeOrder breaks ties between types (nil: DefaultTypeOrder).
	TypeOrder []string
}

// NewPolluxUnaware returns the policy with Pollux's defaults, its search
// started from the previous round's population alone, as the artifact's
// (Pollux.PreviousOnly).
func NewPolluxUnaware() *PolluxUnaware {
	inner := NewPollux()
	inner.PreviousOnly = true
	return &PolluxUnaware{Inner: inner}
}

// Name implements Policy.
func (p *PolluxUnaware) Name() string { return "pollux-unaware" }

// GPUTypeAware implements TypeAware: the policy runs on a cluster of
// several types, keeping each job on one.
func (p *PolluxUnaware) GPUTypeAware() {}

// Allocate implements Policy.
func (p *PolluxUnaware) Allocate(snap *Snapshot, prev *State) (Result, error) {
	if snap == nil {
		return Result{}, fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	tp, err := check(snap)
	if err != nil {
		return Result{}, err
	}
	size := 0
	for _, n := range snap.Nodes {
		if n.GPUs > 0 && (size == 0 || n.GPUs < size) {
			size = n.GPUs
		}
	}
	// Virtual nodes: every node split into GPUs/size parts, in order.
	var vnodes []Node
	var real []int
	first := make([]int, len(snap.Nodes))
	for n, node := range snap.Nodes {
		first[n] = len(vnodes)
		parts := node.GPUs / size
		for i := 0; i < parts; i++ {
			vnodes = append(vnodes, Node{ID: node.ID + "/" + strconv.Itoa(i), GPUs: size, Topology: node.Topology})
			real = append(real, n)
		}
	}
	inner := &Snapshot{Nodes: vnodes, Seed: snap.Seed, Now: snap.Now, Jobs: make([]Job, len(snap.Jobs)),
		Levels: snap.Levels}
	used := make([]int, len(vnodes))
	for j := range snap.Jobs {
		job := snap.Jobs[j]
		job.Current = p.virtualCurrent(&job, prev, size, first, real, used)
		job.TypeModels = nil
		inner.Jobs[j] = job
	}
	res, err := p.Inner.Allocate(inner, prev)
	if err != nil {
		return Result{}, err
	}
	out := Result{Placements: make([]Placement, len(snap.Jobs)), Diagnostics: res.Diagnostics}
	virtual := map[string]Placement{}
	for j, vpl := range res.Placements {
		vpl = p.keepOneType(snap, vpl, real)
		virtual[snap.Jobs[j].ID] = vpl
		var pl Placement
		for _, nc := range vpl {
			pl = append(pl, NodeCount{Node: real[nc.Node], Count: nc.Count})
		}
		out.Placements[j] = normalize(pl)
	}
	holdViolations(snap, tp, &out)
	if res.State != nil {
		st := *res.State
		st.Virtual = virtual
		out.State = &st
	}
	return out, nil
}

// virtualCurrent is a job's current allocation on the virtual nodes (of
// size GPUs): the previous round's virtual placement when it still matches
// the real one, else the real one spread over each node's virtual nodes in
// order.
func (p *PolluxUnaware) virtualCurrent(job *Job, prev *State, size int, first, real []int, used []int) Placement {
	cur := normalize(job.Current)
	if len(cur) == 0 {
		return nil
	}
	if prev != nil {
		if v, ok := prev.Virtual[job.ID]; ok {
			var back Placement
			valid := true
			for _, nc := range v {
				if nc.Node < 0 || nc.Node >= len(real) {
					valid = false
					break
				}
				back = append(back, NodeCount{Node: real[nc.Node], Count: nc.Count})
			}
			if valid && normalize(back).Equal(cur) {
				for _, nc := range v {
					used[nc.Node] += nc.Count
				}
				return v
			}
		}
	}
	var out Placement
	for _, nc := range cur {
		left := nc.Count
		for v := first[nc.Node]; v < len(real) && real[v] == nc.Node && left > 0; v++ {
			c := min(left, size-used[v])
			if c <= 0 {
				continue
			}
			out = append(out, NodeCount{Node: v, Count: c})
			used[v] += c
			left -= c
		}
	}
	return normalize(out)
}

// keepOneType drops a virtual placement's GPUs outside the GPU type it has
// most GPUs of (ties: the type order).
func (p *PolluxUnaware) keepOneType(snap *Snapshot, vpl Placement, real []int) Placement {
	count := map[string]int{}
	var types []string
	for _, nc := range vpl {
		t := snap.Nodes[real[nc.Node]].Type
		if _, ok := count[t]; !ok {
			types = append(types, t)
		}
		count[t] += nc.Count
	}
	if len(types) <= 1 {
		return vpl
	}
	order := p.TypeOrder
	if order == nil {
		order = DefaultTypeOrder
	}
	rank := func(t string) int {
		if i := slices.Index(order, t); i >= 0 {
			return i
		}
		return len(order)
	}
	best := types[0]
	for _, t := range types[1:] {
		switch {
		case count[t] > count[best]:
			best = t
		case count[t] == count[best] && (rank(t) < rank(best) || rank(t) == rank(best) && t < best):
			best = t
		}
	}
	var out Placement
	for _, nc := range vpl {
		if snap.Nodes[real[nc.Node]].Type == best {
			out = append(out, nc)
		}
	}
	return out
}
