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
