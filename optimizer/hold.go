package optimizer

// Violations lists, in order, the indexes j of placements[j] that break
// job j's constraints: GPUs outside its replica bounds, a node of another
// GPU type than the job's GPUType, or domains spanned at its required
// topology level.
func Violations(snap *Snapshot, placements []Placement) ([]int, error) {
	tp, err := buildTopo(snap)
	if err != nil {
		return nil, err
	}
	var out []int
	for j, pl := range placements {
		if j < len(snap.Jobs) && len(pl) > 0 && breaks(snap, tp, j, pl) {
			out = append(out, j)
		}
	}
	return out, nil
}

// HoldConstraints empties the placements of res that break their job's
// constraints (Violations), whatever policy made them: such a job waits
// this round rather than run where it must not. It returns the indexes
// of the jobs held. Policies aware of the constraints never need it; it
// guards the others.
func HoldConstraints(snap *Snapshot, res *Result) ([]int, error) {
	held, err := Violations(snap, res.Placements)
	if err != nil {
		return nil, err
	}
	for _, j := range held {
		res.Placements[j] = nil
		if j < len(res.Layouts) {
			res.Layouts[j] = nil
		}
	}
	return held, nil
}

// breaks reports whether placement pl of job j breaks the job's replica
// bounds, GPU type or required topology.
func breaks(snap *Snapshot, tp *topo, j int, pl Placement) bool {
	if k := pl.Replicas(); k < snap.Jobs[j].MinReplicas || k > max(snap.Jobs[j].MaxReplicas, 1) {
		return true
	}
	if t := snap.Jobs[j].GPUType; t != "" {
		for _, nc := range pl {
			if nc.Node < 0 || nc.Node >= len(snap.Nodes) || snap.Nodes[nc.Node].Type != t {
				return true
			}
		}
	}
	return violates(snap, tp, j, pl)
}

// capRequired drops from item the options of job j that could never be
// placed because its topology is required and they ask more GPUs of a
// type than one domain of the required level has: a type-aware policy
// would choose such a count, fail to place it, and leave the job waiting
// round after round.
func capRequired(snap *Snapshot, tp *topo, types []typeInfo, j int, item *choiceItem) {
	l := tp.level(snap.Jobs[j].Topology.Required)
	if l < 0 {
		return
	}
	caps := make([]int, len(types))
	for t, ti := range types {
		sum := map[int32]int{}
		for _, n := range ti.nodes {
			d := tp.domain[l][n]
			sum[d] += snap.Nodes[n].GPUs
			caps[t] = max(caps[t], sum[d])
		}
	}
	kept := item.opts[:0:0]
	forced := -1
	for i, o := range item.opts {
		if o.size > caps[o.typ] {
			continue
		}
		if i == item.forced {
			forced = len(kept)
		}
		kept = append(kept, o)
	}
	item.opts, item.forced = kept, forced
}
