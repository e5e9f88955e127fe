package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/server/api"
	"pollux/consensus/state"
)

func init() { subcommands = append(subcommands, newACLCmd) }

func newACLCmd() *cobra.Command {
	acl := &cobra.Command{
		Use:   "acl",
		Short: "API tokens: bootstrap the first admin token, create, list and revoke tokens",
		Long: "Every API request needs a token (--token or $" + EnvToken + ") whose role allows it: read (jobs, job, " +
			"nodes, status, metrics), submit (also submit, and cancel the jobs it submitted), admin (also cancel any job, " +
			"operator raft, acl token). `pollux acl bootstrap` makes the cluster's first admin token, once in its life; " +
			"admins then create a token per user or tool and revoke them when they leave (docs/security.md).",
	}
	tok := &cobra.Command{Use: "token", Short: "Create, list and revoke API tokens (admin)"}
	tok.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd(), newTokenSelfCmd())
	acl.AddCommand(newACLBootstrapCmd(), tok)
	return acl
}

// printToken prints a token, with its secret if the answer has one.
func printToken(w io.Writer, t api.Token) {
	state := "live"
	if t.Revoked {
		state = "revoked " + when(t.RevokeTime)
	}
	fmt.Fprintf(w, "accessor %s\nname     %s\nrole     %s\ncreated  %s\nstate    %s\n", t.Accessor, t.Name, t.Role, when(t.CreateTime), state)
	if t.Secret != "" {
		fmt.Fprintf(w, "secret   %s\n(shown only now: the cluster keeps its hash, not the secret. Pass it as $%s or --token.)\n", t.Secret, EnvToken)
	}
}

func when(t float64) string {
	if t == 0 {
		return "-"
	}
	return time.Unix(0, int64(t*1e9)).UTC().Format(time.RFC3339)
}

func newACLBootstrapCmd() *cobra.Command {
	var o clientOpts
	var secretFile string
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Make the cluster's first admin token (works once in a cluster's life)",
		Long: "Makes the cluster's bootstrap token, an admin token, and prints its secret once. It works once in the " +
			"cluster's life (it is in the replicated state: a new leader knows it was made). On a cluster with TLS it " +
			"needs a client certificate of the cluster CA (--cert/--key, `pollux tls cert create --role client`), so " +
			"that nobody who merely reaches the API can take a new cluster first. With --secret-file the token's secret " +
			"is the one in FILE (at least 32 printable characters, made by you, e.g. from /dev/urandom): the command is " +
			"then safe to repeat (the same secret answers OK), and the secret never crosses the network from the server.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var body []byte
			if secretFile != "" {
				b, err := os.ReadFile(secretFile)
				if err != nil {
					return badInput(fmt.Errorf("acl bootstrap: --secret-file: %w", err))
				}
				if len(b) > 4096 {
					return badInput(fmt.Errorf("acl bootstrap: --secret-file %s holds %d bytes (a secret is at most %d characters)", secretFile, len(b), api.MaxSecret))
				}
				body, _ = json.Marshal(api.Bootstrap{Secret: strings.TrimSpace(string(b))})
			}
			return o.postToken(cmd, api.PathACLBootstrap, body, func(w io.Writer, t api.Token) {
				fmt.Fprintln(w, "bootstrap token made:")
				printToken(w, t)
			})
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&secretFile, "secret-file", "", "file holding the secret the bootstrap token gets (default: the server makes one)")
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var o clientOpts
	var name, role string
	cmd := &cobra.Command{
		Use:   "create --name NAME --role read|submit|admin",
		Short: "Create a token and print its secret (once)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return badInput(errors.New("acl token create: --name is required"))
			}
			if _, err := state.ParseRole(role); err != nil {
				return badInput(fmt.Errorf("acl token create: --role %q: want read, submit or admin", role))
			}
			body, _ := json.Marshal(api.NewToken{Name: name, Role: role})
			return o.postToken(cmd, api.PathACLTokens, body, printToken)
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&name, "name", "", "who or what holds the token, shown as the submitter of its jobs (no spaces, at most 64 bytes)")
	cmd.Flags().StringVar(&role, "role", "", "read, submit or admin")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tokens (never their secrets), revoked ones included",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.show(cmd, api.PathACLTokens, func(w io.Writer, raw []byte) error {
				var ts []api.Token
				if err := json.Unmarshal(raw, &ts); err != nil {
					return err
				}
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
			})
		},
	}
	o.flags(cmd)
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "revoke ACCESSOR",
		Short: "Revoke a token for good (every server refuses it once the revocation commits)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.postToken(cmd, api.PathACLTokens+"/"+url.PathEscape(args[0])+"/revoke", nil, func(w io.Writer, t api.Token) {
				fmt.Fprintf(w, "revoked %s (%s, %s)\n", t.Accessor, t.Name, t.Role)
			})
		},
	}
	o.flags(cmd)
	return cmd
}

func newTokenSelfCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "self",
		Short: "Show the token the command runs with (any role)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.show(cmd, api.PathACLSelf, func(w io.Writer, raw []byte) error {
				var t api.Token
				if err := json.Unmarshal(raw, &t); err != nil {
					return err
				}
				printToken(w, t)
				return nil
			})
		},
	}
	o.flags(cmd)
	return cmd
}

// postToken posts body to path and prints the token answered: as the
// server sent it with --json, through show otherwise.
func (o *clientOpts) postToken(cmd *cobra.Command, path string, body []byte, show func(io.Writer, api.Token)) error {
	var raw json.RawMessage
	if err := o.call(cmd.Context(), http.MethodPost, path, body, &raw); err != nil {
		return err
	}
	if o.asJSON {
		_, err := cmd.OutOrStdout().Write(raw)
		return err
	}
	var t api.Token
	if err := json.Unmarshal(raw, &t); err != nil {
		return err
	}
	show(cmd.OutOrStdout(), t)
	return nil
}
