package controlplane

import "os"

func ExampleReport_WriteTable() {
	rep := &Report{Nodes: 512, Jobs: 1024, IntervalS: 5, AgentLeaseS: 5, Transport: "remote", TLS: true, NodeEndpoints: 512, ActorSystems: 515, GossipMembers: 515,
		RoundS: MedianP95{Median: 0.21, P95: 0.34}, SearchEffort: MinMedian{Min: 0.1, Median: 0.25},
		FitnessVsFull: MinMedian{Min: 0.981, Median: 0.995}, RaftWritesPerRound: 1, RaftBytesPerRound: 51200,
		ReportsPerS: 40960, LeaseLapses: 3, FirstRoundAfterFailoverS: MedianMax{Median: 0.5, Max: 0.75}, FailoverToFirstRoundS: MedianMax{Median: 1.5, Max: 2.25},
		SetupS: 61, ElapsedS: 300, PeakRSSMiB: 2048, Goroutines: 90000}
	_ = rep.WriteTable(os.Stdout)
	// Output:
	// nodes                                       512 (512 endpoints, 515 actor systems, remote transport, TLS true)
	// jobs                                        1024
	// scheduling interval                         5 s
	// agents' lease                               5 s
	// gossip members                              515
	// round median / p95                          0.210 s / 0.340 s
	// search effort min / median                  0.100 / 0.250
	// fitness vs full search min / median         0.9810 / 0.9950
	// raft writes per round                       1.00
	// raft bytes per round                        51200
	// reports/s ingested                          40960
	// lease lapses in the timed rounds            3
	// kill to first round committed median / max  1.500 s / 2.250 s
	// election to first round done median / max   0.500 s / 0.750 s
	// setup / whole run                           61 s / 300 s
	// peak memory                                 2048 MiB (90000 goroutines)
}
