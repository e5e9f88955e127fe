package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/jobspec"
	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
	"pollux/internal/usage"
	"pollux/testbed/builtin"
)

func init() {
	subcommands = append(subcommands, newSubmitCmd, newJobsCmd, newNodesCmd, newStatusCmd)
}

// clientOpts are the flags every API client command takes.
type clientOpts struct {
	cfg    client.Config
	asJSON bool
}

func (o *clientOpts) flags(cmd *cobra.Command) {
	env, f := client.FromEnv(), cmd.Flags()
	f.StringSliceVar(&o.cfg.Servers, "server", env.Servers, "API addresses of servers, tried in order: host:port is HTTPS; http://host:port a server running --insecure ($"+client.EnvServers+", comma-separated, sets the default)")
	f.StringVar(&o.cfg.CA, "ca", env.CA, "cluster CA certificate the servers' certificates are checked against (default $"+client.EnvCA+")")
	// The token's default is read when the command runs, so that --help
	// never prints a secret.
	f.StringVar(&o.cfg.Token, "token", "", "API token secret (default $"+client.EnvToken+", which keeps it out of the process list)")
	f.StringVar(&o.cfg.Cert, "cert", env.Cert, "client certificate of the cluster CA to show (default $"+client.EnvClientCert+"; pollux acl bootstrap needs one)")
	f.StringVar(&o.cfg.Key, "key", env.Key, "key of --cert (default $"+client.EnvClientKey+")")
	f.BoolVar(&o.asJSON, "json", false, "print the server's JSON answer")
	f.DurationVar(&o.cfg.Timeout, "timeout", 15*time.Second, "give up after this long")
}

// do runs f with a client of the flags. A refusal by the servers and a
// configuration the client cannot use are bad input (exit status 2).
func (o *clientOpts) do(cmd *cobra.Command, f func(context.Context, *client.Client) error) error {
	cfg := o.cfg
	cfg.Token = cmp.Or(cfg.Token, client.FromEnv().Token)
	c, err := client.New(cfg)
	if err == nil {
		defer c.Close()
		err = f(cmd.Context(), c)
	}
	var refused *client.APIError
	if errors.As(err, &refused) || errors.Is(err, client.ErrConfig) {
		return usage.Wrap(err)
	}
	return err
}

// showCmd gives cmd the client flags and makes it get an answer of the
// API for its arguments and print it: as the server sent it with --json,
// through table otherwise.
func showCmd[T any](cmd *cobra.Command, get func(context.Context, *client.Client, []string) (T, error), table func(io.Writer, T) error) *cobra.Command {
	var o clientOpts
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return o.do(cmd, func(ctx context.Context, c *client.Client) error {
			var raw json.RawMessage
			v, err := get(ctx, c.Raw(&raw), args)
			if err != nil {
				return err
			}
			if o.asJSON {
				_, err := cmd.OutOrStdout().Write(raw)
				return err
			}
			return table(cmd.OutOrStdout(), v)
		})
	}
	o.flags(cmd)
	return cmd
}

// lineCmd gives cmd the client flags and makes it call the API for its
// arguments and print the line call returns (--json or not).
func lineCmd(cmd *cobra.Command, call func(context.Context, *client.Client, []string) (string, error)) *cobra.Command {
	var o clientOpts
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return o.do(cmd, func(ctx context.Context, c *client.Client) error {
			line, err := call(ctx, c, args)
			if err == nil {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			return err
		})
	}
	o.flags(cmd)
	return cmd
}

func newSubmitCmd() *cobra.Command {
	var spec []byte
	return lineCmd(&cobra.Command{
		Use:   "submit JOB.yaml",
		Short: "Submit a job (YAML spec, see docs/worker-protocol.md and actors/jobspec) to the cluster",
		Args:  cobra.ExactArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return usage.Wrap(err)
			}
			defer f.Close()
			if spec, err = io.ReadAll(io.LimitReader(f, jobspec.MaxBytes+1)); err != nil {
				return usage.Wrap(err)
			}
			// Validate locally first for an immediate, precise error.
			catalog, err := builtin.Catalog()
			if err != nil {
				return err
			}
			if _, err := jobspec.ParseWith(spec, appLimits(catalog)); err != nil {
				return usage.Wrap(err)
			}
			return nil
		},
	}, func(ctx context.Context, c *client.Client, _ []string) (string, error) {
		id, err := c.Submit(ctx, spec)
		return "submitted " + id, err
	})
}

func newJobsCmd() *cobra.Command {
	return showCmd(&cobra.Command{Use: "jobs", Short: "List the cluster's jobs", Args: cobra.NoArgs},
		func(ctx context.Context, c *client.Client, _ []string) ([]api.Job, error) { return c.Jobs(ctx) }, client.WriteJobs)
}

func newNodesCmd() *cobra.Command {
	return showCmd(&cobra.Command{Use: "nodes", Short: "List the cluster's GPU nodes: health, GPUs, GPU type, rack and topology", Args: cobra.NoArgs},
		func(ctx context.Context, c *client.Client, _ []string) ([]api.Node, error) { return c.Nodes(ctx) }, client.WriteNodes)
}

func newStatusCmd() *cobra.Command {
	return showCmd(&cobra.Command{Use: "status", Short: "Show the cluster's leader, term, allocation generation and GPU use", Args: cobra.NoArgs},
		func(ctx context.Context, c *client.Client, _ []string) (api.Status, error) { return c.Status(ctx) }, client.WriteStatus)
}
