package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
	"pollux/internal/backup"
	"pollux/internal/usage"
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
				return usage.Wrap(fmt.Errorf("operator raft: unknown command %q (list-peers, add-server, remove-server)", args[0]))
			}
			return usage.Wrap(errors.New("operator raft: want list-peers, add-server or remove-server"))
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	rf.AddCommand(newListPeersCmd(), newAddServerCmd(), newRemoveServerCmd())
	snap := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up and restore the replicated state: save FILE, restore FILE",
		Long: "save writes the replicated state (jobs, nodes, tokens, allocation; the leader's, after every " +
			"write before it) to FILE, readable by its owner only: it holds the tokens' hashes. restore replaces the " +
			"state of a running cluster (a new one, after a loss of every server's data) with such a file; the " +
			"cluster keeps its own Raft membership. docs/deploy.md, Backup and restore.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usage.Wrap(fmt.Errorf("operator snapshot: unknown command %q (save, restore)", args[0]))
			}
			return usage.Wrap(errors.New("operator snapshot: want save FILE or restore FILE"))
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	snap.AddCommand(newSnapshotSaveCmd(), newSnapshotRestoreCmd())
	op.AddCommand(rf, snap)
	return op
}

func newSnapshotSaveCmd() *cobra.Command {
	return lineCmd(&cobra.Command{
		Use:   "save FILE",
		Short: "Write a backup of the replicated state to FILE (mode 0600)",
		Args:  exactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (string, error) {
		b, err := c.SaveSnapshot(ctx)
		if err != nil {
			return "", err
		}
		if err := backup.WriteFile(args[0], b); err != nil {
			return "", err
		}
		return fmt.Sprintf("saved %d bytes to %s", len(b), args[0]), nil
	})
}

func newSnapshotRestoreCmd() *cobra.Command {
	return lineCmd(&cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the cluster's replicated state with the backup in FILE",
		Args:  exactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (string, error) {
		b, err := backup.ReadFile(args[0])
		if err != nil {
			return "", usage.Wrap(err)
		}
		r, err := c.RestoreSnapshot(ctx, b)
		return fmt.Sprintf("restored %d bytes from %s: %d jobs", r.Bytes, args[0], r.Jobs), err
	})
}

func newListPeersCmd() *cobra.Command {
	return showCmd(&cobra.Command{
		Use:   "list-peers",
		Short: "List the Raft servers: id, address, voter, leader, alive and rack (as gossip sees them); warns when a majority of the voters share a rack",
		Args:  cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) ([]api.Peer, error) { return c.Peers(ctx) }, client.WritePeers)
}

func newAddServerCmd() *cobra.Command {
	return lineCmd(&cobra.Command{
		Use:   "add-server ID RAFT-ADDR",
		Short: "Make a running server (started without --bootstrap) a voter of the cluster",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usage.Wrap(fmt.Errorf("add-server: want ID and RAFT-ADDR (host:port), got %d arguments", len(args)))
			}
			return nil
		},
	}, func(ctx context.Context, c *client.Client, args []string) (string, error) {
		return fmt.Sprintf("added %s at %s", args[0], args[1]), c.AddPeer(ctx, api.AddPeer{ID: args[0], Address: args[1]})
	})
}

func newRemoveServerCmd() *cobra.Command {
	return lineCmd(&cobra.Command{
		Use:   "remove-server ID",
		Short: "Remove a server from the cluster (refused if the rest could not make progress)",
		Args:  exactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (string, error) {
		return "removed " + args[0], c.RemovePeer(ctx, args[0])
	})
}
