package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
	"pollux/consensus/state"
	"pollux/internal/usage"
)

func init() { subcommands = append(subcommands, newACLCmd) }

func newACLCmd() *cobra.Command {
	acl := &cobra.Command{
		Use:   "acl",
		Short: "API tokens: bootstrap the first admin token, create, list and revoke tokens",
		Long: "Every API request needs a token (--token or $" + client.EnvToken + ") whose role allows it: read (jobs, job, " +
			"nodes, status, metrics), submit (also submit, and cancel the jobs it submitted), admin (also cancel any job, " +
			"operator raft, acl token). `pollux acl bootstrap` makes the cluster's first admin token, once in its life; " +
			"admins then create a token per user or tool and revoke them when they leave (docs/security.md).",
	}
	tok := &cobra.Command{Use: "token", Short: "Create, list and revoke API tokens (admin)"}
	tok.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd(), newTokenSelfCmd())
	quota := &cobra.Command{Use: "quota", Short: "List and set the submitters' quotas and the state budget (admin)"}
	quota.AddCommand(newQuotaListCmd(), newQuotaSetCmd())
	acl.AddCommand(newACLBootstrapCmd(), tok, quota)
	return acl
}

func newACLBootstrapCmd() *cobra.Command {
	var secretFile string
	var b api.Bootstrap
	var cmd *cobra.Command
	cmd = showCmd(&cobra.Command{
		Use:   "bootstrap",
		Short: "Make the cluster's first admin token (works once in a cluster's life)",
		Long: "Makes the cluster's bootstrap token, an admin token, and prints its secret once. It works once in the " +
			"cluster's life (it is in the replicated state: a new leader knows it was made). On a cluster with TLS it " +
			"needs a client certificate of the cluster CA (--cert/--key, `pollux tls cert create --role client`), so " +
			"that nobody who merely reaches the API can take a new cluster first. With --secret-file the token's secret " +
			"is the one in FILE (at least 32 printable characters, made by you, e.g. from /dev/urandom): the command is " +
			"then safe to repeat (the same secret answers OK), and the secret never crosses the network from the server. " +
			"Its last line sets $" + client.EnvServers + ", $" + client.EnvCA + " and $" + client.EnvToken + " for the CLI when a shell " +
			"evaluates it (the token read from --secret-file then, not shown): eval \"$(pollux acl bootstrap ... | tail -n 1)\".",
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if secretFile == "" {
				return nil
			}
			data, err := os.ReadFile(secretFile)
			if err != nil {
				return usage.Wrap(fmt.Errorf("acl bootstrap: --secret-file: %w", err))
			}
			if len(data) > 4096 {
				return usage.Wrap(fmt.Errorf("acl bootstrap: --secret-file %s holds %d bytes (a secret is at most %d characters)", secretFile, len(data), api.MaxSecret))
			}
			b.Secret = strings.TrimSpace(string(data))
			return nil
		},
	}, func(ctx context.Context, c *client.Client, _ []string) (api.Token, error) {
		return c.Bootstrap(ctx, b)
	}, func(w io.Writer, t api.Token) error {
		fmt.Fprintln(w, "bootstrap token made:")
		if err := client.WriteToken(w, t); err != nil {
			return err
		}
		line, err := bootstrapExports(cmd, secretFile, t.Secret)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "to point the pollux CLI at this cluster, run (or paste) in a shell:\n%s\n", line)
		return err
	})
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "file holding the secret the bootstrap token gets (default: the server makes one)")
	return cmd
}

// bootstrapExports is the shell line that points the CLI at the servers
// and CA cmd ran with and at the bootstrap token: read from secretFile
// when evaluated if there is one, else the secret the server made.
func bootstrapExports(cmd *cobra.Command, secretFile, secret string) (string, error) {
	servers, err := cmd.Flags().GetStringSlice("server")
	if err != nil {
		return "", err
	}
	ca, err := cmd.Flags().GetString("ca")
	if err != nil {
		return "", err
	}
	abs := func(p string) (string, error) {
		if p == "" {
			return "", nil
		}
		return filepath.Abs(p)
	}
	if ca, err = abs(ca); err != nil {
		return "", fmt.Errorf("acl bootstrap: --ca: %w", err)
	}
	if secretFile == "" {
		return client.ExportsSecret(servers, ca, secret), nil
	}
	if secretFile, err = abs(secretFile); err != nil {
		return "", fmt.Errorf("acl bootstrap: --secret-file: %w", err)
	}
	return client.Exports(servers, ca, secretFile), nil
}

func newTokenCreateCmd() *cobra.Command {
	var name, role string
	cmd := showCmd(&cobra.Command{
		Use:   "create --name NAME --role read|submit|admin",
		Short: "Create a token and print its secret (once)",
		Args:  exactArgs(0),
		PreRunE: func(*cobra.Command, []string) error {
			if name == "" {
				return usage.Wrap(errors.New("acl token create: --name is required"))
			}
			if _, err := state.ParseRole(role); err != nil {
				return usage.Wrap(fmt.Errorf("acl token create: --role %q: want read, submit or admin", role))
			}
			return nil
		},
	}, func(ctx context.Context, c *client.Client, _ []string) (api.Token, error) {
		return c.CreateToken(ctx, api.NewToken{Name: name, Role: role})
	}, client.WriteToken)
	cmd.Flags().StringVar(&name, "name", "", "who or what holds the token, shown as the submitter of its jobs (no spaces, at most 64 bytes)")
	cmd.Flags().StringVar(&role, "role", "", "read, submit or admin")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	return showCmd(&cobra.Command{Use: "list", Short: "List the tokens (never their secrets), revoked ones included", Args: exactArgs(0)},
		func(ctx context.Context, c *client.Client, _ []string) ([]api.Token, error) { return c.Tokens(ctx) }, client.WriteTokens)
}

func newTokenRevokeCmd() *cobra.Command {
	return showCmd(&cobra.Command{
		Use:   "revoke ACCESSOR",
		Short: "Revoke a token for good (every server refuses it once the revocation commits)",
		Args:  exactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (api.Token, error) {
		return c.RevokeToken(ctx, args[0])
	}, func(w io.Writer, t api.Token) error {
		_, err := fmt.Fprintf(w, "revoked %s (%s, %s)\n", t.Accessor, t.Name, t.Role)
		return err
	})
}

func newTokenSelfCmd() *cobra.Command {
	return showCmd(&cobra.Command{Use: "self", Short: "Show the token the command runs with (any role)", Args: exactArgs(0)},
		func(ctx context.Context, c *client.Client, _ []string) (api.Token, error) { return c.Self(ctx) }, client.WriteToken)
}

func newQuotaListCmd() *cobra.Command {
	return showCmd(&cobra.Command{Use: "list", Short: "List the default quota, the state budget and every token's quota and use", Args: exactArgs(0)},
		func(ctx context.Context, c *client.Client, _ []string) (api.Quotas, error) { return c.Quotas(ctx) }, client.WriteQuotas)
}

func newQuotaSetCmd() *cobra.Command {
	var q api.SetQuota
	cmd := showCmd(&cobra.Command{
		Use:   "set ACCESSOR|default [--jobs N] [--spec-bytes N] [--rate R] [--burst N] [--state-budget BYTES]",
		Short: "Set a token's quota, or the defaults and the state budget",
		Long: "Sets the quota of the token ACCESSOR, or with `default` the quota of every token without one of its own and " +
			"the cluster's state budget (bytes of job specs the state holds). The quota replaces what was set before; a flag " +
			"left out (0) takes the default, so `set ACCESSOR` alone gives a token the defaults again. Past a quota a " +
			"submission gets 429 and Retry-After; past the state budget 507 (docs/security.md, Tenants).",
		Args: exactArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error {
			if args[0] != "default" {
				q.Accessor = args[0]
				if q.StateBudget != 0 {
					return usage.Wrap(errors.New("acl quota set: --state-budget is the cluster's: use `pollux acl quota set default --state-budget N`"))
				}
			}
			return nil
		},
	}, func(ctx context.Context, c *client.Client, _ []string) (api.SetQuota, error) {
		return c.SetQuota(ctx, q)
	}, func(w io.Writer, s api.SetQuota) error {
		who := cmp.Or(s.Accessor, "default")
		_, err := fmt.Fprintf(w, "quota of %s: %d jobs, %d spec bytes, %g submissions/s (burst %d); 0 is the default\n",
			who, s.Quota.Jobs, s.Quota.SpecBytes, s.Quota.Rate, s.Quota.Burst)
		return err
	})
	f := cmd.Flags()
	f.IntVar(&q.Quota.Jobs, "jobs", 0, "running plus pending jobs (0: the default)")
	f.Int64Var(&q.Quota.SpecBytes, "spec-bytes", 0, "bytes of the specs of its jobs the state holds, finished ones until pruned (0: the default)")
	f.Float64Var(&q.Quota.Rate, "rate", 0, "submissions per second over all servers (0: the default)")
	f.IntVar(&q.Quota.Burst, "burst", 0, "submissions at once (0: the default)")
	f.Int64Var(&q.StateBudget, "state-budget", 0, "with default: bytes of job specs the whole state may hold (0: the built-in budget)")
	return cmd
}
