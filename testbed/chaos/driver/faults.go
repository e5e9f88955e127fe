package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/schedule"
	"pollux/testbed/launch"
)

// The network faults' parameters (docs/reliability.md).
const (
	lossRate   = 0.30
	addedDelay = 200 * time.Millisecond
)

// sleepUntil waits until the fault phase reaches t.
func (r *run) sleepUntil(ctx context.Context, t time.Duration) error {
	if d := t - r.since(); d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return nil
}

// inject runs the schedule. A fault's times are relative: it begins its
// scheduled gap after the previous fault's actual end, so that a slow
// step (waiting for a leader) never makes faults overlap.
func (r *run) inject(ctx context.Context) error {
	shift := time.Duration(0)
	prevEnd := time.Duration(0)
	for _, f := range r.faults {
		if err := r.sleepUntil(ctx, f.At+shift); err != nil {
			return err
		}
		r.log.Info("driver: fault", "fault", f.String())
		began := r.since()
		if err := r.one(ctx, f); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Not injected: the checker counts it against the run.
			r.log.Error("driver: fault not injected", "fault", f.String(), "err", err)
		}
		shift += max(0, r.since()-began-(f.End()-f.At))
		prevEnd = f.End() + shift
	}
	return r.sleepUntil(ctx, prevEnd)
}

// pick returns candidate p % n.
func pick[T any](cands []T, p uint32) T { return cands[int(p%uint32(len(cands)))] }

// begin records the start of fault f.
func (r *run) begin(f schedule.Fault, targets []string, leader string, deposes bool) {
	r.event(history.Event{Kind: history.FaultBegin, Fault: string(f.Kind), Seq: f.Seq, Targets: targets, Leader: leader, Deposes: deposes})
}

// end records that fault f's victims are back.
func (r *run) end(f schedule.Fault) {
	r.event(history.Event{Kind: history.FaultEnd, Fault: string(f.Kind), Seq: f.Seq})
}

func (r *run) event(e history.Event) {
	if _, err := r.c.History().Event(e); err != nil {
		r.log.Error("driver: history", "err", err)
	}
}

// ids returns the members' ids.
func ids(ms []*launch.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// one injects fault f and heals it; an error means it was not injected
// in full (no fault_end).
func (r *run) one(ctx context.Context, f schedule.Fault) error {
	kind, seq := string(f.Kind), f.Seq
	c := r.c
	down := func() error { return r.sleepUntil(ctx, r.since()+f.Down) }
	switch f.Kind {
	case schedule.LeaderKill, schedule.LeaderPause:
		leader, _, err := c.Leader(ctx, 15*time.Second)
		if err != nil {
			return err
		}
		r.begin(f, []string{leader.ID}, leader.ID, true)
		if f.Kind == schedule.LeaderPause {
			if err := c.Signal(leader, syscall.SIGSTOP, kind, seq); err != nil {
				return err
			}
			r.probe(seq)
			derr := down()
			if err := c.Signal(leader, syscall.SIGCONT, kind, seq); err != nil || derr != nil {
				return fmt.Errorf("resuming %s: %v %v", leader.ID, err, derr)
			}
		} else {
			if err := c.Kill(leader, kind, seq); err != nil {
				return err
			}
			r.probe(seq)
			if err := down(); err != nil {
				return err
			}
			if err := c.Start(ctx, leader, kind, seq); err != nil {
				return err
			}
		}
	case schedule.FollowerKill:
		leader, _, err := c.Leader(ctx, 15*time.Second)
		if err != nil {
			return err
		}
		var fs []*launch.Member
		for _, m := range c.Servers {
			if m.Running() && m != leader {
				fs = append(fs, m)
			}
		}
		if len(fs) == 0 {
			return fmt.Errorf("no follower runs")
		}
		victim := pick(fs, f.Pick)
		r.begin(f, []string{victim.ID}, leader.ID, false)
		if err := c.Kill(victim, kind, seq); err != nil {
			return err
		}
		if err := down(); err != nil {
			return err
		}
		if err := c.Start(ctx, victim, kind, seq); err != nil {
			return err
		}
	case schedule.ColdRestart:
		r.begin(f, ids(c.Servers), "", false)
		for _, m := range c.Servers {
			if err := c.Kill(m, kind, seq); err != nil {
				return err
			}
		}
		if err := down(); err != nil {
			return err
		}
		for _, m := range c.Servers {
			if err := c.Start(ctx, m, kind, seq); err != nil {
				return err
			}
		}
		if _, _, err := c.Leader(ctx, 30*time.Second); err != nil {
			return err
		}
	case schedule.AgentKill, schedule.AgentRestart:
		victim := pick(c.Agents, f.Pick)
		r.begin(f, []string{victim.ID}, "", false)
		if err := c.Kill(victim, kind, seq); err != nil {
			return err
		}
		if err := down(); err != nil {
			return err
		}
		if err := c.Start(ctx, victim, kind, seq); err != nil {
			return err
		}
	case schedule.RackLoss:
		rack, members := r.rack(f.Pick)
		leader, _, _ := c.Leader(ctx, 5*time.Second)
		deposes := leader != nil && leader.Rack == rack
		lid := ""
		if leader != nil {
			lid = leader.ID
		}
		r.begin(f, ids(members), lid, deposes)
		r.log.Info("driver: rack lost", "rack", rack, "members", ids(members))
		if err := c.KillAll(members, kind, seq); err != nil {
			return err
		}
		if deposes {
			r.probe(seq)
		}
		if err := down(); err != nil {
			return err
		}
		for _, m := range members {
			if err := c.Start(ctx, m, kind, seq); err != nil {
				return err
			}
		}
	case schedule.WorkerKill:
		deadline := r.since() + 20*time.Second
		extra := r.since() + 3*time.Second
		for {
			// Only a worker that still runs: a kill counts only if the
			// process was alive (the records may list one just gone).
			if ws := slices.DeleteFunc(c.Workers(), func(w launch.Worker) bool { return !launch.WorkerAlive(w) }); len(ws) > 0 {
				w := pick(ws, f.Pick)
				r.begin(f, []string{w.Node}, "", false)
				if err := c.KillWorker(w, kind, seq); err != nil {
					return err
				}
				break
			}
			if r.since() > deadline {
				return fmt.Errorf("no worker ran within 20 s")
			}
			if extra > 0 && r.since() > extra {
				extra = 0 // every job has finished: give the fault a victim
				r.extraJob(seq)
			}
			if err := r.sleepUntil(ctx, r.since()+50*time.Millisecond); err != nil {
				return err
			}
		}
	default:
		if !f.Kind.Network() {
			return fmt.Errorf("%w: unknown fault kind %q", ErrConfig, f.Kind)
		}
		if err := r.network(ctx, f); err != nil {
			return err
		}
	}
	r.end(f)
	return nil
}

// network injects a network fault, holds it for f.Down, and heals.
func (r *run) network(ctx context.Context, f schedule.Fault) error {
	c, n := r.c, r.c.Net()
	if n == nil {
		return fmt.Errorf("%w: %s needs network namespaces", ErrConfig, f.Kind)
	}
	leader, _, err := c.Leader(ctx, 15*time.Second)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(f.Pick), uint64(f.Seq)))
	servers, agents := ids(c.Servers), ids(c.Agents)
	everyone := append(slices.Clone(servers), agents...)
	var apply func() error
	targets, deposes := everyone, false
	switch f.Kind {
	case schedule.IsolateLeader:
		rest := slices.DeleteFunc(slices.Clone(everyone), func(s string) bool { return s == leader.ID })
		targets, deposes = []string{leader.ID}, true
		apply = func() error { return n.Partition(ctx, [][]string{{leader.ID}, rest}) }
	case schedule.Split21, schedule.Split111:
		var groups [][]string
		if f.Kind == schedule.Split21 {
			lone := pick(servers, f.Pick)
			groups = [][]string{{lone}, slices.DeleteFunc(slices.Clone(servers), func(s string) bool { return s == lone })}
			deposes = lone == leader.ID
		} else {
			for _, s := range servers {
				groups = append(groups, []string{s})
			}
		}
		for _, a := range agents {
			g := rng.IntN(len(groups))
			groups[g] = append(groups[g], a)
		}
		apply = func() error { return n.Partition(ctx, groups) }
	case schedule.Bridge:
		order := slices.Clone(servers)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		a, cc := order[0], order[len(order)-1]
		targets = []string{a, order[1], cc}
		apply = func() error { return n.Block(ctx, [][2]string{{a, cc}, {cc, a}}) }
	case schedule.Loss:
		apply = func() error { return n.Degrade(ctx, everyone, lossRate, 0) }
	case schedule.Latency:
		apply = func() error { return n.Degrade(ctx, everyone, 0, addedDelay) }
	case schedule.RackPartition:
		_, members := r.rack(f.Pick)
		in := ids(members)
		rest := slices.DeleteFunc(slices.Clone(everyone), func(s string) bool { return slices.Contains(in, s) })
		targets, deposes = in, slices.Contains(in, leader.ID)
		apply = func() error { return n.Partition(ctx, [][]string{in, rest}) }
	}
	r.begin(f, targets, leader.ID, deposes)
	if err := apply(); err != nil {
		_ = n.Heal(context.Background())
		return err
	}
	r.event(history.Event{Kind: history.Net, Fault: string(f.Kind), Seq: f.Seq, Detail: n.Describe()})
	r.log.Info("driver: network", "fault", f.String(), "state", n.Describe())
	if deposes {
		r.probe(f.Seq)
	}
	derr := r.sleepUntil(ctx, r.since()+f.Down)
	if err := n.Heal(context.Background()); err != nil {
		return err
	}
	r.event(history.Event{Kind: history.Net, Fault: string(f.Kind), Seq: f.Seq, Detail: n.Describe()})
	return derr
}

// rack returns rack p % n of the cluster's racks (sorted) and its
// members, servers then agents.
func (r *run) rack(p uint32) (string, []*launch.Member) {
	var racks []string
	all := append(slices.Clone(r.c.Servers), r.c.Agents...)
	for _, m := range all {
		if m.Rack != "" && !slices.Contains(racks, m.Rack) {
			racks = append(racks, m.Rack)
		}
	}
	if len(racks) == 0 {
		return "", nil
	}
	slices.Sort(racks)
	rack := pick(racks, p)
	var out []*launch.Member
	for _, m := range all {
		if m.Rack == rack {
			out = append(out, m)
		}
	}
	return rack, out
}
