package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"pollux/actors/server/api"
)

func init() { subcommands = append(subcommands, newOperatorCmd) }

func newOperatorCmd() *cobra.Command {
	op := &cobra.Command{Use: "operator", Short: "Operate the cluster itself"}
	rf := &cobra.Command{
		Use:   "raft",
		Short: "The servers of the replicated state: list-peers, add-server, remove-server",
		Long: "Replaces a server that died for good in a running cluster: start the new server (pollux server " +
			"without --bootstrap, joining the gossip), `add-server ID RAFT-ADDR` it, then `remove-server` the dead " +
			"one. A removal that would leave fewer live voters than a quorum (the last voter, or a majority of the " +
			"cluster) is refused with the reason.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return badInput(fmt.Errorf("operator raft: unknown command %q (list-peers, add-server, remove-server)", args[0]))
			}
			return badInput(errors.New("operator raft: want list-peers, add-server or remove-server"))
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	rf.AddCommand(newListPeersCmd(), newAddServerCmd(), newRemoveServerCmd())
	op.AddCommand(rf)
	return op
}

func newListPeersCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "list-peers",
		Short: "List the Raft servers: id, address, voter, leader, alive and rack (as gossip sees them); warns when a majority of the voters share a rack",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.show(cmd, api.PathPeers, func(w io.Writer, raw []byte) error {
				var peers []api.Peer
				if err := json.Unmarshal(raw, &peers); err != nil {
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tADDRESS\tVOTER\tLEADER\tALIVE\tRACK")
				for _, p := range peers {
					fmt.Fprintf(tw, "%s\t%s\t%t\t%t\t%t\t%s\n", p.ID, p.Address, p.Voter, p.Leader, p.Alive, cmp.Or(p.Rack, "?"))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if rack, ids := api.RackMajority(peers); rack != "" {
					fmt.Fprintf(w, "warning: a majority of the voters (%s) share rack %s: losing that rack loses the quorum; "+
						"start servers in other racks (pollux server --topology rack=R)\n", strings.Join(ids, ", "), rack)
				}
				return nil
			})
		},
	}
	o.flags(cmd)
	return cmd
}

func newAddServerCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "add-server ID RAFT-ADDR",
		Short: "Make a running server (started without --bootstrap) a voter of the cluster",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return badInput(fmt.Errorf("add-server: want ID and RAFT-ADDR (host:port), got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			body, _ := json.Marshal(api.AddPeer{ID: args[0], Address: args[1]})
			var res map[string]string
			if err := o.call(cmd.Context(), http.MethodPost, api.PathPeers, body, &res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s at %s\n", res["id"], res["address"])
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}

func newRemoveServerCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "remove-server ID",
		Short: "Remove a server from the cluster (refused if the rest could not make progress)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res map[string]string
			if err := o.call(cmd.Context(), http.MethodDelete, api.PathPeers+"/"+url.PathEscape(args[0]), nil, &res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", res["id"])
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}
