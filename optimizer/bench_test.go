package optimizer_test

import (
	"testing"

	"pollux/optimizer"
)

// BenchmarkPolluxRoundArtifact times one Pollux round on the largest
// artifact snapshot (31 jobs, 16 x 4 GPUs).
func BenchmarkPolluxRoundArtifact(b *testing.B) {
	entries := loadArtifact(b)
	snap := entries[len(entries)-1].Snapshot
	p := optimizer.NewPollux()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Allocate(snap, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func benchSynthetic(b *testing.B, gpus, perNode int) {
	snap, err := optimizer.Synthetic(gpus, perNode, gpus/2, 1)
	if err != nil {
		b.Fatal(err)
	}
	p := optimizer.NewPollux()
	res, err := p.Allocate(snap, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Allocate(snap, res.State); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPolluxRound64 times a warm-started round on 64 GPUs, 32 jobs.
func BenchmarkPolluxRound64(b *testing.B) { benchSynthetic(b, 64, 4) }

// BenchmarkPolluxRound2048 times a warm-started round on 2048 GPUs, 1024 jobs.
func BenchmarkPolluxRound2048(b *testing.B) { benchSynthetic(b, 2048, 4) }

// BenchmarkPolluxRound2048Racks times a warm-started round on 2048 GPUs in
// 64 racks, 1024 jobs: the search rack by rack.
func BenchmarkPolluxRound2048Racks(b *testing.B) {
	snap, err := optimizer.Synthetic(2048, 4, 1024, 1)
	if err != nil {
		b.Fatal(err)
	}
	if err := optimizer.AssignRacks(snap, 64); err != nil {
		b.Fatal(err)
	}
	for j := range snap.Jobs {
		if md := snap.Jobs[j].Model; md != nil {
			x := *md
			x.Params.AlphaX = x.Params.AlphaN
			snap.Jobs[j].Model = &x
		}
	}
	p := optimizer.NewPollux()
	res, err := p.Allocate(snap, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Allocate(snap, res.State); err != nil {
			b.Fatal(err)
		}
	}
}

// benchAutoscale is benchSynthetic with autoscaling on: the same round,
// the cluster extended to twice its nodes with virtual ones (as the
// artifact's policy extends it) and every size evaluated.
func benchAutoscale(b *testing.B, gpus, perNode int) {
	snap, err := optimizer.Synthetic(gpus, perNode, gpus/2, 1)
	if err != nil {
		b.Fatal(err)
	}
	nodes := len(snap.Nodes)
	p := optimizer.NewAutoscaled(optimizer.NewPollux(), optimizer.Autoscale{Template: optimizer.Node{GPUs: perNode}, MinNodes: 1, MaxNodes: 2 * nodes})
	res, err := p.Allocate(snap, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Allocate(snap, res.State); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAutoscaleRound64 is BenchmarkPolluxRound64 with autoscaling on
// (16 real nodes, up to 32).
func BenchmarkAutoscaleRound64(b *testing.B) { benchAutoscale(b, 64, 4) }

// BenchmarkAutoscaleRound2048 is BenchmarkPolluxRound2048 with autoscaling
// on (512 real nodes, up to 1024; 64 sizes evaluated).
func BenchmarkAutoscaleRound2048(b *testing.B) { benchAutoscale(b, 2048, 4) }

// benchHetAutoscale is benchHet with autoscaling on: a100 nodes added up
// to twice the cluster's nodes, every size evaluated.
func benchHetAutoscale(b *testing.B, gpus, perNode int) {
	snap := hetSynthetic(b, gpus, perNode)
	p := optimizer.NewAutoscaled(optimizer.NewHetPollux(), optimizer.Autoscale{Template: optimizer.Node{GPUs: perNode, Type: "a100"}, MinNodes: 1, MaxNodes: 2 * len(snap.Nodes)})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Allocate(snap, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHetAutoscaleRound64 is BenchmarkHetPolluxRound64 with
// autoscaling on (16 real nodes, up to 32).
func BenchmarkHetAutoscaleRound64(b *testing.B) { benchHetAutoscale(b, 64, 4) }

// BenchmarkHetAutoscaleRound2048 is BenchmarkHetPolluxRound2048 with
// autoscaling on (512 real nodes, up to 1024; 64 sizes evaluated).
func BenchmarkHetAutoscaleRound2048(b *testing.B) { benchHetAutoscale(b, 2048, 4) }
