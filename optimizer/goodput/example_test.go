package goodput_test

import (
	"fmt"

	"pollux/optimizer/goodput"
)

// Fit recovers a job's throughput model from its profiled step times:
// here points measured on up to four nodes, exactly as a known model
// predicts them; the fitted model then predicts a placement it was
// never measured on.
func ExampleFit() {
	truth := goodput.Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8}
	var points []goodput.ProfilePoint
	for _, pl := range [][2]int{{1, 1}, {1, 2}, {1, 4}, {2, 8}, {4, 16}} {
		for _, m := range []int{16, 32, 64} {
			points = append(points, goodput.ProfilePoint{
				Nodes: pl[0], Replicas: pl[1], LocalBatch: m,
				AccumTime: truth.AccumTime(float64(m)),
				StepTime:  truth.SyncTime(pl[0], pl[1], float64(m)),
			})
		}
	}
	fit, err := goodput.Fit(points)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("compute: alpha_c %.3f s, beta_c %.4f s per sample\n", fit.AlphaC, fit.BetaC)
	fmt.Printf("8 nodes, 32 GPUs, 32 samples each: step %.3f s (true %.3f s)\n",
		fit.SyncTime(8, 32, 32), truth.SyncTime(8, 32, 32))
	// Output:
	// compute: alpha_c 0.050 s, beta_c 0.0040 s per sample
	// 8 nodes, 32 GPUs, 32 samples each: step 0.927 s (true 0.927 s)
}
