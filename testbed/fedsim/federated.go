package fedsim

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"pollux/cluster/federation"
	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/sim"
	"pollux/testbed/workload"
)

// fedLab is one lab during a federated run.
type fedLab struct {
	spec   *Lab
	ledger *federation.Ledger
	st     *sim.Stepper
	done   bool
	// down marks a lab lost in an outage: no control plane, no machines.
	down bool
	// lent, borrowed and used are GPU-seconds: leased out, leased in, and
	// leased in and held by the lab's jobs.
	lent, borrowed, used float64
	// reclaims are the latencies of the lab's reclaimed nodes; unused
	// counts reclaimed nodes none of its jobs ran on.
	reclaims []float64
	unused   int
}

// pending is a reclaimed node waiting for its owner's jobs.
type pending struct {
	owner *fedLab
	node  string
	at    float64
}

// federation runs every lab on its own cluster plus the nodes it leases,
// with the lease logic deciding every round.
type fedRun struct {
	fed    *Federation
	opt    Options
	labs   []*fedLab
	byName map[string]*fedLab
	stats  LeaseStats
	report *ModeReport
	wait   []pending
	// nextCmd and nextOrder index the first injection not yet due.
	nextCmd, nextOrder int
	outages            []*outage
	// expired are the leases already counted as expired.
	expired map[string]bool
}

// outage is a lab's loss during the run.
type outage struct {
	spec    Outage
	lab     *fedLab
	started bool
	ended   bool
	report  OutageReport
	// held are the lab's leases the peers still hold.
	held map[string]bool
}

func (fed *Federation) federated(ctx context.Context, cats testbed.TypedCatalog, wls []workload.Workload, opt Options) (*ModeReport, error) {
	ledgers, err := fed.Ledgers()
	if err != nil {
		return nil, err
	}
	r := &fedRun{fed: fed, opt: opt, byName: map[string]*fedLab{}, report: &ModeReport{Labs: map[string]*LabReport{}}, expired: map[string]bool{}}
	total := 0
	for i := range fed.Labs {
		spec := &fed.Labs[i]
		pol, err := opt.NewPolicy(spec.Policy)
		if err != nil {
			return nil, err
		}
		st, err := sim.NewStepper(fed.config(len(spec.Nodes), opt.Seed), cats, wls[i], pol, sim.ModeFor(spec.Policy))
		if err != nil {
			return nil, fmt.Errorf("federated %s: %w", spec.Name, err)
		}
		l := &fedLab{spec: spec, ledger: ledgers[i], st: st}
		r.labs = append(r.labs, l)
		r.byName[spec.Name] = l
		total += len(wls[i].Jobs)
	}
	for _, o := range fed.Outages {
		r.outages = append(r.outages, &outage{spec: o, lab: r.byName[o.Lab]})
	}
	sort.SliceStable(r.fed.Commands, func(a, b int) bool { return r.fed.Commands[a].At < r.fed.Commands[b].At })
	sort.SliceStable(r.fed.Orders, func(a, b int) bool { return r.fed.Orders[a].At < r.fed.Orders[b].At })
	r.setNodes()
	for now := fed.Interval; ; now += fed.Interval {
		if r.allDone() {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := r.round(now); err != nil {
			return nil, fmt.Errorf("federated at %v s: %w", now, err)
		}
		if opt.Progress != nil {
			done := 0
			for _, l := range r.labs {
				done += l.st.Completed()
			}
			opt.Progress("federated", done, total)
		}
	}
	for _, p := range r.wait {
		p.owner.unused++
	}
	for _, l := range r.labs {
		res, err := l.st.Finish(ctx)
		if err != nil {
			return nil, fmt.Errorf("federated %s: %w", l.spec.Name, err)
		}
		lr := labReport(l.spec.GPUs(), res.Jobs)
		lr.GPUHoursLent, lr.GPUHoursBorrowed, lr.GPUHoursBorrowedUsed = l.lent/3600, l.borrowed/3600, l.used/3600
		lr.Reclaims, lr.ReclaimsUnused = len(l.reclaims)+l.unused, l.unused
		if len(l.reclaims) > 0 {
			lr.ReclaimP95 = sim.Quantile(l.reclaims, 0.95)
			lr.ReclaimMax = sim.Quantile(l.reclaims, 1)
		}
		r.report.Labs[l.spec.Name] = lr
		r.report.Rounds += res.Rounds
	}
	for _, o := range r.outages {
		if o.started {
			r.report.Outages = append(r.report.Outages, o.report)
		}
	}
	stats := r.stats
	r.report.Leases = &stats
	r.report.finish()
	return r.report, nil
}

func (r *fedRun) allDone() bool {
	for _, l := range r.labs {
		if !l.done {
			return false
		}
	}
	return true
}

// round is one scheduling interval of the federation, ending at now.
func (r *fedRun) round(now float64) error {
	for _, l := range r.labs {
		if !l.done {
			if err := l.st.Advance(); err != nil {
				return fmt.Errorf("%s: %w", l.spec.Name, err)
			}
		}
	}
	r.losses(now)
	// Each lab that is up expires leases by its own clock.
	for _, l := range r.labs {
		if l.down {
			continue
		}
		ended, err := l.ledger.Apply(federation.Command{Op: federation.OpExpire, From: l.spec.Name, At: now})
		if err != nil {
			return fmt.Errorf("%w: %s expiring its leases: %w", ErrInvariant, l.spec.Name, err)
		}
		for _, e := range ended {
			if !r.expired[e.ID] {
				r.expired[e.ID] = true
				r.stats.Expiries++
			}
		}
	}
	r.watch(now)
	r.inject(now)
	cmds, err := r.plan(now)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		parties, err := r.parties(c)
		if err != nil {
			return err
		}
		if err := r.commit(c, parties); err != nil {
			return fmt.Errorf("%w: planned %s of lease %s: %w", ErrInvariant, c.Op, c.Lease, err)
		}
		switch c.Op {
		case federation.OpGrant:
			r.stats.Grants++
		case federation.OpRenew:
			r.stats.Renewals++
		case federation.OpRelease:
			r.stats.Releases++
		case federation.OpReclaim:
			if c.Reason == federation.ReasonRebalance {
				r.stats.Rebalances++
			} else {
				r.stats.Reclaims++
			}
		}
	}
	r.setNodes()
	for _, l := range r.labs {
		if !l.done {
			if err := l.st.Allocate(); err != nil {
				return fmt.Errorf("%s: %w", l.spec.Name, err)
			}
		}
	}
	if err := r.observe(now); err != nil {
		return err
	}
	for _, l := range r.labs {
		l.done = l.done || l.st.Done()
	}
	return nil
}

// plan decides the round. A lender whose bid says to reclaim first asks
// its own policy what it would do with the nodes it would then hold (a
// what-if round: the same snapshot, seed and search state as its real
// round); only reclaimed nodes it would use are reclaimed, and the plan is
// made again until every reclaimed node is used (at most whatIfPasses
// times), so that its jobs start on them in this round.
func (r *fedRun) plan(now float64) ([]federation.Command, error) {
	round := federation.Round{At: now, Settings: r.fed.Terms, Bids: r.bids(), Leases: r.leases()}
	for pass := 0; ; pass++ {
		cmds, err := federation.Plan(round)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvariant, err)
		}
		if pass == whatIfPasses {
			return cmds, nil
		}
		again := false
		for _, l := range r.labs {
			back := r.reclaimed(l, cmds)
			if len(back) == 0 {
				continue
			}
			// The nodes the lab will hold once the plan is applied.
			after := l.ledger.Clone()
			for _, c := range cmds {
				_, _ = after.Apply(c) // commands of other labs' leases are refused
			}
			use, err := l.st.WhatIf(r.nodesOf(l, after))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", l.spec.Name, err)
			}
			wanted := map[string]bool{}
			for id := range back {
				if use[id] > 0 {
					wanted[id] = true
				}
			}
			if len(wanted) < len(back) {
				for b := range round.Bids {
					if round.Bids[b].Lab.Name == l.spec.Name {
						round.Bids[b].Reclaimable = wanted
					}
				}
				again = true
			}
		}
		if !again {
			return cmds, nil
		}
	}
}

// whatIfPasses bounds how often a round is planned again.
const whatIfPasses = 4

// reclaimed are the nodes the commands reclaim for lab l's own jobs.
func (r *fedRun) reclaimed(l *fedLab, cmds []federation.Command) map[string]bool {
	out := map[string]bool{}
	for _, c := range cmds {
		if c.Op != federation.OpReclaim || c.Reason != federation.ReasonNeed || c.From != l.spec.Name {
			continue
		}
		if ls, ok := l.ledger.Lease(c.Lease); ok {
			for _, n := range ls.Nodes {
				out[n.Node] = true
			}
		}
	}
	return out
}

// losses takes labs down and back up as their outages begin and end. A
// lost lab's machines vanish from its borrowers at once; its control
// plane no longer renews, so its peers' ledgers expire its leases.
func (r *fedRun) losses(now float64) {
	for _, o := range r.outages {
		switch {
		case !o.started && now >= o.spec.At:
			o.started, o.lab.down = true, true
			o.report = OutageReport{Lab: o.spec.Lab, LostAt: now}
			o.held = map[string]bool{}
			for _, l := range r.labs {
				if l.down {
					continue
				}
				for _, ls := range l.ledger.Leases() {
					if ls.Lender == o.spec.Lab || ls.Borrower == o.spec.Lab {
						o.held[ls.ID] = true
					}
				}
			}
			o.report.Leases = len(o.held)
		case o.started && !o.ended && now >= o.spec.At+o.spec.For:
			o.ended, o.lab.down = true, false
			o.report.BackAt = now
		}
	}
}

// watch notes, for every lost lab, when its leases leave its peers'
// ledgers.
func (r *fedRun) watch(now float64) {
	for _, o := range r.outages {
		for id := range o.held {
			held := false
			for _, l := range r.labs {
				if _, ok := l.ledger.Lease(id); ok && l != o.lab {
					held = true
				}
			}
			if held {
				continue
			}
			delete(o.held, id)
			d := now - o.report.LostAt
			o.report.LastExpiry = max(o.report.LastExpiry, d)
			if d > r.fed.Terms.TTL {
				o.report.Outlived++
			}
		}
	}
}

// bids are every lab's bid: its active jobs' value of GPUs and the use
// of its own nodes.
func (r *fedRun) bids() []federation.Bid {
	var out []federation.Bid
	for _, l := range r.labs {
		if l.down {
			continue
		}
		var ds []federation.Demand
		for _, j := range l.st.Jobs() {
			ds = append(ds, federation.DemandOf(j, l.spec.GPUsPerNode))
		}
		used := map[string]int{}
		for id, u := range l.st.Usage() {
			if !strings.Contains(id, "/") {
				used[id] = u.GPUs
			}
		}
		out = append(out, federation.Bid{Lab: &l.spec.Lab, Curve: federation.Curve(ds, r.fed.Terms.PowerMean, l.spec.GPUs()+l.spec.Quota.BorrowingLimit), Used: used, LastReclaim: l.ledger.LastReclaim()})
	}
	return out
}

// leases are the active leases between labs that are up, each once
// (from its lender's ledger).
func (r *fedRun) leases() []federation.Lease {
	var out []federation.Lease
	for _, l := range r.labs {
		if l.down {
			continue
		}
		for _, ls := range l.ledger.Leases() {
			if ls.Lender == l.spec.Name && !r.byName[ls.Borrower].down {
				out = append(out, ls)
			}
		}
	}
	return out
}

// parties are the labs a command concerns: a grant's lender and
// borrower, or the labs whose ledgers hold the lease.
func (r *fedRun) parties(c federation.Command) ([]*fedLab, error) {
	if c.Op == federation.OpGrant {
		l, b := r.byName[c.Lender], r.byName[c.Borrower]
		if l == nil || b == nil {
			return nil, fmt.Errorf("%w: grant %s between %s and %s", federation.ErrUnknownPeer, c.Lease, c.Lender, c.Borrower)
		}
		return []*fedLab{l, b}, nil
	}
	var out []*fedLab
	for _, l := range r.labs {
		if _, ok := l.ledger.Lease(c.Lease); ok {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s of lease %s, which no lab holds", federation.ErrUnknownLease, c.Op, c.Lease)
	}
	return out, nil
}

// commit applies a command in every party's ledger if every party
// accepts it, and in none otherwise.
func (r *fedRun) commit(c federation.Command, parties []*fedLab) error {
	for _, p := range parties {
		if err := p.ledger.Check(c); err != nil {
			return fmt.Errorf("%s: %w", p.spec.Name, err)
		}
	}
	for _, p := range parties {
		ended, err := p.ledger.Apply(c)
		if err != nil {
			return fmt.Errorf("%w: %s accepted and then refused %s: %w", ErrInvariant, p.spec.Name, c.Op, err)
		}
		if c.Op == federation.OpReclaim && c.Reason == federation.ReasonNeed && p.spec.Name == c.From {
			for _, e := range ended {
				for _, n := range e.Nodes {
					r.wait = append(r.wait, pending{owner: p, node: n.Node, at: c.At})
				}
			}
		}
	}
	return nil
}

// inject delivers the injected commands and orders due by now; what is
// refused is logged and reported, and changes nothing.
func (r *fedRun) inject(now float64) {
	refuse := func(at float64, lab, what string, err error) {
		r.report.Refused = append(r.report.Refused, Refusal{At: at, Lab: lab, What: what, Error: err.Error()})
		r.opt.Log.Warn("fedsim: refused", "at", at, "lab", lab, "what", what, "err", err)
	}
	for ; r.nextCmd < len(r.fed.Commands) && r.fed.Commands[r.nextCmd].At <= now; r.nextCmd++ {
		ic := r.fed.Commands[r.nextCmd]
		c := ic.Command
		what := fmt.Sprintf("%s of lease %s from %s", c.Op, c.Lease, c.From)
		var to []*fedLab
		for _, name := range ic.To {
			to = append(to, r.byName[name])
		}
		if len(to) == 0 {
			var err error
			if to, err = r.parties(c); err != nil {
				for _, l := range r.labs {
					if l.spec.Name != c.From {
						to = append(to, l)
					}
				}
			}
		}
		names := make([]string, len(to))
		var down []string
		for i, l := range to {
			names[i] = l.spec.Name
			if l.down {
				down = append(down, l.spec.Name)
			}
		}
		if len(down) > 0 {
			refuse(c.At, strings.Join(names, ","), what, fmt.Errorf("%w: %s is down", ErrUnreachable, strings.Join(down, ",")))
			continue
		}
		if err := r.commit(c, to); err != nil {
			refuse(c.At, strings.Join(names, ","), what, err)
			continue
		}
		r.opt.Log.Info("fedsim: applied injected command", "at", c.At, "labs", names, "what", what)
	}
	for ; r.nextOrder < len(r.fed.Orders) && r.fed.Orders[r.nextOrder].At <= now; r.nextOrder++ {
		o := r.fed.Orders[r.nextOrder]
		what := fmt.Sprintf("order of %d GPUs of %s/%s from %s", o.GPUs, o.Lender, o.Node, o.Borrower)
		if r.byName[o.Lender].down {
			refuse(o.At, o.Lender, what, fmt.Errorf("%w: %s is down", ErrUnreachable, o.Lender))
			continue
		}
		if err := r.byName[o.Lender].ledger.Authorize(o.Order); err != nil {
			refuse(o.At, o.Lender, what, err)
		}
	}
}

// setNodes gives every lab its own nodes minus what it lends plus what
// it borrows (named "<lender>/<node>"). A node whose GPUs change hands
// while the previous holder's jobs ran there is vacated first: jobs
// started there wait Checkpoint seconds on top of their restart.
func (r *fedRun) setNodes() {
	// busy is, per physical node "<lab>/<node>", which lab's jobs hold
	// GPUs there now.
	busy := map[string]map[*fedLab]bool{}
	for _, l := range r.labs {
		for id, u := range l.st.Usage() {
			if u.GPUs == 0 {
				continue
			}
			key := physical(l, id)
			if busy[key] == nil {
				busy[key] = map[*fedLab]bool{}
			}
			busy[key][l] = true
		}
	}
	for _, l := range r.labs {
		nodes := r.nodesOf(l, l.ledger)
		old := map[string]int{}
		for _, n := range l.st.Nodes() {
			old[n.ID] = n.GPUs
		}
		changed := len(old) != len(nodes)
		vacate := map[string]float64{}
		for _, n := range nodes {
			if old[n.ID] != n.GPUs {
				changed = true
			}
			if old[n.ID] >= n.GPUs {
				continue
			}
			for other := range busy[physical(l, n.ID)] {
				if other != l {
					vacate[n.ID] = r.fed.Checkpoint
				}
			}
		}
		if changed {
			l.st.SetNodes(nodes, vacate)
		}
	}
}

// nodesOf are the nodes a lab schedules by a ledger: its own nodes (in
// their order) less the GPUs it lends, then the GPUs it borrows from labs
// that are up, named "<lender>/<node>", in name order. A lost lab has
// none.
func (r *fedRun) nodesOf(l *fedLab, lg *federation.Ledger) []optimizer.Node {
	lab := l.spec
	if l.down {
		return nil
	}
	var nodes []optimizer.Node
	for _, n := range lab.Nodes {
		if g := n.GPUs - lg.LentOn(n.ID); g > 0 {
			nodes = append(nodes, optimizer.Node{ID: n.ID, GPUs: g})
		}
	}
	borrowed := map[string]int{}
	for _, ls := range lg.Leases() {
		if ls.Borrower != lab.Name || r.byName[ls.Lender].down {
			continue
		}
		for _, n := range ls.Nodes {
			borrowed[ls.Lender+"/"+n.Node] += n.GPUs
		}
	}
	ids := make([]string, 0, len(borrowed))
	for id := range borrowed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		nodes = append(nodes, optimizer.Node{ID: id, GPUs: borrowed[id]})
	}
	return nodes
}

// physical names the machine behind a lab's node ID.
func physical(l *fedLab, id string) string {
	if strings.Contains(id, "/") {
		return id
	}
	return l.spec.Name + "/" + id
}

// observe checks, as the lenders would, that every borrower runs only on
// GPUs it leases and no GPU is held twice, accounts lent and borrowed
// GPU time, and times reclaims.
func (r *fedRun) observe(now float64) error {
	dt := r.fed.Interval
	held := map[string]int{}
	for _, l := range r.labs {
		for id, u := range l.st.Usage() {
			held[physical(l, id)] += u.GPUs
			lender, node, ok := strings.Cut(id, "/")
			if !ok {
				continue
			}
			o := federation.Order{Borrower: l.spec.Name, Node: node, GPUs: u.GPUs, At: now}
			if err := r.byName[lender].ledger.Authorize(o); err != nil {
				return fmt.Errorf("%w: %s runs on %s: %w", ErrInvariant, l.spec.Name, id, err)
			}
			l.used += float64(u.GPUs) * dt
		}
	}
	for _, l := range r.labs {
		for _, n := range l.spec.Nodes {
			if g := held[l.spec.Name+"/"+n.ID]; g > n.GPUs {
				return fmt.Errorf("%w: %d GPUs of %s/%s held, it has %d", ErrInvariant, g, l.spec.Name, n.ID, n.GPUs)
			}
		}
	}
	// Leases as the labs that are up hold them (a lost lab's frozen
	// ledger is not read).
	seen := map[string]bool{}
	for _, l := range r.labs {
		if l.down {
			continue
		}
		for _, ls := range l.ledger.Leases() {
			if seen[ls.ID] || ls.Expires <= now {
				continue
			}
			seen[ls.ID] = true
			g := float64(ls.GPUs()) * dt
			r.byName[ls.Lender].lent += g
			r.byName[ls.Borrower].borrowed += g
		}
	}
	keep := r.wait[:0]
	for _, p := range r.wait {
		if p.owner.down {
			keep = append(keep, p)
			continue
		}
		if u := p.owner.st.Usage()[p.node]; u.GPUs > 0 {
			p.owner.reclaims = append(p.owner.reclaims, now-p.at+u.Starting)
			continue
		}
		if p.owner.ledger.LentOn(p.node) > 0 || p.owner.done {
			p.owner.unused++
			continue
		}
		keep = append(keep, p)
	}
	r.wait = keep
	return nil
}
