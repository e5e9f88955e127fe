package allocator

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/cluster"
	"pollux/cluster/provider"
	"pollux/consensus/state"
	"pollux/optimizer"
)

// Autoscale configures the allocator's cluster autoscaling (issue 19):
// rounds run their policy in optimizer.Autoscaled, whose decision is
// committed (state.ScaleDecision, naming the machines) before
// Provider is asked for anything.
type Autoscale struct {
	// Settings: the node template (its GPUs), the minimum and maximum
	// cluster sizes, the utility band.
	Settings optimizer.Autoscale
	// Provider adds and removes machines.
	Provider provider.Provider
	// NodeCost is the price of a node-hour (logged with every decision).
	NodeCost float64
	// Prefix starts the names of the machines the autoscaler asks for:
	// <Prefix>-<n> (default "auto").
	Prefix string
	// JoinTimeout is how long a machine asked for may take to register
	// before it is given up (removed through the provider and forgotten;
	// default 5 min).
	JoinTimeout time.Duration
	// OpTimeout bounds one provider call (default 10 min; the exec
	// provider's own timeout and retries fit within it).
	OpTimeout time.Duration
	// ScaleDownDelay is how long the desired size must stay below the
	// cluster's before machines are drained (0: at the first round that
	// wants fewer, the artifact's rule alone); what is drained then is
	// down to the largest size wanted over that time. The leader keeps
	// the clock: a new leader starts it again.
	ScaleDownDelay time.Duration
}

// Validate checks the settings, as a server does at start-up.
func (s *Autoscale) Validate() error {
	if err := s.Settings.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch {
	case s.Provider == nil:
		return fmt.Errorf("%w: autoscaling without a provider", ErrConfig)
	case !(s.NodeCost >= 0) || s.NodeCost > 1e12:
		return fmt.Errorf("%w: node cost %v per hour, want a finite price of at least 0", ErrConfig, s.NodeCost)
	case s.JoinTimeout < 0 || s.OpTimeout < 0 || s.ScaleDownDelay < 0:
		return fmt.Errorf("%w: join timeout %v, provider timeout %v, scale-down delay %v", ErrConfig, s.JoinTimeout, s.OpTimeout, s.ScaleDownDelay)
	}
	return nil
}

func (s *Autoscale) defaults() {
	if s.Prefix == "" {
		s.Prefix = "auto"
	}
	if s.JoinTimeout == 0 {
		s.JoinTimeout = 5 * time.Minute
	}
	if s.OpTimeout == 0 {
		s.OpTimeout = 10 * time.Minute
	}
}

// MachineName is the name of the n-th machine the autoscaler asks for.
func MachineName(prefix string, n uint64) string { return fmt.Sprintf("%s-%d", prefix, n) }

// scaleOp is a provider call in flight.
type scaleOp struct {
	add  bool
	term uint64
}

// scaleDone is a provider call's outcome, as a message to the allocator.
type scaleDone struct {
	name string
	add  bool
	term uint64
	err  error
	why  string
}

// scaleState is what only the leader holds about autoscaling.
type scaleState struct {
	// ops are the provider calls in flight, by machine.
	ops map[string]scaleOp
	// asked are the booting machines of this term this leader has asked
	// the provider for (once each).
	asked map[string]bool
	// removed are machines the provider removed that the node table may
	// still show alive until gossip notices: not counted.
	removed map[string]bool
	// lowSince is when the desired size fell below the cluster's (zero:
	// it is not below), and lowMax the largest size wanted since.
	lowSince time.Time
	lowMax   int
}

// shrinkTo is the size a shrink may go down to this round, given the
// desired size and the machines held (have > desired): have itself
// until the desired size has stayed below it for ScaleDownDelay, then
// the largest size wanted over that time.
func (s *scaleState) shrinkTo(desired, have int, now time.Time, delay time.Duration) int {
	if delay <= 0 {
		return desired
	}
	if s.lowSince.IsZero() {
		s.lowSince, s.lowMax = now, desired
	}
	s.lowMax = max(s.lowMax, desired)
	if now.Sub(s.lowSince) < delay {
		return have
	}
	return s.lowMax
}

// autoscalePolicy is the round's policy p with the size decision when
// autoscaling is on, and the policy whose search the round runs (p, or
// the one it wraps). On one GPU type a type-blind optimizer.Sizer
// (Pollux) is wrapped in optimizer.Autoscaled; on several, a type-aware
// Sizer (pollux-het), which adds nodes of the template's type only. A
// leadership's first round decides no size; nor does a cluster that fits
// neither case (logged once per leadership and change), which is only
// shrunk to the minimum when idle.
func (a *allocator) autoscalePolicy(snap *optimizer.Snapshot, p optimizer.Policy) (policy, search optimizer.Policy) {
	s := a.cfg.Autoscale
	if s == nil {
		return p, p
	}
	tmpl := s.Settings.Template.Type
	types := gpuTypes(snap.Nodes)
	if len(types) > 1 || len(types) == 1 && tmpl != "" && types[0] != tmpl {
		why := ""
		sz, ok := a.cfg.TypedPolicy.(optimizer.Sizer)
		_, aware := a.cfg.TypedPolicy.(optimizer.TypeAware)
		switch {
		case tmpl == "":
			why = "the node template has no GPU type (--node-gpu-type): the machines the provider adds would be of no type this cluster has"
		case !ok || !aware:
			why = "the typed policy " + a.cfg.TypedPolicy.Name() + " decides no size; only pollux-het does"
		}
		if why != "" {
			a.noSize(why, types)
			return p, p
		}
		a.noSize("", nil)
		return optimizer.NewAutoscaled(sz, s.Settings), sz
	}
	a.noSize("", nil)
	sz, ok := p.(optimizer.Sizer)
	if _, aware := p.(optimizer.TypeAware); !ok || aware {
		return p, p
	}
	return optimizer.NewAutoscaled(sz, s.Settings), sz
}

// noSize logs, once per leadership and reason, why the rounds decide no
// cluster size ("": they do again).
func (a *allocator) noSize(why string, types []string) {
	if a.noSizeWhy == why {
		return
	}
	a.noSizeWhy = why
	if why != "" {
		a.cfg.Logger.Warn("allocator: autoscaling decides no cluster size on this cluster", "why", why, "gpu_types", types)
	}
}

// scale runs after a committed round: it records what became of the
// machines asked for, acts on the committed requests of this term, and
// commits the round's decision (dec nil: the policy decided no size).
func (a *allocator) scale(ctx actor.Context, st *state.State, dec *optimizer.ScaleDecision) {
	s := a.cfg.Autoscale
	if s == nil || a.term == 0 {
		return
	}
	if a.scaling == nil {
		a.scaling = &scaleState{ops: map[string]scaleOp{}, asked: map[string]bool{}, removed: map[string]bool{}}
	}
	c, cancel := a.raftContext()
	defer cancel()
	now := float64(a.cfg.Now().UnixNano()) / 1e9
	st = a.trackMachines(ctx, c, st, now)
	desired, live, ok := a.desiredSize(st, dec)
	if !ok {
		return
	}
	count := a.census(st)
	booting, up := count.booting, count.up
	have := up + booting
	if desired >= have || booting > 0 {
		a.scaling.lowSince = time.Time{}
	}
	cmd := &state.ScaleDecision{Term: a.term, Time: now, Desired: desired}
	switch {
	case desired > have && live:
		add := count.addable(desired, a.cfg.Autoscale.Settings.MaxNodes)
		for i := range add {
			cmd.Add = append(cmd.Add, MachineName(s.Prefix, st.Scale.Seq+uint64(i)+1))
		}
	case desired < have && booting == 0:
		// The last machines first: the autoscaler's allocation vacates
		// the nodes beyond the size it wants; of those, the emptiest.
		to := a.scaling.shrinkTo(desired, have, a.cfg.Now(), s.ScaleDownDelay)
		used, drainable := st.UsedGPUs(), count.drainable
		slices.Reverse(drainable)
		slices.SortStableFunc(drainable, func(x, y string) int { return used[x] - used[y] })
		cmd.Drain = drainable[:min(have-to, len(drainable))]
	}
	if len(cmd.Add) == 0 && len(cmd.Drain) == 0 {
		return
	}
	if err := a.cfg.Store.ApplyCommand(c, cmd); err != nil {
		a.cfg.Logger.Warn("allocator: committing the scale decision", "desired", desired, "err", err)
		return
	}
	if len(cmd.Drain) > 0 {
		a.scaling.lowSince = time.Time{} // a new window for what is left
	}
	a.cfg.Logger.Info("allocator: cluster size decided", "desired", desired, "nodes", up, "booting", booting, "add", cmd.Add,
		"drain", cmd.Drain, "cost_per_hour", float64(desired)*s.NodeCost, "utility", utilityOf(dec))
	// Act on what is committed, at once.
	a.trackMachines(ctx, c, a.cfg.Store.LocalState(), now)
}

// census counts the machines a scale decision weighs.
type census struct {
	// up are the alive nodes with GPUs that are not draining, managed
	// or not; booting the managed machines asked for and not registered.
	up, booting int
	// draining are the alive managed machines being drained; leaving the
	// managed machines that are up or draining but no longer alive:
	// until the provider has removed them, both are still held (and
	// paid for).
	draining, leaving int
	// drainable are the managed machines up, idle of provider calls and
	// running no server, in node order.
	drainable []string
}

// census counts st's machines. A machine the provider removed that the
// node table still shows alive is not counted; one gossip has noticed
// is dropped from that list.
func (a *allocator) census(st *state.State) census {
	var c census
	for _, name := range st.Scale.Names() {
		m := st.Scale.Nodes[name]
		n := st.Nodes[name]
		switch {
		case m.Phase == state.ScaleBooting:
			c.booting++
		case n == nil || n.Health != state.Alive:
			c.leaving++
		}
	}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if n.Health != state.Alive {
			delete(a.scaling.removed, id) // gossip noticed
		}
		if n.Health != state.Alive || n.GPUs == 0 || a.scaling.removed[id] {
			continue
		}
		m := st.Scale.Nodes[id]
		if m != nil && m.Phase == state.ScaleDraining {
			c.draining++
			continue
		}
		c.up++
		if m != nil && m.Phase == state.ScaleUp && a.scaling.ops[id] == (scaleOp{}) && !a.runsServer(n) {
			c.drainable = append(c.drainable, id)
		}
	}
	return c
}

// addable is how many machines to ask for to reach desired: every
// machine still held counts against limit (0: none), so that the
// cluster never holds more than limit machines, even while one that
// died or was drained waits for the provider to remove it.
func (c census) addable(desired, limit int) int {
	add := desired - c.up - c.booting
	if limit > 0 {
		add = min(add, limit-c.up-c.booting-c.draining-c.leaving)
	}
	return max(add, 0)
}

func utilityOf(dec *optimizer.ScaleDecision) float64 {
	if dec == nil {
		return 0
	}
	return dec.Utility
}

// desiredSize is the size to move to: the policy's decision, the minimum
// when no job is left (an idle cluster only shrinks: its agents may not
// have registered yet), at least one node when jobs wait on an empty
// cluster; whether jobs are live; false when there is no decision this
// round.
func (a *allocator) desiredSize(st *state.State, dec *optimizer.ScaleDecision) (int, bool, bool) {
	set := a.cfg.Autoscale.Settings
	live := false
	for _, j := range st.Jobs {
		if !j.State.Terminal() {
			live = true
			break
		}
	}
	switch {
	case !live:
		return set.MinNodes, false, true
	case len(placeableNodes(st)) == 0:
		return max(set.MinNodes, 1), true, true
	case dec != nil:
		return dec.Nodes, true, true
	}
	return 0, live, false
}

// runsServer reports whether node n is also a control-plane server's
// machine (a server member of its name, or at its address off loopback):
// such a node is never drained away.
func (a *allocator) runsServer(n *state.Node) bool {
	if a.cfg.Members == nil {
		return false
	}
	hosts := map[string]bool{}
	for _, addr := range n.Addresses {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
				hosts[h] = true
			}
		}
	}
	for _, m := range a.cfg.Members() {
		if m.Meta.Role != cluster.RoleServer {
			continue
		}
		if m.Name == n.ID {
			return true
		}
		if h, _, err := net.SplitHostPort(m.Addr); err == nil && hosts[h] {
			return true
		}
	}
	return false
}

// trackMachines moves every managed machine along: a booting one that
// registered is up; one this term asked for is requested from the
// provider (once); one that did not join in time, or failed to be
// added, is removed through the provider and forgotten; a drained one
// that holds nothing is removed; one that died is released. It returns
// the state after its commits.
func (a *allocator) trackMachines(ctx actor.Context, c context.Context, st *state.State, now float64) *state.State {
	s := a.cfg.Autoscale
	changed := false
	for _, name := range st.Scale.Names() {
		m := st.Scale.Nodes[name]
		if _, busy := a.scaling.ops[name]; busy {
			continue
		}
		n := st.Nodes[name]
		alive := n != nil && n.Health == state.Alive
		switch m.Phase {
		case state.ScaleBooting:
			switch {
			case alive:
				if err := a.cfg.Store.ApplyCommand(c, &state.ScaleUpdate{Term: a.term, Time: now, Name: name, Outcome: state.ScaleJoined}); err != nil {
					a.cfg.Logger.Warn("allocator: recording a machine that joined", "node", name, "err", err)
					continue
				}
				a.cfg.Logger.Info("allocator: machine joined", "node", name, "gpu_type", n.GPUType, "after_s", now-m.Since)
				if want := s.Settings.Template.Type; want != "" && n.GPUType != want {
					// The provider started another machine than the template
					// names (its command or image is wrong): the decisions
					// count it as it registered, not as the template.
					a.cfg.Logger.Warn("allocator: machine joined with another GPU type than the template's; check the provider's command",
						"node", name, "gpu_type", n.GPUType, "template_gpu_type", want)
				}
				changed = true
			case now-m.Since > s.JoinTimeout.Seconds():
				// Removed before it is forgotten: if the removal dies with
				// this leader, the next one removes it again.
				a.provide(ctx, name, false, "did not join within "+s.JoinTimeout.String())
			case m.Term == a.term && !a.scaling.asked[name]:
				// Only the leader whose term asked for it: a later leader
				// waits for it to join, or gives it up, but never asks twice.
				a.scaling.asked[name] = true
				a.provide(ctx, name, true, "")
			}
		case state.ScaleDraining:
			if !alive || a.drained(st, name) {
				a.provide(ctx, name, false, "drained")
			}
		case state.ScaleUp:
			if n == nil || n.Health == state.Dead || n.Health == state.Left {
				a.provide(ctx, name, false, "left the cluster")
			}
		}
	}
	if !changed {
		return st
	}
	return a.cfg.Store.LocalState()
}

// drained reports whether machine name holds no GPUs in the committed
// allocation and its newest ack in this term shows no worker alive.
func (a *allocator) drained(st *state.State, name string) bool {
	if st.UsedGPUs()[name] > 0 {
		return false
	}
	ack := a.acks[name]
	if ack == nil || ack.Term != a.term {
		return false
	}
	for _, rs := range ack.Runs {
		if rs.Alive > 0 || rs.Pending {
			return false
		}
	}
	return true
}

// provide runs a provider call in the background; its outcome comes back
// as a scaleDone.
func (a *allocator) provide(ctx actor.Context, name string, add bool, why string) {
	s, term, sys, self := a.cfg.Autoscale, a.term, ctx.ActorSystem(), a.self
	a.scaling.ops[name] = scaleOp{add: add, term: term}
	if add {
		a.cfg.Logger.Info("allocator: asking the provider for a machine", "node", name)
	} else {
		a.cfg.Logger.Info("allocator: asking the provider to remove a machine", "node", name, "why", why)
	}
	go func() {
		c, cancel := context.WithTimeout(context.Background(), s.OpTimeout)
		defer cancel()
		var err error
		if add {
			err = s.Provider.Add(c, name)
		} else {
			err = s.Provider.Remove(c, name)
		}
		sys.Root.Send(self, scaleDone{name: name, add: add, term: term, err: err, why: why})
	}()
}

// scaleDone records a provider call's outcome: a removed machine is
// forgotten (committed); a failed addition is given up at once (removed,
// so that nothing half-started is paid for); a failed removal is tried
// again at the next round.
func (a *allocator) scaleFinished(ctx actor.Context, m scaleDone) {
	if a.scaling == nil || a.term != m.term {
		return // a former leadership's call; the state says what to do
	}
	delete(a.scaling.ops, m.name)
	switch {
	case m.add && m.err != nil:
		a.cfg.Logger.Error("allocator: the provider could not add a machine; giving it up", "node", m.name, "err", m.err)
		a.provide(ctx, m.name, false, "the provider could not add it")
	case m.add:
		a.cfg.Logger.Info("allocator: the provider added a machine", "node", m.name)
	case m.err != nil:
		a.cfg.Logger.Error("allocator: the provider could not remove a machine; retrying at the next round", "node", m.name, "err", m.err)
	default:
		c, cancel := a.raftContext()
		defer cancel()
		now := float64(a.cfg.Now().UnixNano()) / 1e9
		if err := a.cfg.Store.ApplyCommand(c, &state.ScaleUpdate{Term: a.term, Time: now, Name: m.name, Outcome: state.ScaleRemoved, Reason: m.why}); err != nil {
			a.cfg.Logger.Warn("allocator: recording a removed machine", "node", m.name, "err", err)
			return
		}
		a.scaling.removed[m.name] = true
		a.cfg.Logger.Info("allocator: machine removed", "node", m.name, "why", m.why)
	}
}
