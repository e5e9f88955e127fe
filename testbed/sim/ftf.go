package sim

import (
	"context"
	"fmt"
	"math"
	"sync"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/clusterspec"
	"pollux/testbed/workload"
)

// siaFTF is finish-time fairness as Sia's artifact measures it
// (ftf_simulator.py): the job's share is the cluster's GPUs over the mean
// number of jobs active in the rounds it was active, v; on every GPU type
// it is run alone, scheduled by Sia, on a cluster of that type with at
// most floor(v) and ceil(v) GPUs (interpolated in between; below one GPU,
// the one-GPU time over v); the per-type times are averaged weighted by
// the type's GPUs in the cluster, and the ratio is the job's JCT over that
// mean.
func (s *state) siaFTF(ctx context.Context, j *job) (float64, error) {
	nAvg := 1.0
	if j.contN > 0 {
		nAvg = j.contSum / float64(j.contN)
	}
	v := float64(s.cfg.TotalGPUs()) / nAvg
	offset := math.Mod(j.spec.Time, s.cfg.Interval)
	sum, weight := 0.0, 0.0
	for _, g := range s.cfg.groups() {
		at := func(k int) (float64, bool, error) {
			return isolatedJCT(ctx, s.cfg, j.spec, j.apps[g.Type], g, k)
		}
		var jct float64
		if v < 1 {
			one, ok, err := at(1)
			if err != nil {
				return 0, err
			}
			if !ok {
				continue
			}
			jct = (one - offset) / v
		} else {
			lo, hi := math.Floor(v), math.Ceil(v)
			a, okA, err := at(int(lo))
			if err != nil {
				return 0, err
			}
			b, okB, err := at(int(hi))
			if err != nil {
				return 0, err
			}
			if !okA || !okB {
				continue
			}
			jct = a + (b-a)*(v-lo) - offset
		}
		w := float64(g.Nodes * g.GPUsPerNode)
		sum += w * jct
		weight += w
	}
	if !(weight > 0) || !(sum > 0) {
		return 0, nil
	}
	return (j.completion - j.spec.Time) / (sum / weight), nil
}

// isoKey names one isolated run.
type isoKey struct {
	app      testbed.Application
	typ      string
	k, nodes int
	gpn      int
	interval float64
}

type isoEntry struct {
	once sync.Once
	jct  float64
	ok   bool
	err  error
}

// isoRuns memoises isolated runs for the process: they depend only on the
// key, and the same (application, type, share) recurs across jobs,
// workloads and policies.
var isoRuns sync.Map // isoKey -> *isoEntry

// isolatedJCT is the JCT of a job of spec's application submitted at time
// 0, alone on at most k GPUs of group g's type, scheduled by Sia. ok is
// false where Sia's artifact drops the type (the share would need more
// nodes than the type was profiled on).
func isolatedJCT(ctx context.Context, cfg Config, spec workload.Job, app testbed.Application, g clusterspec.Group, k int) (float64, bool, error) {
	nodes := min(g.Nodes, k/g.GPUsPerNode+1)
	if tp, ok := app.(testbed.TypeProfile); ok && nodes > tp.ProfiledNodes() {
		return 0, false, nil
	}
	key := isoKey{app: app, typ: g.Type, k: k, nodes: nodes, gpn: g.GPUsPerNode, interval: cfg.Interval}
	e, _ := isoRuns.LoadOrStore(key, &isoEntry{})
	entry := e.(*isoEntry)
	entry.once.Do(func() {
		iso := cfg
		iso.Cluster = []clusterspec.Group{{Type: g.Type, Nodes: nodes, GPUsPerNode: g.GPUsPerNode}}
		iso.MaxReplicas = min(nodes*g.GPUsPerNode, k)
		iso.isolated = true
		// Sia's fairness runs give the job no user batch size: its
		// scheduler's model may then use the application's largest.
		wl := workload.Workload{Name: "isolated", Jobs: []workload.Job{{Name: spec.App + "-isolated", Time: 0, App: spec.App, Replicas: spec.Replicas}}}
		cats := testbed.TypedCatalog{g.Type: testbed.Catalog{spec.App: app}}
		pol := optimizer.NewSia()
		res, err := RunTyped(ctx, iso, cats, wl, pol, Adaptive, nil)
		if err != nil {
			entry.err = fmt.Errorf("finish-time fairness of %s on %d %s GPUs: %w", spec.App, k, g.Type, err)
			return
		}
		entry.jct, entry.ok = res.Jobs[0].JCT, true
	})
	return entry.jct, entry.ok, entry.err
}
