package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
)

func init() { subcommands = append(subcommands, newCancelCmd, newJobCmd) }

func newCancelCmd() *cobra.Command {
	return lineCmd(&cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel a job: its workers are stopped, its GPUs freed, and it is marked cancelled",
		Long: "Cancels a job that has not finished: the next round stops its workers and gives its GPUs to others; " +
			"the job stays in the listing as cancelled (until the retention period prunes it). Cancelling an unknown " +
			"or finished job is an error. A submit token cancels only the jobs it submitted; an admin token any.",
		Args: exactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (string, error) {
		res, err := c.Cancel(ctx, args[0])
		if err == nil && res.Incarnation != nil {
			return fmt.Sprintf("cancelled %s (in incarnation %d)", res.ID, *res.Incarnation), nil
		}
		return "cancelled " + res.ID, err
	})
}

func newJobCmd() *cobra.Command {
	return showCmd(&cobra.Command{
		Use:   "job JOB",
		Short: "Show one job: its state, progress, and its actor's bid (model and batch configurations)",
		Args:  exactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (api.Job, error) {
		return c.Job(ctx, args[0])
	}, client.WriteJob)
}
