package main

import (
	"context"
	"encoding/json"

	"github.com/spf13/cobra"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
)

func init() { subcommands = append(subcommands, newEventsCmd) }

func newEventsCmd() *cobra.Command {
	var job string
	var follow bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the cluster's events: jobs submitted, placed, resized, restarted, preempted, checkpointed, finished; nodes lost; each with its reason",
		Long: "Shows the replicated history of events (docs/replicated-state.md, \"Events\"), oldest first, of one job with --job. " +
			"With --json: the server's answer, one object {\"events\":[{\"seq\",\"time\",\"type\",\"job\",\"node\",\"reason\"}],\"last_seq\"}. " +
			"With -f: the events as they happen (resumed on another server if one fails), one a line, one JSON object a line with " +
			"--json; following a job ends once it has finished.",
		Args: exactArgs(0),
	}
	var o clientOpts
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return o.do(cmd, func(ctx context.Context, c *client.Client) error {
			out := cmd.OutOrStdout()
			if follow {
				enc := json.NewEncoder(out)
				return c.FollowEvents(ctx, job, 0, func(ev api.Event) error {
					if o.asJSON {
						return enc.Encode(ev)
					}
					return client.WriteEvent(out, ev)
				})
			}
			var raw json.RawMessage
			evs, err := c.Raw(&raw).Events(ctx, job, 0)
			if err != nil {
				return err
			}
			if o.asJSON {
				_, err := out.Write(raw)
				return err
			}
			return client.WriteEvents(out, evs)
		})
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&job, "job", "", "only the events of this job")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on printing events as they happen")
	return cmd
}
