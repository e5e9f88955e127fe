package client

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"pollux/actors/server/api"
	"pollux/optimizer/goodput"
)

// WriteJobs writes jobs as the table `pollux jobs` prints.
func WriteJobs(w io.Writer, jobs []api.Job) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tAPP\tGPUS\tNODES\tEPOCH\tRESTARTS\tINCARNATION\tSUBMITTER")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%s\n", j.ID, j.State, j.App, j.GPUs, j.Nodes, epochOf(j), j.Restarts, j.Incarnation, cmp.Or(j.Submitter, "-"))
	}
	return tw.Flush()
}

// epochOf is a job's EPOCH column: its epoch, over the epochs it
// declared if it declared them.
func epochOf(j api.Job) string {
	if j.Epochs > 0 {
		return fmt.Sprintf("%d/%d", j.Epoch, j.Epochs)
	}
	return strconv.Itoa(j.Epoch)
}

// WriteJob writes one job as `pollux job` prints it: state, progress and
// its actor's bid.
func WriteJob(out io.Writer, j api.Job) error {
	w := &stickyWriter{w: out}
	fmt.Fprintf(w, "job %s (%s): %s, incarnation %d, %d GPUs on %d nodes\n", j.ID, j.App, j.State, j.Incarnation, j.GPUs, j.Nodes)
	if j.Submitter != "" {
		fmt.Fprintf(w, "submitted by %s (token %s)\n", j.Submitter, j.SubmitterAccessor)
	}
	fmt.Fprintf(w, "epoch %d, progress %.1f, attained %.0f GPU-s, restarts %d, crashes %d\n", j.Epoch, j.Progress, j.Attained, j.Restarts, j.Crashes)
	if j.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", j.Reason)
	}
	b := j.Bid
	if b == nil {
		fmt.Fprintln(w, "no bid yet")
		return w.err
	}
	fmt.Fprintf(w, "bid version %d, profiled up to %d replicas\n", b.Version, b.MostProfiled)
	switch {
	case b.Model == nil:
		fmt.Fprintln(w, "throughput model: none fitted yet (linear speedup): the job's actor fits one from its workers' first measurements")
	case len(b.Types) > 1:
		for _, tb := range b.Types {
			writeModel(w, "throughput model on "+cmp.Or(tb.GPUType, "untyped")+" GPUs", tb.Model)
		}
	default:
		writeModel(w, "throughput model", *b.Model)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "K\tONE NODE m/s/gain\tSEVERAL NODES m/s/gain")
	for k := range b.Single {
		multi := "-"
		if k > 0 && k < len(b.Multi) {
			c := b.Multi[k]
			multi = fmt.Sprintf("%d/%d/%.3f", c.LocalBatch, c.AccumSteps, c.Gain)
		}
		c := b.Single[k]
		fmt.Fprintf(tw, "%d\t%d/%d/%.3f\t%s\n", k+1, c.LocalBatch, c.AccumSteps, c.Gain, multi)
	}
	tw.Flush()
	return w.err
}

// writeModel writes a throughput model as the dashboard shows it: each
// term named, with its unit (m is the per-GPU batch, K the replicas).
func writeModel(w io.Writer, title string, p goodput.Params) {
	fmt.Fprintf(w, "%s (one step: compute and synchronisation overlapped as a γ-norm):\n", title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  compute\tα_c %.4g s + β_c %.4g s/sample × m\n", p.AlphaC, p.BetaC)
	fmt.Fprintf(tw, "  sync within a node\tα_r %.4g s + β_r %.4g s × (K-2)\n", p.AlphaR, p.BetaR)
	fmt.Fprintf(tw, "  sync across nodes\tα_n %.4g s + β_n %.4g s × (K-2)\n", p.AlphaN, p.BetaN)
	if p.AlphaX != 0 {
		fmt.Fprintf(tw, "  sync across racks\tα_x %.4g s × 2(r-1)/r for r racks\n", p.AlphaX)
	}
	fmt.Fprintf(tw, "  overlap\tγ %.3g (1: sum, larger: max)\n", p.Gamma)
	tw.Flush()
}

// WriteNodes writes nodes as the table `pollux nodes` prints.
func WriteNodes(w io.Writer, nodes []api.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHEALTH\tGPUS\tUSED\tGPU TYPE\tRACK\tTOPOLOGY\tADDRESS")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", n.ID, n.Health, n.GPUs, n.Used, cmp.Or(n.GPUType, "-"), n.Rack,
			cmp.Or(n.Topology, "-"), n.Address)
	}
	return tw.Flush()
}

// WriteStatus writes the cluster's status as `pollux status` prints it.
func WriteStatus(out io.Writer, s api.Status) error {
	w := &stickyWriter{w: out}
	stale := ""
	if s.Stale {
		stale = " (a follower's local view)"
	}
	fmt.Fprintf(w, "leader %s, term %d, generation %d%s\n", s.Leader, s.Term, s.Generation, stale)
	borrowed := ""
	if s.GPUsBorrowed > 0 {
		borrowed = fmt.Sprintf(", and %d on borrowed nodes", s.GPUsBorrowed)
	}
	fmt.Fprintf(w, "GPUs %d used of %d%s\n", s.GPUsUsed, s.GPUs, borrowed)
	fmt.Fprintf(w, "jobs: %d pending, %d running, %d rescaling, %d completed, %d failed\n",
		s.Jobs["pending"], s.Jobs["running"], s.Jobs["rescaling"], s.Jobs["completed"], s.Jobs["failed"])
	if as := s.Autoscale; as != nil {
		phases := map[string]int{}
		for _, m := range as.Machines {
			phases[m.Phase]++
		}
		fmt.Fprintf(w, "autoscaler: desired %d nodes; machines %d booting, %d up, %d draining; %d asked for so far; %.2f node-hours",
			as.Desired, phases["booting"], phases["up"], phases["draining"], as.Asked, as.NodeHours)
		if as.Cost != nil {
			fmt.Fprintf(w, ", cost %.2f", *as.Cost)
		}
		fmt.Fprintln(w)
	}
	if f := s.Federation; f != nil {
		fmt.Fprintf(w, "lab %s: lends %d GPUs, borrows %d\n", f.Cluster, f.Lent, f.Borrowed)
		for _, l := range f.Leases {
			fmt.Fprintf(w, "  lease %s: %s -> %s %v, expires %s\n", l.ID, l.Lender, l.Borrower, l.Nodes,
				time.Unix(0, int64(l.Expires*1e9)).UTC().Format(time.RFC3339))
		}
		for _, p := range f.Peers {
			state := "lost"
			if p.Up {
				state = "up"
			}
			fmt.Fprintf(w, "  peer %s: %s since %s\n", p.Name, state, p.Since.UTC().Format(time.RFC3339))
		}
	}
	return w.err
}

// WritePeers writes the Raft servers as the table `pollux operator raft
// list-peers` prints, with a warning when a majority of the voters share
// a rack.
func WritePeers(w io.Writer, peers []api.Peer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tVOTER\tLEADER\tALIVE\tRACK")
	for _, p := range peers {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%t\t%t\t%s\n", p.ID, p.Address, p.Voter, p.Leader, p.Alive, cmp.Or(p.Rack, "?"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rack, ids := api.RackMajority(peers); rack != "" {
		_, err := fmt.Fprintf(w, "warning: a majority of the voters (%s) share rack %s: losing that rack loses the quorum; "+
			"start servers in other racks (pollux server --topology rack=R)\n", strings.Join(ids, ", "), rack)
		return err
	}
	return nil
}

// WriteToken writes a token as `pollux acl token self` prints it, with
// its secret if the answer has one (only the answer that made it does).
func WriteToken(out io.Writer, t api.Token) error {
	w := &stickyWriter{w: out}
	state := "live"
	if t.Revoked {
		state = "revoked " + when(t.RevokeTime)
	}
	fmt.Fprintf(w, "accessor %s\nname     %s\nrole     %s\ncreated  %s\nstate    %s\n", t.Accessor, t.Name, t.Role, when(t.CreateTime), state)
	if t.Secret != "" {
		fmt.Fprintf(w, "secret   %s\n(shown only now: the cluster keeps its hash, not the secret. Pass it as $%s or --token.)\n", t.Secret, EnvToken)
	}
	return w.err
}

// WriteTokens writes tokens as the table `pollux acl token list` prints.
func WriteTokens(w io.Writer, ts []api.Token) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCESSOR\tNAME\tROLE\tCREATED\tREVOKED")
	for _, t := range ts {
		name := t.Name
		if t.Bootstrap {
			name += " (bootstrap)"
		}
		revoked := "-"
		if t.Revoked {
			revoked = when(t.RevokeTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Accessor, name, t.Role, when(t.CreateTime), revoked)
	}
	return tw.Flush()
}

// when is a time of the API (seconds since the epoch) in RFC 3339, UTC;
// "-" for none.
func when(t float64) string {
	if t == 0 {
		return "-"
	}
	return time.Unix(0, int64(t*1e9)).UTC().Format(time.RFC3339)
}

// stickyWriter is a writer that keeps the first error of its writes and
// writes nothing after it.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// WriteQuotas prints the quotas as a table: the defaults and the state
// budget, then one line per token (an asterisk marks a quota of its own).
func WriteQuotas(w io.Writer, q api.Quotas) error {
	d := q.Default
	fmt.Fprintf(w, "default: %d jobs, %d spec bytes, %g submissions/s (burst %d)\n", d.Jobs, d.SpecBytes, d.Rate, d.Burst)
	fmt.Fprintf(w, "state: %d of %d bytes of job specs and events (%d of events)\n", q.StateBytes, q.StateBudget, q.EventBytes)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCESSOR\tNAME\tJOBS\tSPEC BYTES\tRATE/S\tBURST")
	for _, t := range q.Tokens {
		own := ""
		if t.Own != nil {
			own = " *"
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%d/%d\t%d/%d\t%g\t%d\n", t.Accessor, t.Name, own, t.Jobs, t.Quota.Jobs, t.SpecBytes, t.Quota.SpecBytes, t.Quota.Rate, t.Quota.Burst)
	}
	return tw.Flush()
}
