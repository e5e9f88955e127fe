package realdemo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"pollux/actors/jobspec"
	"pollux/actors/node/worker"
	"pollux/actors/server/api"
	"pollux/optimizer/goodput"
	"pollux/testbed/launch"
)

// MaxRatio is the largest ratio of Pollux's average completion time to
// Tiresias' that a comparison shows as Pollux's gain (the paper reports
// 37-50 % lower on its testbed).
const MaxRatio = 0.8

// MinEfficiency is the least scaling efficiency a careful user accepts
// when choosing a job's replicas from its profile: goodput on K replicas
// at least this fraction of K times the goodput on one.
const MinEfficiency = 0.5

// Fixed is a user-sized configuration: the replicas and the total batch a
// job's spec asks for.
type Fixed struct {
	Replicas int `json:"replicas"`
	Batch    int `json:"batch_size"`
}

// apply makes s a user-sized spec of f.
func (f Fixed) apply(s jobspec.Spec) (jobspec.Spec, error) {
	s.Replicas, s.Batch = f.Replicas, f.Batch
	s.MinReplicas, s.MaxReplicas = f.Replicas, f.Replicas
	s.MaxBatch, s.Accumulation = f.Batch, false
	if f.Replicas > 0 {
		s.MinLocalBatch, s.MaxLocalBatch = f.Batch/f.Replicas, f.Batch/f.Replicas
	}
	if err := s.Validate(); err != nil {
		return jobspec.Spec{}, err
	}
	return s, nil
}

// The comparison's jobs train until a target that needs real work: no
// minimum number of epochs, so that a larger batch costs the extra
// epochs its statistical efficiency predicts (as in the paper, whose jobs
// train to a target quality). The targets, the augmentation and the
// digits' learning rate were chosen from epochs to target measured at
// batches 32, 128 and 512 (docs/benchmarks.md, "Epochs to target").
const (
	// CompareAugment is the comparison's default augmentation of the
	// CNNs' digits (the MLP's is 4 times as much: its epochs are cheap).
	CompareAugment = 4
	// CompareCNNTarget and CompareMLPTarget are the CNNs' and the MLP's
	// target test accuracies in the comparison.
	CompareCNNTarget = 0.985
	CompareMLPTarget = 0.96
	// CompareLMTarget is the language model's default target validation
	// loss (nats per byte) in the comparison.
	CompareLMTarget = 2.2
	// compareLR is the digits' learning rate at M0 in the comparison:
	// at 0.005 the CNN takes some 14 epochs at M0 to its target, and
	// AdaScale keeps every batch up to 512 stable.
	compareLR = "0.005"
	// compareMaxEpochs bounds a digits job of the comparison that never
	// reaches its target (it then fails the comparison).
	compareMaxEpochs = 200
)

// CompareWorkload is the comparison's four jobs, submitted gap apart: two
// CNNs on digits augmented augment-fold, the MLP on 4 x augment-fold, and
// the language model (worker.Examples[2]), each trained until its target
// (CompareCNNTarget, CompareMLPTarget; the language model's validation
// loss lmTarget, 0: CompareLMTarget), however many epochs that takes.
func CompareWorkload(gap time.Duration, augment int, lmTarget float64) []Job {
	cnn, mlp, lm := worker.Examples[1], worker.Examples[0], worker.Examples[2]
	cnn.Target, mlp.Target, lm.Target = CompareCNNTarget, CompareMLPTarget, cmp.Or(lmTarget, CompareLMTarget)
	args := func(augment int) []string {
		return []string{"--augment", fmt.Sprint(augment), "--max-epochs", fmt.Sprint(compareMaxEpochs), "--lr", compareLR,
			"--checkpoint-interval", "5"}
	}
	jobs := digitsJobs(gap, cnn, mlp, args(augment), args(4*augment))
	return append(jobs, Job{Name: "lm-4", Example: lm, After: 3 * gap, Args: []string{"--checkpoint-interval", "5"}})
}

// PolicyResult is one run of a comparison: the jobs' average completion
// time and each job, and for Tiresias the configurations they asked for.
type PolicyResult struct {
	AvgJCT float64              `json:"avg_jct_s"`
	Jobs   map[string]JobResult `json:"jobs"`
	Fixed  map[string]Fixed     `json:"fixed,omitempty"`
}

// Comparison is the JSON of `pollux demo --real --compare --json`: both
// runs, and Ratio, Pollux's average completion time over Tiresias'.
type Comparison struct {
	Policies map[string]PolicyResult `json:"policies"`
	Ratio    float64                 `json:"ratio"`
}

// CoreSlots is how many CPU slots each of agents agents on this machine
// offers in a comparison by default: one per core of its share of the
// cores (launch.AgentCores, the smallest share), so that the slots the
// scheduler counts are cores; 1 when there are fewer cores than agents.
func CoreSlots(agents int) (int, error) {
	shares, err := launch.AgentCores(agents, 1)
	if err != nil || shares == nil {
		return 1, err
	}
	return len(shares[0]), nil
}

// Compare runs o's jobs twice on the same cluster shape, in Dir/pollux
// under the Pollux policy, then in Dir/tiresias under Tiresias with every
// job user-sized: the configuration its own profile from the Pollux run
// picks (Choose). The error wraps ErrShort when a job missed its target
// or the ratio is above MaxRatio (the comparison is returned too).
func Compare(ctx context.Context, o Options) (Comparison, error) {
	if len(o.Jobs) == 0 || o.Dir == "" {
		return Comparison{}, fmt.Errorf("%w: Jobs and Dir are required", ErrConfig)
	}
	if o.Slots == 0 {
		var err error
		if o.Slots, err = CoreSlots(cmp.Or(o.Agents, defaultAgents)); err != nil {
			return Comparison{}, err
		}
	}
	out := Comparison{Policies: map[string]PolicyResult{}}
	po := o
	po.Policy, po.Dir = "pollux", filepath.Join(o.Dir, "pollux")
	progressf(o.Progress, "comparison, run 1 of 2: policy pollux")
	pres, final, err := run(ctx, po)
	if err != nil {
		return Comparison{}, err
	}
	if err := po.defaults(); err != nil {
		return Comparison{}, err
	}
	fixed := map[string]Fixed{}
	to := o
	to.Policy, to.Dir, to.Jobs = "tiresias", filepath.Join(o.Dir, "tiresias"), nil
	for _, j := range o.Jobs {
		f := Choose(j.Example, final[j.Name].Bid, po.Agents, po.Slots)
		fixed[j.Name] = f
		j.Fixed = &f
		to.Jobs = append(to.Jobs, j)
		how := "from its fitted model"
		if b := final[j.Name].Bid; b == nil || b.Model == nil || b.Grad == nil {
			how = "no fitted model in its last bid: the default"
		}
		progressf(o.Progress, "%s: user-sized (%s): %d replicas, batch %d", j.Name, how, f.Replicas, f.Batch)
	}
	progressf(o.Progress, "comparison, run 2 of 2: policy tiresias")
	tres, _, err := run(ctx, to)
	if err != nil {
		return Comparison{}, err
	}
	out.Policies["pollux"] = PolicyResult{AvgJCT: avgJCT(pres), Jobs: pres.Jobs}
	out.Policies["tiresias"] = PolicyResult{AvgJCT: avgJCT(tres), Jobs: tres.Jobs, Fixed: fixed}
	if t := out.Policies["tiresias"].AvgJCT; t > 0 {
		out.Ratio = out.Policies["pollux"].AvgJCT / t
	}
	errs := []error{pres.check(false), tres.check(false)}
	if !(out.Ratio <= MaxRatio) {
		errs = append(errs, fmt.Errorf("%w: pollux's average completion time is %.2f of tiresias', want at most %.2f", ErrShort, out.Ratio, MaxRatio))
	}
	return out, errors.Join(errs...)
}

// Choose is the configuration a careful user picks for a job of example
// ex from its profile (the bid its job actor fitted from the measured
// step times and gradient statistics): among 1 to agents*slots replicas
// (over as few agents as hold them), the one with the highest goodput
// whose scaling efficiency is at least MinEfficiency, at the total batch
// the model finds best there, without accumulation. Without a fitted
// model it is one replica at the initial batch.
func Choose(ex worker.Example, bid *api.BidJSON, agents, slots int) Fixed {
	best := Fixed{Replicas: 1, Batch: ex.InitBatch}
	if bid == nil || bid.Model == nil || bid.Grad == nil {
		return best
	}
	l := goodput.Limits{InitBatch: ex.InitBatch, MaxBatch: ex.MaxBatch, MinLocal: ex.MinLocal, MaxLocal: ex.MaxLocal}
	md := goodput.Model{Params: *bid.Model, Grad: *bid.Grad, Limits: l}
	one, err := md.Optimize(1, 1)
	if err != nil || !(one.Goodput > 0) {
		return best
	}
	bestGoodput := one.Goodput
	for k := 2; k <= agents*slots; k++ {
		c, err := md.Optimize((k+slots-1)/slots, k)
		if err != nil || c.Goodput < MinEfficiency*float64(k)*one.Goodput || c.Goodput <= bestGoodput {
			continue
		}
		m := c.TotalBatch / k
		batch := max(k*m, k*int(math.Ceil(float64(ex.InitBatch)/float64(k))))
		best, bestGoodput = Fixed{Replicas: k, Batch: batch}, c.Goodput
	}
	return best
}

// avgJCT is the mean completion time of r's jobs.
func avgJCT(r Result) float64 {
	if len(r.Jobs) == 0 {
		return 0
	}
	sum := 0.0
	for _, j := range r.Jobs {
		sum += j.JCT
	}
	return sum / float64(len(r.Jobs))
}
