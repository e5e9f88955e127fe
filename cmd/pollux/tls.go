package main

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/usage"
)

func init() { subcommands = append(subcommands, newTLSCmd, newKeygenCmd) }

func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Make the cluster CA and the certificates of servers, agents and clients (docs/security.md)",
	}
	ca := &cobra.Command{Use: "ca", Short: "The cluster certificate authority"}
	ca.AddCommand(newTLSCACreateCmd())
	cert := &cobra.Command{Use: "cert", Short: "Certificates of servers, agents and clients"}
	cert.AddCommand(newTLSCertCreateCmd())
	cmd.AddCommand(ca, cert)
	return cmd
}

// pkiInput makes a bad name or file of package pki bad input.
func pkiInput(err error) error {
	if errors.Is(err, pki.ErrBadName) || errors.Is(err, pki.ErrBadFile) {
		return usage.Wrap(err)
	}
	return err
}

func newTLSCACreateCmd() *cobra.Command {
	var (
		dir, name string
		days      int
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create the cluster CA: " + pki.CAFile + " and " + pki.CAKeyFile + " in --dir",
		Long: "Creates a new cluster certificate authority (ECDSA P-256, valid --days days) in --dir: " +
			pki.CAFile + " (give it to every server, agent, worker and client as --ca) and " + pki.CAKeyFile +
			" (mode 0600: keep it off the cluster's machines; it signs certificates). Existing files are never replaced.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if days < 1 {
				return usage.Wrap(fmt.Errorf("tls ca create: --days %d, want >= 1", days))
			}
			ca, certPath, keyPath, err := pki.CreateCA(dir, pki.CAOptions{CommonName: name, Validity: time.Duration(days) * 24 * time.Hour})
			if err != nil {
				return pkiInput(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\nwrote %s\nCA %q valid until %s, SHA-256 fingerprint %s\n", certPath, keyPath,
				ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339), pki.Fingerprint(ca.Cert))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", ".", "directory to write the CA into")
	f.IntVar(&days, "days", int(pki.DefaultCAValidity/(24*time.Hour)), "days the CA is valid")
	f.StringVar(&name, "common-name", "", "the CA's common name (default \"pollux cluster CA\")")
	return cmd
}

func newTLSCertCreateCmd() *cobra.Command {
	var (
		dir, role, name, caPath, caKey, clusterName string
		hosts                                       []string
		days                                        int
	)
	cmd := &cobra.Command{
		Use:   "create --role server|agent|client --name NAME",
		Short: "Create a certificate signed by the cluster CA for one server, agent or client",
		Long: "Creates a certificate and key (ECDSA P-256, valid --days days, at most as long as the CA) for --role and " +
			"--name, signed by the CA in --dir (or --ca and --ca-key), and writes ROLE-NAME.pem and ROLE-NAME-key.pem " +
			"(mode 0600) into --dir. The certificate says its role and name (URI spiffe://pollux/ROLE/NAME, or " +
			"spiffe://CLUSTER/ROLE/NAME with --cluster, which a server of a federation needs: docs/federation.md): a server's " +
			"name must be its --id, an agent's its --name. Servers and agents get 127.0.0.1, ::1 and localhost " +
			"plus every --host (IP address or DNS name) they are reached at; clients get none. Existing files are never replaced.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if role == "" || name == "" {
				return usage.Wrap(errors.New("tls cert create: --role and --name are required"))
			}
			r, err := pki.ParseRole(role)
			if err != nil {
				return usage.Wrap(err)
			}
			if days < 1 {
				return usage.Wrap(fmt.Errorf("tls cert create: --days %d, want >= 1", days))
			}
			ca, err := pki.LoadCA(cmp.Or(caPath, filepath.Join(dir, pki.CAFile)), cmp.Or(caKey, filepath.Join(dir, pki.CAKeyFile)))
			if err != nil {
				return usage.Wrap(fmt.Errorf("tls cert create: %w (make a CA with pollux tls ca create)", err))
			}
			id := pki.Identity{Role: r, Name: name, Cluster: clusterName}
			is, certPath, keyPath, err := ca.IssueTo(dir, pki.CertRequest{Identity: id, Hosts: hosts, Validity: time.Duration(days) * 24 * time.Hour})
			if err != nil {
				return pkiInput(fmt.Errorf("tls cert create: %w", err))
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s\nwrote %s\n%s %s (%s) valid until %s", certPath, keyPath, r, name, id.URI(), is.Cert.NotAfter.UTC().Format(time.RFC3339))
			if r != pki.RoleClient {
				fmt.Fprintf(out, " for %v %v", is.Cert.IPAddresses, is.Cert.DNSNames)
			}
			fmt.Fprintln(out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", ".", "directory of the CA and of the new files")
	f.StringVar(&role, "role", "", "server, agent or client (required)")
	f.StringVar(&name, "name", "", "the holder's name: a server's --id, an agent's --name, a user's name (required)")
	f.StringVar(&clusterName, "cluster", "", "the holder's cluster, for a server of a federation (its pollux server --cluster; empty: none)")
	f.StringArrayVar(&hosts, "host", nil, "IP address or DNS name the server or agent is reached at (repeatable)")
	f.IntVar(&days, "days", int(pki.DefaultCertValidity/(24*time.Hour)), "days the certificate is valid")
	f.StringVar(&caPath, "ca", "", "CA certificate (default DIR/"+pki.CAFile+")")
	f.StringVar(&caKey, "ca-key", "", "CA key (default DIR/"+pki.CAKeyFile+")")
	return cmd
}

func newKeygenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen",
		Short: "Print a new random gossip encryption key (base64, AES-256) for --gossip-key files",
		Long: "Prints a new 32-byte gossip key, base64-encoded. Put it in a file (mode 0600) given to every " +
			"server and agent as --gossip-key. A file may hold several keys, one per line: the first encrypts, " +
			"all decrypt; docs/security.md describes a rotation without downtime (edit the file, send SIGHUP).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := cluster.NewKey()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), k)
			return nil
		},
	}
}

// noArgs refuses positional arguments as bad input (exit status 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usage.Wrap(err)
	}
	return nil
}
