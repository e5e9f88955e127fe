package sim

import (
	"context"
	"testing"

	"pollux/optimizer"
	"pollux/testbed/builtin"
	"pollux/testbed/workload"
)

// BenchmarkRunTiresias replays a generated 160-job workload on the
// built-in profiles under Tiresias: the simulator's own cost per run (job
// progress, snapshots, bookkeeping) with a policy that costs almost nothing.
func BenchmarkRunTiresias(b *testing.B) {
	cat, err := builtin.Catalog()
	if err != nil {
		b.Fatal(err)
	}
	wl, err := workload.Generate(workload.DefaultGenConfig(), 1, "bench")
	if err != nil {
		b.Fatal(err)
	}
	rounds := 0
	for b.Loop() {
		res, err := Run(context.Background(), DefaultConfig(), cat, wl, optimizer.Tiresias{}, FixedAll, nil)
		if err != nil {
			b.Fatal(err)
		}
		rounds = res.Rounds
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rounds), "ns/round")
}
