package controlplane

import "os"

func ExampleReport_WriteTable() {
	rep := &Report{Nodes: 512, Jobs: 1024, RoundS: MedianP95{Median: 0.21, P95: 0.34}, RaftWritesPerRound: 2, RaftBytesPerRound: 51200,
		ReportsPerS: 40960, FirstRoundAfterFailoverS: MedianMax{Median: 1.5, Max: 2.25}}
	_ = rep.WriteTable(os.Stdout)
	// Output:
	// nodes                                    512
	// jobs                                     1024
	// round median / p95                       0.210 s / 0.340 s
	// raft writes per round                    2.00
	// raft bytes per round                     51200
	// reports/s ingested                       40960
	// first round after failover median / max  1.500 s / 2.250 s
}
