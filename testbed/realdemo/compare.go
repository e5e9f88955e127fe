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
	// compareCNNBatch, compareMLPBatch and compareLMBatch are the total
	// batches of 32, 128 and 512 with the shortest measured time to the
	// comparison's targets on one core (docs/benchmarks.md, "Epochs to
	// target": the CNN 28 s at 128 against 92 s at 32, the MLP 12 s at
	// 128 against 14 s and 24 s, the language model 233 s at 32 against
	// 617 s at 128): the careful user's batch (Choose).
	compareCNNBatch = 128
	compareMLPBatch = 128
	compareLMBatch  = 32
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
	jobs := append(digitsJobs(gap, cnn, mlp, args(augment), args(4*augment)),
		Job{Name: "lm-4", Example: lm, After: 3 * gap, Args: []string{"--checkpoint-interval", "5"}})
	userBatch := map[string]int{cnn.Model: compareCNNBatch, mlp.Model: compareMLPBatch, lm.Model: compareLMBatch}
	for i := range jobs {
		jobs[i].UserBatch = userBatch[jobs[i].Example.Model]
	}
	return jobs
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
// job user-sized: its UserBatch on the replicas its own throughput
// profile from the Pollux run favours (Choose). The error wraps ErrShort
// when a job missed its target or the ratio is above MaxRatio (the
// comparison is returned too).
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
		f := Choose(j.Example, j.UserBatch, final[j.Name].Bid, po.Agents, po.Slots)
		fixed[j.Name] = f
		j.Fixed = &f
		to.Jobs = append(to.Jobs, j)
		how := "its measured best batch, replicas from its fitted throughput"
		if b := final[j.Name].Bid; b == nil || b.Model == nil {
			how = "its measured best batch; no fitted model in its last bid: one replica"
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
// ex whose best total batch, measured offline as the shortest time to
// its target on one core, is batch (Job.UserBatch): among 1 to
// agents*slots replicas (over as few agents as hold them), the one with
// the highest throughput at that batch by the job's profile (the
// throughput model its job actor fitted from measured step times; the
// gradient statistics are not used, so the baseline's choice does not
// rest on the model Pollux schedules with) whose scaling efficiency is
// at least MinEfficiency, the batch rounded up to a multiple of the
// replicas, without accumulation. Without a fitted model it is one
// replica at that batch.
func Choose(ex worker.Example, batch int, bid *api.BidJSON, agents, slots int) Fixed {
	batch = max(batch, ex.InitBatch)
	best := Fixed{Replicas: 1, Batch: batch}
	if bid == nil || bid.Model == nil {
		return best
	}
	p := *bid.Model
	through := func(k int) (Fixed, float64) {
		f := Fixed{Replicas: k, Batch: k * int(math.Ceil(float64(batch)/float64(k)))}
		m := f.Batch / k
		if m < ex.MinLocal || m > ex.MaxLocal {
			return f, 0
		}
		return f, p.Throughput((k+slots-1)/slots, k, float64(m), 0)
	}
	_, one := through(1)
	if !(one > 0) {
		return best
	}
	bestThrough := one
	for k := 2; k <= agents*slots; k++ {
		f, t := through(k)
		if t < MinEfficiency*float64(k)*one || t <= bestThrough {
			continue
		}
		best, bestThrough = f, t
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
