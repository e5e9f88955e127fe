package fedbench

import "os"

func ExampleReport_WriteTable() {
	r := &Report{Labs: 3, ServersPerLab: 3, Leases: 200, Concurrency: 4, Decisions: 600, Seconds: 4, LeaseDecisionsPerS: 150,
		Latency:  map[string]Latency{"grant": {P50: 20, P95: 31.5}, "renew": {P50: 18, P95: 25}, "reclaim": {P50: 21, P95: 33}},
		Verified: true, LossDetectionS: 2.5, LossDetectionMaxS: 3, LossSamplesS: []float64{2, 2.5, 3}, IntervalS: 1,
		LossDetector: "gossip and bids", LossDetectedBy: map[string]int{"gossip": 3},
		Targets: Targets{DecisionsPerS: 50, LossDetectionS: 10, Met: true}}
	_ = r.WriteTable(os.Stdout)
	// Output:
	// labs                          3 (3 Raft servers each)
	// lease decisions               600 in 4.00 s (200 leases, 4 at a time)
	// lease decisions/s             150.0 (target >= 50)
	// grant                         p50 20.0 ms, p95 31.5 ms
	// renew                         p50 18.0 ms, p95 25.0 ms
	// reclaim                       p50 21.0 ms, p95 33.0 ms
	// verified in every Raft state  true
	// loss detection                median 2.50 s, max 3.00 s over 3 kills (target <= 10 s)
	// detector                      gossip and bids, interval 1.00 s; first noticed by map[gossip:3]
	// targets met                   true
}
