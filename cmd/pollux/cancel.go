package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"pollux/actors/server/api"
)

func init() { subcommands = append(subcommands, newCancelCmd, newJobCmd) }

func newCancelCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel a job: its workers are stopped, its GPUs freed, and it is marked cancelled",
		Long: "Cancels a job that has not finished: the next round stops its workers and gives its GPUs to others; " +
			"the job stays in the listing as cancelled (until the retention period prunes it). Cancelling an unknown " +
			"or finished job is an error. A submit token cancels only the jobs it submitted; an admin token any.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res api.CancelResult
			if err := o.call(cmd.Context(), http.MethodPost, api.PathJobs+"/"+url.PathEscape(args[0])+"/cancel", nil, &res); err != nil {
				return err
			}
			if res.Incarnation != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "cancelled %s (in incarnation %d)\n", res.ID, *res.Incarnation)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "cancelled %s\n", res.ID)
			}
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}

func newJobCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "job JOB",
		Short: "Show one job: its state, progress, and its actor's bid (model and batch configurations)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.show(cmd, api.PathJobs+"/"+url.PathEscape(args[0]), func(w io.Writer, raw []byte) error {
				var j api.Job
				if err := json.Unmarshal(raw, &j); err != nil {
					return err
				}
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
					return nil
				}
				model := "none yet (linear speedup)"
				if b.Model != nil {
					model = fmt.Sprintf("%+v", *b.Model)
				}
				fmt.Fprintf(w, "bid version %d, profiled up to %d replicas, model %s\n", b.Version, b.MostProfiled, model)
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
				return tw.Flush()
			})
		},
	}
	o.flags(cmd)
	return cmd
}
