package attack

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"pollux/cluster"
)

// gossipJoin is a gossip member that tries to join the cluster through
// the leader's gossip port without the cluster's key (keyless: none at
// all; else a key of its own), claiming to be an agent named name with
// gpus GPUs. Refused if the join fails and, after a few gossip rounds,
// no node of that name (or, for an impersonation, no change to it) is
// registered, and the leader's own log holds its memberlist's refusal
// of a stream from the intruder (it could not decrypt it) written during
// the case; the observer checks the nodes too.
func gossipJoin(name string, gpus int, keyless bool) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		var keys [][]byte
		if !keyless {
			k, err := cluster.NewKey()
			if err != nil {
				return err.Error(), false
			}
			if keys, err = cluster.ParseKeys([]byte(k)); err != nil {
				return err.Error(), false
			}
		}
		m, err := cluster.Start(cluster.Config{Name: name, Fast: true, Keys: keys, Logger: slog.New(slog.DiscardHandler),
			Meta: cluster.Meta{Role: cluster.RoleAgent, GPUs: gpus, ActorAddr: "127.0.0.1:1"}})
		if err != nil {
			return "cannot start a gossip member: " + err.Error(), false
		}
		defer m.Shutdown()
		offset := t.logSize(t.leader)
		n, err := m.Join([]string{t.leader.Gossip})
		if err == nil {
			return fmt.Sprintf("joined through %d members", n), false
		}
		// A member that got in anyway would be registered within a
		// round or two.
		time.Sleep(2 * time.Second)
		nodes, rerr := getJSON[[]nodeView](ctx, t, "/v1/nodes")
		if rerr != nil {
			return "join refused (" + err.Error() + "), but the nodes cannot be read: " + rerr.Error(), false
		}
		for _, nd := range nodes {
			if nd.ID == name && nd.GPUs == gpus {
				return fmt.Sprintf("join failed (%v) but %s is registered with %d GPUs", err, name, gpus), false
			}
		}
		line, ok := t.logLineAfter(t.leader, offset, "memberlist: failed to receive", "from=127.0.0.1:")
		if !ok {
			return fmt.Sprintf("join failed (%v) and no node %s registered, but %s logged no refusal of the intruder's stream", err, name, t.leader.ID), false
		}
		return fmt.Sprintf("join refused: %v; no node %s with %d GPUs registered; %s logged: %s", err, name, gpus, t.leader.ID, logMsg(line)), true
	}
}

type nodeView struct {
	ID   string `json:"id"`
	GPUs int    `json:"gpus"`
}
