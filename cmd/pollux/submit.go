package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/jobspec"
	"pollux/actors/server/api"
	"pollux/cluster/pki"
)

func init() {
	subcommands = append(subcommands, newSubmitCmd, newJobsCmd, newNodesCmd, newStatusCmd)
}

// clientOpts are the flags every API client command takes.
type clientOpts struct {
	servers   []string
	ca        string
	token     string
	cert, key string
	asJSON    bool
	timeout   time.Duration
}

// Environment variables the client flags default to.
const (
	EnvCA         = "POLLUX_CA"
	EnvToken      = "POLLUX_TOKEN"
	EnvClientCert = "POLLUX_CLIENT_CERT"
	EnvClientKey  = "POLLUX_CLIENT_KEY"
)

func (o *clientOpts) flags(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&o.servers, "server", []string{"127.0.0.1:8080"}, "API addresses of servers, tried in order: host:port is HTTPS; http://host:port a server running --insecure")
	cmd.Flags().StringVar(&o.ca, "ca", os.Getenv(EnvCA), "cluster CA certificate the servers' certificates are checked against (default $"+EnvCA+")")
	// The token's default is read when the command runs, so that --help
	// never prints a secret.
	cmd.Flags().StringVar(&o.token, "token", "", "API token secret (default $"+EnvToken+", which keeps it out of the process list)")
	cmd.Flags().StringVar(&o.cert, "cert", os.Getenv(EnvClientCert), "client certificate of the cluster CA to show (default $"+EnvClientCert+"; pollux acl bootstrap needs one)")
	cmd.Flags().StringVar(&o.key, "key", os.Getenv(EnvClientKey), "key of --cert (default $"+EnvClientKey+")")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print the server's JSON answer")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 15*time.Second, "give up after this long")
}

// secret is the API token: --token, else $POLLUX_TOKEN.
func (o *clientOpts) secret() string {
	if o.token != "" {
		return strings.TrimSpace(o.token)
	}
	return strings.TrimSpace(os.Getenv(EnvToken))
}

// client is the HTTP client of the API: HTTPS checking that the server
// holds a server certificate of --ca, showing --cert if given. It sends
// the token again when it follows a redirect to another server of the
// cluster (membership changes go to the leader's API).
func (o *clientOpts) client() (*http.Client, error) {
	var pool *x509.CertPool
	if o.ca != "" {
		p, err := pki.LoadPool(o.ca)
		if err != nil {
			return nil, badInput(fmt.Errorf("--ca: %w", err))
		}
		pool = p
	}
	var cert *tls.Certificate
	if o.cert != "" || o.key != "" {
		if o.cert == "" || o.key == "" {
			return nil, badInput(errors.New("--cert and --key go together"))
		}
		c, err := tls.LoadX509KeyPair(o.cert, o.key)
		if err != nil {
			return nil, badInput(fmt.Errorf("--cert/--key: %w", err))
		}
		cert = &c
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = pki.APIClient(pool, cert)
	return &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("stopped after 5 redirects")
		}
		if h := via[0].Header.Get("Authorization"); h != "" && req.Header.Get("Authorization") == "" &&
			(req.URL.Scheme == "https" || via[0].URL.Scheme == "http") {
			req.Header.Set("Authorization", h)
		}
		return nil
	}}, nil
}

// apiURL is the URL of path on server s: HTTPS unless s says http://.
func apiURL(s, path string) string {
	if strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
		return strings.TrimSuffix(s, "/") + path
	}
	return "https://" + s + path
}

// explain adds what to do to a TLS failure of the API client.
func explain(err error, ca string) error {
	var ua x509.UnknownAuthorityError
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ua) || errors.As(err, &cv):
		if ca == "" {
			return fmt.Errorf("%w (pass the cluster CA with --ca or $%s)", err, EnvCA)
		}
		return fmt.Errorf("%w (is --ca %s the CA of this cluster?)", err, ca)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w (the server runs --insecure: give its address as http://HOST:PORT)", err)
	}
	return err
}

// errAPI is an answer of the API refusing the request.
var errAPI = errors.New("refused")

// call sends one request to the first server that answers. A 4xx answer
// is bad input (errAPI wrapped in badInput); a 5xx or an unreachable
// server moves on to the next.
func (o *clientOpts) call(ctx context.Context, method, path string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	client, err := o.client()
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	var errs []error
	for _, s := range o.servers {
		req, err := http.NewRequestWithContext(ctx, method, apiURL(s, path), bytes.NewReader(body))
		if err != nil {
			return badInput(fmt.Errorf("server %q: %w", s, err))
		}
		if secret := o.secret(); secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := client.Do(req)
		if err != nil {
			errs = append(errs, explain(err, o.ca))
			continue
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.StatusCode >= 300 {
			var e api.Error
			msg := strings.TrimSpace(string(data))
			if json.Unmarshal(data, &e) == nil && e.Error != "" {
				msg = e.Error
			}
			if resp.StatusCode < 500 {
				return badInput(fmt.Errorf("%w (%s): %s", errAPI, resp.Status, msg))
			}
			errs = append(errs, fmt.Errorf("%s: %s: %s", s, resp.Status, msg))
			continue
		}
		if raw, ok := out.(*json.RawMessage); ok {
			*raw = data
			return nil
		}
		return json.Unmarshal(data, out)
	}
	return fmt.Errorf("no server answered: %w", errors.Join(errs...))
}

func newSubmitCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "submit JOB.yaml",
		Short: "Submit a job (YAML spec, see docs/worker-protocol.md and actors/jobspec) to the cluster",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return badInput(err)
			}
			defer f.Close()
			body, err := io.ReadAll(io.LimitReader(f, jobspec.MaxBytes+1))
			if err != nil {
				return badInput(err)
			}
			// Validate locally first for an immediate, precise error.
			if _, err := jobspec.Parse(body); err != nil {
				return badInput(err)
			}
			var res map[string]string
			if err := o.call(cmd.Context(), http.MethodPost, api.PathJobs, body, &res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "submitted %s\n", res["id"])
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}

// epochOf is a job's EPOCH column: its epoch, over the epochs it
// declared if it declared them.
func epochOf(j api.Job) string {
	if j.Epochs > 0 {
		return fmt.Sprintf("%d/%d", j.Epoch, j.Epochs)
	}
	return strconv.Itoa(j.Epoch)
}

func newJobsCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List the cluster's jobs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.show(cmd, api.PathJobs, func(w io.Writer, raw []byte) error {
				var jobs []api.Job
				if err := json.Unmarshal(raw, &jobs); err != nil {
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "JOB\tSTATE\tAPP\tGPUS\tNODES\tEPOCH\tRESTARTS\tINCARNATION\tSUBMITTER")
				for _, j := range jobs {
					by := j.Submitter
					if by == "" {
						by = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%s\n", j.ID, j.State, j.App, j.GPUs, j.Nodes, epochOf(j), j.Restarts, j.Incarnation, by)
				}
				return tw.Flush()
			})
		},
	}
	o.flags(cmd)
	return cmd
}

func newNodesCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List the cluster's GPU nodes: health, GPUs, GPU type, rack and topology",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.show(cmd, api.PathNodes, func(w io.Writer, raw []byte) error {
				var nodes []api.Node
				if err := json.Unmarshal(raw, &nodes); err != nil {
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NODE\tHEALTH\tGPUS\tUSED\tGPU TYPE\tRACK\tTOPOLOGY\tADDRESS")
				for _, n := range nodes {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", n.ID, n.Health, n.GPUs, n.Used, cmp.Or(n.GPUType, "-"), n.Rack,
						cmp.Or(n.Topology, "-"), n.Address)
				}
				return tw.Flush()
			})
		},
	}
	o.flags(cmd)
	return cmd
}

func newStatusCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's leader, term, allocation generation and GPU use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.show(cmd, api.PathStatus, func(w io.Writer, raw []byte) error {
				var s api.Status
				if err := json.Unmarshal(raw, &s); err != nil {
					return err
				}
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
				return nil
			})
		},
	}
	o.flags(cmd)
	return cmd
}

// show GETs path and prints it as JSON or through table.
func (o *clientOpts) show(cmd *cobra.Command, path string, table func(io.Writer, []byte) error) error {
	var raw json.RawMessage
	if err := o.call(cmd.Context(), http.MethodGet, path, nil, &raw); err != nil {
		return err
	}
	if o.asJSON {
		_, err := cmd.OutOrStdout().Write(raw)
		return err
	}
	return table(cmd.OutOrStdout(), raw)
}
