package controlplane

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the report as a table.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(name, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, a...)...) }
	row("nodes", "%d (%d endpoints, %d actor systems, %s transport, TLS %v)", rep.Nodes, rep.NodeEndpoints, rep.ActorSystems, rep.Transport, rep.TLS)
	row("jobs", "%d", rep.Jobs)
	row("scheduling interval", "%g s", rep.IntervalS)
	row("agents' lease", "%g s", rep.AgentLeaseS)
	row("gossip members", "%d", rep.GossipMembers)
	row("round median / p95", "%.3f s / %.3f s", rep.RoundS.Median, rep.RoundS.P95)
	row("search effort min / median", "%.3f / %.3f", rep.SearchEffort.Min, rep.SearchEffort.Median)
	row("fitness vs full search min / median", "%.4f / %.4f", rep.FitnessVsFull.Min, rep.FitnessVsFull.Median)
	row("raft writes per round", "%.2f", rep.RaftWritesPerRound)
	row("raft bytes per round", "%.0f", rep.RaftBytesPerRound)
	row("reports/s ingested", "%.0f", rep.ReportsPerS)
	row("lease lapses in the timed rounds", "%d", rep.LeaseLapses)
	row("kill to first round committed median / max", "%.3f s / %.3f s", rep.FailoverToFirstRoundS.Median, rep.FailoverToFirstRoundS.Max)
	row("election to first round done median / max", "%.3f s / %.3f s", rep.FirstRoundAfterFailoverS.Median, rep.FirstRoundAfterFailoverS.Max)
	row("setup / whole run", "%.0f s / %.0f s", rep.SetupS, rep.ElapsedS)
	row("peak memory", "%.0f MiB (%d goroutines)", rep.PeakRSSMiB, rep.Goroutines)
	return tw.Flush()
}
