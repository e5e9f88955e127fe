package failover

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the report as a table.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	mode := "plaintext (--insecure)"
	if r.TLS {
		mode = "mutual TLS"
	}
	fmt.Fprintf(tw, "transport\t%s\n", mode)
	fmt.Fprintf(tw, "servers\t%d\n", r.Servers)
	fmt.Fprintf(tw, "timeouts\theartbeat %d ms, election %d ms, lease %d ms\n", r.HeartbeatMS, r.ElectionMS, r.LeaseMS)
	fmt.Fprintf(tw, "leader kills\t%d\n", r.Trials)
	fmt.Fprintf(tw, "kill -> next commit\tmedian %.3f s, p95 %.3f s, max %.3f s (min %.3f s, mean %.3f s)\n", r.MedianS, r.P95S, r.MaxS, r.MinS, r.MeanS)
	if r.Allocations > 0 {
		fmt.Fprintf(tw, "allocations committed\t%d in batches of %d: %.0f /s\n", r.Allocations, r.Batch, r.AllocsPerS)
	}
	if r.ThroughputRestarts > 0 {
		fmt.Fprintf(tw, "throughput restarts\t%d (a leader change during the run)\n", r.ThroughputRestarts)
	}
	fmt.Fprintf(tw, "status, new connection\tmedian %.3f s, max %.3f s (%d failed of %d)\n", r.StatusMedianS, r.StatusMaxS, r.StatusFailed, statusSamples)
	if f := r.Flooded; f != nil {
		fmt.Fprintf(tw, "under a flood\t%d silent connections from %s on each Raft and HTTP port\n", f.Flood, FloodSource)
		fmt.Fprintf(tw, "  kill -> next commit\tmedian %.3f s, p95 %.3f s, max %.3f s\n", f.MedianS, f.P95S, f.MaxS)
		fmt.Fprintf(tw, "  status, new connection\tmedian %.3f s, max %.3f s (%d failed of %d)\n", f.StatusMedianS, f.StatusMaxS, f.StatusFailed, statusSamples)
	}
	if p := r.Plaintext; p != nil {
		fmt.Fprintf(tw, "plaintext baseline\tmedian %.3f s, p95 %.3f s, max %.3f s; %.0f allocations/s\n", p.MedianS, p.P95S, p.MaxS, p.AllocsPerS)
		fmt.Fprintf(tw, "cost of TLS\tfailover median x%.2f, allocation rate x%.2f\n", r.TLSCost.MedianRatio, r.TLSCost.AllocsRatio)
	}
	return tw.Flush()
}
