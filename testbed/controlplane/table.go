package controlplane

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the report as a table.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "nodes\t%d\njobs\t%d\nround median / p95\t%.3f s / %.3f s\nraft writes per round\t%.2f\nraft bytes per round\t%.0f\nreports/s ingested\t%.0f\nfirst round after failover median / max\t%.3f s / %.3f s\n",
		rep.Nodes, rep.Jobs, rep.RoundS.Median, rep.RoundS.P95, rep.RaftWritesPerRound, rep.RaftBytesPerRound, rep.ReportsPerS,
		rep.FirstRoundAfterFailoverS.Median, rep.FirstRoundAfterFailoverS.Max)
	return tw.Flush()
}
