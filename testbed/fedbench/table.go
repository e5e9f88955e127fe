package fedbench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the report as a table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "labs\t%d (%d Raft servers each)\n", r.Labs, r.ServersPerLab)
	fmt.Fprintf(tw, "lease decisions\t%d in %.2f s (%d leases, %d at a time)\n", r.Decisions, r.Seconds, r.Leases, r.Concurrency)
	fmt.Fprintf(tw, "lease decisions/s\t%.1f (target >= %.0f)\n", r.LeaseDecisionsPerS, r.Targets.DecisionsPerS)
	for _, op := range []string{"grant", "renew", "reclaim"} {
		l := r.Latency[op]
		fmt.Fprintf(tw, "%s\tp50 %.1f ms, p95 %.1f ms\n", op, l.P50, l.P95)
	}
	fmt.Fprintf(tw, "verified in every Raft state\t%v\n", r.Verified)
	if len(r.LossSamplesS) > 0 {
		fmt.Fprintf(tw, "loss detection\tmedian %.2f s, max %.2f s over %d kills (target <= %.0f s)\n", r.LossDetectionS, r.LossDetectionMaxS,
			len(r.LossSamplesS), r.Targets.LossDetectionS)
		fmt.Fprintf(tw, "detector\t%s, interval %.2f s; first noticed by %v\n", r.LossDetector, r.IntervalS, r.LossDetectedBy)
	}
	fmt.Fprintf(tw, "targets met\t%v\n", r.Targets.Met)
	return tw.Flush()
}
