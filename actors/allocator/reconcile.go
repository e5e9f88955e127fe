package allocator

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/consensus/state"
)

// cleanExitRounds is how many acks must show every worker of an
// incarnation exited cleanly without a done report before it counts as
// failed: rank 0's done report and its exit race to the node, and one ack
// may fall between them.
const cleanExitRounds = 2

// acked takes a node's answer to its Assign: what the node really runs.
// The leader converges from it: a done incarnation completes its job at
// once; a failed one (a worker that exited on its own without success,
// or an incarnation the node refuses because it already ran it) is
// restarted by the next round; one whose workers all exited cleanly
// without a done report is judged at the next rounds (reconcileExits).
// Everything else is already what the node was told. answered is, for
// an ack that answers a lease renewal, the generation the renewal
// carried (0 otherwise).
func (a *allocator) acked(ctx actor.Context, ack *pb.AssignAck, answered uint64) {
	if a.term == 0 {
		return
	}
	if r := a.round; r != nil && r.waiting[ack.Node] && (!ack.Ok || ack.Generation == r.info.Generation) {
		delete(r.waiting, ack.Node)
		r.acks = append(r.acks, time.Since(r.begin))
		if len(r.waiting) == 0 {
			a.finishRound()
		}
	}
	if !ack.Ok {
		a.cfg.Logger.Warn("allocator: node refused assignment", "node", ack.Node, "err", ack.Error,
			"node_term", ack.Term, "node_generation", ack.Generation)
	}
	a.acks[ack.Node] = ack
	for _, rs := range ack.Runs {
		switch {
		case rs.Done:
			if a.doneByRankZero(rs.Job, rs.Incarnation, rs.DoneToken, "node "+ack.Node) {
				a.finish(rs.Job, rs.Incarnation, state.Completed, "")
			}
		case rs.Denied != "":
			// The node's policy forbids the job: not worth retrying.
			a.finish(rs.Job, rs.Incarnation, state.Failed, fmt.Sprintf("node %s refuses to run it: %s", ack.Node, rs.Denied))
		case rs.Refused != "":
			a.fail(rs.Job, rs.Incarnation, fmt.Sprintf("node %s: %s", ack.Node, rs.Refused))
		default:
			for _, e := range rs.Exits {
				if !e.Requested && (e.ExitCode != 0 || e.Signal != "" || e.Error != "") {
					a.fail(rs.Job, rs.Incarnation, fmt.Sprintf("worker %d on %s exited with code %d %s%s", e.Rank, ack.Node, e.ExitCode, e.Signal, e.Error))
					break
				}
			}
		}
	}
	a.leaseFollowUp(ctx, ack, answered)
}

// doneByRankZero reports whether token is rank 0's report token of the
// job's incarnation: only rank 0's done report completes a job, and a
// done without its token (an agent that does not run rank 0, a forged
// message) is refused with a log line naming where it came from.
func (a *allocator) doneByRankZero(job string, inc uint64, token, from string) bool {
	if a.reportKey != "" && workerproto.SameToken(workerproto.ReportToken([]byte(a.reportKey), job, inc, 0), token) {
		return true
	}
	a.cfg.Logger.Warn("allocator: refused a done report without rank 0's report token", "job", job, "incarnation", inc,
		"from", from, "token", token != "")
	return false
}

// reconcileExits fails the current incarnations whose every worker has
// exited cleanly without a done report, as the nodes' latest acks tell,
// once cleanExitRounds rounds have seen it.
func (a *allocator) reconcileExits(st *state.State) {
	exited := map[incKey]int{}
	busy := map[incKey]bool{}
	for _, ack := range a.acks {
		for _, rs := range ack.Runs {
			k := incKey{rs.Job, rs.Incarnation}
			if rs.Done || rs.Alive > 0 || rs.Pending {
				busy[k] = true
			}
			for _, e := range rs.Exits {
				if !e.Requested {
					exited[k]++
				}
			}
		}
	}
	for k := range a.cleanExit {
		if exited[k] == 0 {
			delete(a.cleanExit, k)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(exited), func(x, y incKey) int {
		return cmp.Or(cmp.Compare(x.job, y.job), cmp.Compare(x.inc, y.inc))
	}) {
		j := st.Jobs[k.job]
		if j == nil || j.State.Terminal() || j.Incarnation != k.inc || busy[k] {
			delete(a.cleanExit, k)
			continue
		}
		replicas := 0
		for _, sl := range st.Allocation.Jobs[k.job] {
			replicas += sl.GPUs
		}
		if replicas == 0 || exited[k] < replicas {
			continue
		}
		if a.cleanExit[k]++; a.cleanExit[k] >= cleanExitRounds {
			a.fail(k.job, k.inc, "every worker exited without a done report")
			delete(a.cleanExit, k)
		}
	}
}

// host tells every live server's job host which job actors it runs:
// every live job, spread by rendezvous hashing over the servers that
// gossip sees and that are in the Raft configuration (a job actor starts
// from its server's replicated state). It reports whether a job it hosted
// has finished since.
func (a *allocator) host(ctx actor.Context, st *state.State) bool {
	finished := false
	servers := map[string]*actor.PID{}
	if a.cfg.Members != nil {
		voters := map[string]bool{}
		if cfg, err := a.cfg.Store.Servers(); err == nil {
			for _, s := range cfg {
				voters[string(s.ID)] = true
			}
		}
		for _, m := range a.cfg.Members() {
			if m.Meta.Role == cluster.RoleServer && m.Meta.ActorAddr != "" && voters[m.Name] {
				servers[m.Name] = a.cfg.HostPID(m)
			}
		}
	}
	if len(servers) == 0 {
		servers[a.cfg.Server] = a.cfg.HostPID(cluster.Member{Name: a.cfg.Server, Meta: cluster.Meta{ActorAddr: ctx.Self().Address}})
	}
	names := slices.Sorted(maps.Keys(servers))
	jobs := map[string][]*pb.HostedJob{}
	for _, id := range st.JobIDs() {
		j := st.Jobs[id]
		if j.State.Terminal() {
			if _, ok := a.hosting[id]; ok {
				finished = true
				delete(a.hosting, id)
			}
			continue
		}
		server := Place(id, names)
		h, ok := a.hosting[id]
		if !ok || h.server != server || !h.host.Equal(servers[server]) {
			a.sessions++
			h = hostedAt{server: server, host: servers[server], session: a.term<<32 | a.sessions}
			a.hosting[id] = h
		}
		slots := st.Allocation.Jobs[id]
		k := 0
		for _, sl := range slots {
			k += sl.GPUs
		}
		jobs[server] = append(jobs[server], &pb.HostedJob{Job: id, Incarnation: j.Incarnation, Session: h.session,
			Nodes: uint32(len(slots)), Replicas: uint32(k), GpuType: placementType(st, slots), Racks: uint32(placementRacks(st, slots))})
	}
	for id := range a.hosting {
		if st.Jobs[id] == nil {
			finished = true
			delete(a.hosting, id)
		}
	}
	self := &pb.Ref{Address: ctx.Self().Address, Id: ctx.Self().Id}
	for _, name := range names {
		ctx.Request(servers[name], &pb.HostJobs{Term: a.term, Generation: st.Allocation.Generation, Allocator: self, Jobs: jobs[name]})
	}
	return finished
}

// reconcileMembers registers agents that are members and marks dead the
// registered nodes missing from the membership for NodeGrace. It reports
// whether it changed anything.
func (a *allocator) reconcileMembers(c context.Context, st *state.State) bool {
	if a.cfg.Members == nil {
		return false
	}
	changed := false
	seen := map[string]bool{}
	// Agents new or changed are registered together: a cluster whose
	// agents start at once has hundreds, one commit instead of one each.
	var register []state.Node
	var before []*state.Node
	for _, m := range a.cfg.Members() {
		if m.Meta.Role != cluster.RoleAgent {
			continue
		}
		seen[m.Name] = true
		n := st.Nodes[m.Name]
		want, err := NodeOf(m, st.Config.Levels)
		if err != nil {
			// The agent sees the same levels when it joins and stops.
			if a.refused[m.Name] != err.Error() {
				a.cfg.Logger.Error("allocator: node refused", "node", m.Name, "err", err)
				a.refused[m.Name] = err.Error()
			}
			continue
		}
		delete(a.refused, m.Name)
		if n != nil && n.Health == want.Health && n.GPUs == want.GPUs && n.Rack == want.Rack && slices.Equal(n.Addresses, want.Addresses) &&
			slices.Equal(n.Topology, want.Topology) && n.GPUType == want.GPUType {
			continue
		}
		register = append(register, want)
		before = append(before, n)
	}
	if a.registerNodes(c, register, before) {
		changed = true
	}
	for id := range a.refused {
		if !seen[id] {
			delete(a.refused, id)
		}
	}
	now := time.Now()
	for id := range a.missing {
		if seen[id] {
			delete(a.missing, id)
		}
	}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if seen[id] || n.Health == state.Dead || n.Health == state.Left {
			continue
		}
		since, ok := a.missing[id]
		if !ok {
			a.missing[id] = now
			a.cfg.Logger.Info("allocator: node missing from the membership", "node", id)
			continue
		}
		if now.Sub(since) < a.cfg.NodeGrace {
			continue
		}
		delete(a.missing, id)
		if err := a.cfg.Store.MarkNode(c, id, state.Dead); err != nil {
			a.cfg.Logger.Warn("allocator: marking node dead", "node", id, "err", err)
			continue
		}
		delete(a.acks, id)
		a.cfg.Logger.Warn("allocator: node gone", "node", id)
		changed = true
	}
	return changed
}

// registerNodes registers nodes (before holds each one's registration
// as the state had it, nil if new) in one batch of writes and reports
// whether any was registered.
func (a *allocator) registerNodes(c context.Context, nodes []state.Node, before []*state.Node) bool {
	if len(nodes) == 0 {
		return false
	}
	errs, err := a.cfg.Store.RegisterNodes(c, nodes)
	if err != nil {
		a.cfg.Logger.Warn("allocator: registering nodes", "nodes", len(nodes), "err", err)
		return false
	}
	changed := false
	for i, want := range nodes {
		if errs[i] != nil {
			a.cfg.Logger.Warn("allocator: registering node", "node", want.ID, "err", errs[i])
			continue
		}
		if n := before[i]; n != nil && (!slices.Equal(n.Domains(), want.Domains()) || n.GPUType != want.GPUType) {
			// An agent restarted with another rack or GPU type: the
			// registration took their GPUs from the jobs placed on it
			// (consensus), the next round places them afresh.
			a.cfg.Logger.Warn("allocator: node attributes changed", "node", want.ID,
				"topology", strings.Join(n.Domains(), ","), "new_topology", strings.Join(want.Domains(), ","),
				"gpu_type", n.GPUType, "new_gpu_type", want.GPUType)
		}
		a.cfg.Logger.Info("allocator: node registered", "node", want.ID, "gpus", want.GPUs, "topology", strings.Join(want.Domains(), ","), "gpu_type", want.GPUType)
		changed = true
	}
	return changed
}

// NodeOf is the node an agent's gossip metadata describes, its declared
// topology checked against the cluster's levels: a level missing,
// unknown or out of order is an error (the node is not registered). An
// agent of an older version that gave only a rack label is in that rack.
func NodeOf(m cluster.Member, levels []string) (state.Node, error) {
	n := state.Node{ID: m.Name, Addresses: []string{m.Meta.ActorAddr}, GPUs: m.Meta.GPUs, GPUType: m.Meta.GPUType, Health: state.Alive}
	declared := m.Meta.Topology
	if declared == "" && m.Meta.Rack != "" {
		declared = "rack=" + m.Meta.Rack
	}
	domains, err := cluster.CheckTopology(declared, levels)
	if err != nil {
		return state.Node{}, fmt.Errorf("allocator: node %s: %w", m.Name, err)
	}
	if len(domains) > 0 {
		n.Rack, n.Topology = domains[0], domains
	}
	return n, nil
}

// prune forgets, after the retention period, finished jobs and nodes
// dead or gone (and holding nothing). It reports whether it changed
// anything.
func (a *allocator) prune(c context.Context, st *state.State) bool {
	if a.cfg.Retain <= 0 {
		return false
	}
	now := a.cfg.Now()
	cutoff := float64(now.Add(-a.cfg.Retain).UnixNano()) / 1e9
	var p state.Prune
	for _, id := range st.JobIDs() {
		if j := st.Jobs[id]; j.State.Terminal() && j.FinishTime < cutoff {
			p.Jobs = append(p.Jobs, id)
		}
	}
	used := st.UsedGPUs()
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if n.Health != state.Dead && n.Health != state.Left {
			delete(a.gone, id)
			continue
		}
		since, ok := a.gone[id]
		if !ok {
			a.gone[id] = now
			continue
		}
		if now.Sub(since) >= a.cfg.Retain && used[id] == 0 {
			p.Nodes = append(p.Nodes, id)
		}
	}
	for id := range a.gone {
		if st.Nodes[id] == nil {
			delete(a.gone, id)
		}
	}
	if len(p.Jobs)+len(p.Nodes) == 0 {
		return false
	}
	skipped, err := a.cfg.Store.Prune(c, p)
	if err != nil {
		a.cfg.Logger.Warn("allocator: pruning", "err", err)
		return false
	}
	a.cfg.Logger.Info("allocator: pruned", "jobs", len(p.Jobs), "nodes", len(p.Nodes), "skipped", len(skipped))
	return true
}
