package failover

import "os"

func ExampleReport_WriteTable() {
	r := Report{Servers: 3, Trials: 20, MedianS: 0.41, P95S: 0.62, MaxS: 0.7, MinS: 0.3, MeanS: 0.45, HeartbeatMS: 200, ElectionMS: 200,
		LeaseMS: 100, Allocations: 20000, Batch: 256, AllocsPerS: 9000, TLS: true,
		Plaintext: &Report{MedianS: 0.4, P95S: 0.6, MaxS: 0.65, AllocsPerS: 10000}, TLSCost: &TLSCost{MedianRatio: 1.03, AllocsRatio: 0.9},
		StatusMedianS: 0.012, StatusMaxS: 0.03,
		Flooded: &Report{Flood: 2000, MedianS: 0.45, P95S: 0.7, MaxS: 0.8, StatusMedianS: 0.02, StatusMaxS: 0.05, StatusFailed: 1}}
	_ = r.WriteTable(os.Stdout)
	// Output:
	// transport                 mutual TLS
	// servers                   3
	// timeouts                  heartbeat 200 ms, election 200 ms, lease 100 ms
	// leader kills              20
	// kill -> next commit       median 0.410 s, p95 0.620 s, max 0.700 s (min 0.300 s, mean 0.450 s)
	// allocations committed     20000 in batches of 256: 9000 /s
	// status, new connection    median 0.012 s, max 0.030 s (0 failed of 20)
	// under a flood             2000 silent connections from 127.0.0.2 on each Raft and HTTP port
	//   kill -> next commit     median 0.450 s, p95 0.700 s, max 0.800 s
	//   status, new connection  median 0.020 s, max 0.050 s (1 failed of 20)
	// plaintext baseline        median 0.400 s, p95 0.600 s, max 0.650 s; 10000 allocations/s
	// cost of TLS               failover median x1.03, allocation rate x0.90
}
