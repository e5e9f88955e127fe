package optimizer_test

import (
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// hetSynthetic is optimizer.Synthetic on three GPU types: node i is t4,
// rtx or a100 by i mod 3; a job with a model has one per type (the t4's
// computation three times as long as the a100's, the rtx's 1.5 times)
// and the types' one-GPU throughputs; a current placement over two types
// is dropped (a job runs on one type).
func hetSynthetic(b *testing.B, gpus, perNode int) *optimizer.Snapshot {
	snap, err := optimizer.Synthetic(gpus, perNode, gpus/2, 1)
	if err != nil {
		b.Fatal(err)
	}
	types := []string{"t4", "rtx", "a100"}
	slow := map[string]float64{"t4": 3, "rtx": 1.5, "a100": 1}
	for i := range snap.Nodes {
		snap.Nodes[i].Type = types[i%len(types)]
	}
	for j := range snap.Jobs {
		job := &snap.Jobs[j]
		if job.Model != nil {
			job.TypeModels = map[string]*goodput.Model{}
			job.TypeThroughput = map[string]float64{}
			for _, t := range types {
				md := *job.Model
				md.Params.AlphaC *= slow[t]
				md.Params.BetaC *= slow[t]
				job.TypeModels[t] = &md
				job.TypeThroughput[t] = 1 / slow[t]
			}
		}
		if cur := job.Current; len(cur) > 0 {
			for _, nc := range cur {
				if snap.Nodes[nc.Node].Type != snap.Nodes[cur[0].Node].Type {
					job.Current = nil
					break
				}
			}
		}
	}
	return snap
}

func benchHet(b *testing.B, gpus, perNode int) {
	snap := hetSynthetic(b, gpus, perNode)
	p := optimizer.NewHetPollux()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Allocate(snap, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHetPolluxRound64 times a pollux-het round on 64 GPUs of three
// types, 32 jobs (solved exactly).
func BenchmarkHetPolluxRound64(b *testing.B) { benchHet(b, 64, 4) }

// BenchmarkHetPolluxRound2048 times a pollux-het round on 2048 GPUs of
// three types, 1024 jobs (Lagrangian relaxation).
func BenchmarkHetPolluxRound2048(b *testing.B) { benchHet(b, 2048, 4) }
