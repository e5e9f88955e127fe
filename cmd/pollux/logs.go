package main

import (
	"context"

	"github.com/spf13/cobra"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
	"pollux/internal/usage"
)

func init() { subcommands = append(subcommands, newLogsCmd) }

func newLogsCmd() *cobra.Command {
	var o clientOpts
	var q api.LogQuery
	cmd := &cobra.Command{
		Use:   "logs JOB",
		Short: "Print a worker's log (its stdout and stderr), kept on the agent that ran it",
		Long: "Prints the log of one worker of JOB: rank --rank (default 0) of incarnation --incarnation (default: the " +
			"newest that has a log), one line of output per line the worker wrote; with --json, one JSON object a line " +
			"(incarnation, rank, node, time, line). -f follows the log: new lines are printed as the worker writes them, " +
			"until it exits (without --incarnation: on through the job's next incarnations until the job has finished). " +
			"A submit token reads only the jobs it submitted, an admin token any; a read token none. --timeout does not " +
			"apply with -f. See docs/logs.md.",
		Args: exactArgs(1),
		PreRunE: func(*cobra.Command, []string) error {
			if q.Rank < 0 || q.Tail < 0 {
				return usage.Errorf("logs: --rank %d, --tail %d: want 0 or more", q.Rank, q.Tail)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.do(cmd, func(ctx context.Context, c *client.Client) error {
				return c.Logs(ctx, args[0], q, client.LogPrinter(cmd.OutOrStdout(), cmd.ErrOrStderr(), o.asJSON))
			})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&q.Follow, "follow", "f", false, "print new lines as the worker writes them, until it exits")
	f.Uint64Var(&q.Incarnation, "incarnation", 0, "the job's incarnation (0: the newest with a log)")
	f.IntVar(&q.Rank, "rank", 0, "the worker's rank")
	f.IntVar(&q.Tail, "tail", 0, "start at the N-th line from the end (0: the oldest line kept)")
	o.flags(cmd)
	return cmd
}
