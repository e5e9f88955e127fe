package sim

import (
	"pollux/optimizer"
)

// oracle is what Optimus is told about a fixed-batch job: its true step
// time on k GPUs packed onto as few nodes as possible, and its remaining
// iterations from the traces.
type oracle struct {
	s *state
	j *job
}

var _ optimizer.Oracle = (*oracle)(nil)

// StepTime is the true time of one iteration (accumulation included) at
// the job's fixed batch on k GPUs packed GPUsPerNode to a node.
func (o *oracle) StepTime(k int) float64 {
	if k < 1 {
		return 0
	}
	key := stepKey{o.j.spec.App, o.j.batch}
	table := o.s.steps[key]
	if k < len(table) && table[k] > 0 {
		return table[k]
	}
	if k >= len(table) {
		grown := make([]float64, k+1)
		copy(grown, table)
		table = grown
		o.s.steps[key] = table
	}
	g := o.s.cfg.GPUsPerNode
	var placement []int
	for left := k; left > 0; left -= g {
		placement = append(placement, min(left, g))
	}
	m, s := fixedSplit(o.j.limits, k, float64(o.j.batch))
	step, sync := o.j.app.StepTimes(placement, float64(m))
	table[k] = step + float64(s)*(step-sync)
	return table[k]
}

// RemainingIters is what the artifact's Optimus takes for the iterations
// left: the iteration count at the end of training minus the count at the
// end of the epoch after the finished ones (the artifact indexes the
// iteration column by finished epochs, so the epoch in progress is counted
// as done), and 1 once the job is in its last epoch.
func (o *oracle) RemainingIters() float64 {
	j := o.j
	app, b := j.app, float64(j.batch)
	last := app.MaxEpochs()
	if j.epoch+1 >= last {
		return 1
	}
	return app.Iterations(b, last) - app.Iterations(b, j.epoch+1)
}
