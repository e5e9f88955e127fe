package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/fedlink"
	"pollux/cluster/federation"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/driver"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
	"pollux/testbed/launch"
)

// labLossOpts are the settings of `pollux chaos --scenario lab-loss`.
type labLossOpts struct {
	Exec      []string
	Env       []string
	Dir       string // "" : a temporary directory, removed after a run that passes
	Seed      uint64 // picks the lab lost: lab-a, lab-b, lab-c by seed mod 3
	TimeScale float64
	TTL       time.Duration // the leases' time to live
	Converge  time.Duration // bound on the wait for every job after the restart
	LogLevel  string        // of the processes
	Logger    *slog.Logger
}

// labLossResult is the judgement of a lab-loss run, from outside the
// labs: their APIs, their agents' worker records and the process table.
type labLossResult struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	LostLab  string `json:"lost_lab"`
	// LenderLab lends to the lost lab, BorrowerLab borrows from it.
	LenderLab   string `json:"lender_lab"`
	BorrowerLab string `json:"borrower_lab"`
	// Jobs of the other labs: submitted (accepted), completed, failed;
	// lost is every accepted job that did not complete.
	JobsSubmitted int `json:"jobs_submitted"`
	JobsCompleted int `json:"jobs_completed"`
	JobsFailed    int `json:"jobs_failed"`
	LostJobs      int `json:"lost_jobs"`
	// The lost lab's jobs: accepted, completed after its restart, and
	// those that were running with a checkpoint at the loss and whose
	// first worker after the restart restored it (of them).
	LostLabJobs       int `json:"lost_lab_jobs"`
	LostLabCompleted  int `json:"lost_lab_completed"`
	LostLabResumed    int `json:"lost_lab_resumed"`
	LostLabToResume   int `json:"lost_lab_to_resume"`
	LostLabLentAtLoss int `json:"lost_lab_gpus_lent_at_loss"`
	// LostLabBorrowedAtLoss and LeasesAtLoss are what the lost lab's
	// peers' ledgers showed of it at the loss.
	LostLabBorrowedAtLoss int `json:"lost_lab_gpus_borrowed_at_loss"`
	LeasesAtLoss          int `json:"leases_at_loss"`
	// BorrowedWorkersAtLoss are the lost lab's workers running on its
	// peers' agents at the loss (their worker records).
	BorrowedWorkersAtLoss int `json:"borrowed_workers_at_loss"`
	// PeerWorkersAtLoss are the borrower's workers running on the lost
	// lab's agents at the loss (killed with it). PeerJobsToResume are the
	// borrower's jobs among them with a checkpoint written before the
	// loss; PeerJobsResumed those whose first worker after the loss
	// restored at least that checkpoint; PeerResumeMaxS the longest time
	// from the loss to such a worker's start, and PeerResumedOn the labs
	// whose agents ran them.
	PeerWorkersAtLoss int      `json:"peer_workers_at_loss"`
	PeerJobsToResume  int      `json:"peer_jobs_to_resume"`
	PeerJobsResumed   int      `json:"peer_jobs_resumed"`
	PeerResumeMaxS    float64  `json:"peer_resume_max_s"`
	PeerResumedOn     []string `json:"peer_resumed_on"`
	// LeaseTTLS is the leases' time to live; LeaseExpiryMaxS the longest
	// time from the loss until a poll found a lease with the lost lab
	// gone from a peer's ledger (polls every 250 ms); LeaseExpiresMaxS
	// the latest expiry of those leases, from the loss (at most the
	// TTL); LeaseHeldMaxS the latest start, from the loss, of a poll that
	// still found one; LeaseExpiryBoundS its bound: the TTL, one
	// federation interval and an expire's commit (expiryBound).
	LeaseTTLS         float64 `json:"lease_ttl_s"`
	LeaseExpiryMaxS   float64 `json:"lease_expiry_max_s"`
	LeaseExpiresMaxS  float64 `json:"lease_expires_max_s"`
	LeaseHeldMaxS     float64 `json:"lease_held_max_s"`
	LeaseExpiryBoundS float64 `json:"lease_expiry_bound_s"`
	// ProcessesKilled are the lab's servers, agents and workers killed.
	ProcessesKilled int `json:"processes_killed"`
	// Violations: a worker on a GPU its job's lab did not lease then, or
	// a restore that went back before a checkpoint already written.
	Violations int      `json:"violations"`
	Failures   []string `json:"failures"`
	ElapsedS   float64  `json:"elapsed_s"`
	Dir        string   `json:"dir,omitempty"`
}

func (r *labLossResult) fail(format string, a ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, a...))
}

func (r *labLossResult) violation(format string, a ...any) {
	r.Violations++
	r.fail("violation: "+format, a...)
}

// summary is the run's line in the figures of `pollux chaos --scenario
// all`: its jobs are those of every lab, the lost lab's that did not
// complete counted lost too.
func (r *labLossResult) summary() driver.ScenarioSummary {
	sc := driver.ScenarioSummary{Name: r.Scenario, FaultsByKind: map[string]int{}, JobsSubmitted: r.JobsSubmitted + r.LostLabJobs,
		JobsCompleted: r.JobsCompleted + r.LostLabCompleted, JobsFailed: r.JobsFailed, LostJobs: r.LostJobs + r.LostLabJobs - r.LostLabCompleted,
		Violations: r.Violations, Failures: r.Failures, ElapsedS: r.ElapsedS, Dir: r.Dir, LostLab: r.LostLab, LeaseExpiryMaxS: r.LeaseExpiryMaxS}
	if r.ProcessesKilled > 0 {
		sc.Faults, sc.FaultsByKind["lab-kill"] = 1, 1
	}
	return sc
}

// Pass says the run lost nothing and broke nothing.
func (r *labLossResult) Pass() bool {
	return len(r.Failures) == 0 && r.LostJobs == 0 && r.Violations == 0
}

// leaseSeen is what the poller saw of one lease: when (mono ns) it was
// first and last in a ledger, and its latest expiry (mono ns).
type leaseSeen struct {
	lease             federation.Lease
	first, last, exps int64
}

// ledgerSight is what the poller saw of one lease in one lab's own
// ledger (mono ns): the start of the last poll whose answer held it (it
// was there then or later), the end of the first poll after that whose
// answer did not (0: none yet; it was gone by then), and its expiry as
// last shown.
type ledgerSight struct {
	present, gone, expires int64
}

// leaseWatch polls every running lab's status and keeps what it saw of
// the leases.
type leaseWatch struct {
	ls    *labSet
	seen  map[string]*leaseSeen // by lease ID
	held  map[string][]federation.Lease
	in    map[string]map[string]*ledgerSight // by lab, lease ID
	every time.Duration
}

// poll reads each running lab's ledger once; held is set to what each
// lab answered (a lab that did not answer keeps its last answer).
func (lw *leaseWatch) poll(ctx context.Context) {
	for _, n := range lw.ls.names {
		c := lw.ls.labs[n]
		before := mono.Now()
		st, err := c.Client().StatusAny(ctx)
		now := mono.Now()
		if err != nil || st.Federation == nil {
			continue
		}
		// The leases' times are Unix seconds on the lab's clock, the
		// same machine's as the monotonic clock here.
		off := now - time.Now().UnixNano()
		lw.held[n] = st.Federation.Leases
		if lw.in[n] == nil {
			lw.in[n] = map[string]*ledgerSight{}
		}
		held := map[string]bool{}
		for _, l := range st.Federation.Leases {
			s := lw.seen[l.ID]
			if s == nil {
				s = &leaseSeen{lease: l, first: now}
				lw.seen[l.ID] = s
			}
			exp := int64(l.Expires*1e9) + off
			s.last = now
			s.exps = max(s.exps, exp)
			held[l.ID] = true
			lw.in[n][l.ID] = &ledgerSight{present: before, expires: exp}
		}
		for id, s := range lw.in[n] {
			if !held[id] && s.gone == 0 {
				s.gone = now
			}
		}
	}
}

// withLab are the leases lab n's last answer holds with lab peer.
func (lw *leaseWatch) withLab(n, peer string) []federation.Lease {
	var out []federation.Lease
	for _, l := range lw.held[n] {
		if l.Lender == peer || l.Borrower == peer {
			out = append(out, l)
		}
	}
	return out
}

// labShort is the prefix of a lab's job names: lab-a's jobs are a-...
func labShort(lab string) string { return strings.TrimPrefix(lab, "lab-") }

// jobLab is the lab a job belongs to, by its name's prefix (lab-a's jobs
// are a-...).
func jobLab(job string, names []string) string {
	for _, n := range names {
		if strings.HasPrefix(job, labShort(n)+"-") {
			return n
		}
	}
	return ""
}

// runLabLoss runs the lab-loss scenario: three labs of one server and two
// agents of 2 emulated GPUs each (TLS on), the lost lab's jobs first so
// that it borrows, then the other labs' jobs; SIGKILL of every process of
// the lost lab (servers, agents, the workers on its agents) while its
// peers hold leases with it; the peers' ledgers watched until those
// leases are gone; the lab restarted on its data directories; every job
// waited for; then the worker records judged.
func runLabLoss(ctx context.Context, o labLossOpts) (res *labLossResult, err error) {
	begin := time.Now()
	names := []string{"lab-a", "lab-b", "lab-c"}
	lost := names[o.Seed%uint64(len(names))]
	// The lost lab lends to one peer and borrows from the other.
	borrower, lender := names[(o.Seed+1)%uint64(len(names))], names[(o.Seed+2)%uint64(len(names))]
	res = &labLossResult{Scenario: "lab-loss", Seed: o.Seed, LostLab: lost, LenderLab: lender, BorrowerLab: borrower, LeaseTTLS: o.TTL.Seconds(),
		Failures: []string{}}
	log := o.Logger
	temp := o.Dir == ""
	dir := o.Dir
	if temp {
		if dir, err = os.MkdirTemp("", "pollux-lab-loss-"); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	} else if err = os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	res.Dir = dir
	cat, err := builtin.Catalog()
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	terms := federation.DefaultSettings()
	terms.TTL = o.TTL.Seconds()
	const gpusPerAgent, agents = 2, 2
	gpus := gpusPerAgent * agents
	interval := 500 * time.Millisecond
	tmpl := launch.Options{Exec: o.Exec, Env: o.Env, Dir: dir, Servers: 1, Agents: agents, GPUsPerAgent: gpusPerAgent,
		Interval: time.Second, TimeScale: o.TimeScale, LogLevel: o.LogLevel, Observe: true, Scenario: "lab-loss", Seed: o.Seed}
	log.Info("chaos: lab-loss: starting three labs", "lost", lost, "dir", dir)
	// A star around the lost lab: each peer trusts only it; the lender
	// lends one node and borrows nothing, the borrower borrows one node
	// and lends nothing, the lost lab lends and borrows one node each.
	shape := func(lab string, f *fedlink.File) {
		node := gpusPerAgent
		switch lab {
		case lost:
			f.Quota = federation.Quota{Nominal: gpus, LendingLimit: node, BorrowingLimit: node}
			return
		case lender:
			f.Quota = federation.Quota{Nominal: gpus, LendingLimit: node}
		case borrower:
			f.Quota = federation.Quota{Nominal: gpus, BorrowingLimit: node}
		}
		f.Peers = slices.DeleteFunc(f.Peers, func(p fedlink.PeerFile) bool { return p.Name != lost })
	}
	ls, err := startLabsWith(ctx, tmpl, names, federation.Quota{Nominal: gpus, LendingLimit: gpus, BorrowingLimit: 2 * gpus}, interval, terms, shape)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if serr := ls.stop(); serr != nil {
			res.fail("stopping the labs: %v", serr)
		}
	}
	defer func() {
		stop()
		res.ElapsedS = time.Since(begin).Seconds()
		if err == nil && res.Pass() && temp {
			_ = os.RemoveAll(dir)
			res.Dir = ""
		}
	}()
	if err != nil {
		return res, fmt.Errorf("chaos: %w", err)
	}
	lw := &leaseWatch{ls: ls, seen: map[string]*leaseSeen{}, held: map[string][]federation.Lease{}, in: map[string]map[string]*ledgerSight{},
		every: 250 * time.Millisecond}
	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	// Every use of lw below is through this goroutine's channel.
	type query func(*leaseWatch)
	queries := make(chan query)
	go func() {
		defer close(polled)
		t := time.NewTicker(lw.every)
		defer t.Stop()
		for {
			select {
			case <-pollCtx.Done():
				return
			case q := <-queries:
				q(lw)
			case <-t.C:
				lw.poll(pollCtx)
			}
		}
	}()
	ask := func(q query) {
		done := make(chan struct{})
		select {
		case queries <- func(l *leaseWatch) { q(l); close(done) }:
			<-done
		case <-polled:
		}
	}
	defer func() {
		stopPoll()
		<-polled
	}()

	accepted := map[string][]string{}
	submit := func(lab, job, app string) error {
		spec, err := launch.Job{Name: job, App: app}.Spec(cat, 2*gpus)
		if err != nil {
			return err
		}
		if a := ls.labs[lab].Client().SubmitAny(ctx, job, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
			return fmt.Errorf("submitting %s to %s: %s", job, lab, a.Error())
		}
		accepted[lab] = append(accepted[lab], job)
		return nil
	}
	// The lost lab's four jobs, more than its GPUs hold once it lends a
	// node: it borrows the lender's node for them.
	for k, app := range []string{"cifar10", "ncf", "cifar10", "deepspeech2"} {
		if err := submit(lost, fmt.Sprintf("%s-%s-%d", labShort(lost), app, k+1), app); err != nil {
			return res, fmt.Errorf("chaos: %w", err)
		}
	}
	waitFor := func(what string, within time.Duration, cond func(*leaseWatch) bool) error {
		deadline := time.Now().Add(within)
		for {
			ok := false
			ask(func(l *leaseWatch) { ok = cond(l) })
			if ok {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("chaos: lab-loss: %s not seen within %v", what, within)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(lw.every):
			}
		}
	}
	if err := waitFor(lost+" borrowing from "+lender, 60*time.Second, func(l *leaseWatch) bool {
		return slices.ContainsFunc(l.withLab(lender, lost), func(le federation.Lease) bool { return le.Borrower == lost })
	}); err != nil {
		res.fail("%v", err)
		return res, nil
	}
	// The borrower's six jobs, more than its 4 GPUs: it borrows a node of
	// the lost lab, whose last GPUs are worth less to its own jobs.
	for k, app := range []string{"cifar10", "ncf", "cifar10", "cifar10", "ncf", "cifar10"} {
		if err := submit(borrower, fmt.Sprintf("%s-%s-%d", labShort(borrower), app, k+1), app); err != nil {
			return res, fmt.Errorf("chaos: %w", err)
		}
	}
	// The moment of the loss: the lost lab lends and borrows, with
	// workers on both sides (the agents' worker records): its own on the
	// lender's agent, the borrower's on its agent, one of its jobs and
	// one of the borrower's workers on its agent with a checkpoint
	// written, so that both have something to resume.
	lendsAndBorrows := func(l *leaseWatch) bool {
		leased := func(from, to string) bool {
			return slices.ContainsFunc(l.withLab(from, to), func(le federation.Lease) bool { return le.Lender == from && le.Borrower == to }) ||
				slices.ContainsFunc(l.withLab(to, from), func(le federation.Lease) bool { return le.Lender == from && le.Borrower == to })
		}
		if !leased(lender, lost) || !leased(lost, borrower) {
			return false
		}
		on := func(agentLab, owner string) []launch.Worker {
			return slices.DeleteFunc(ls.labs[agentLab].Workers(), func(w launch.Worker) bool { return jobLab(w.Job, names) != owner })
		}
		mine, theirs := on(lender, lost), on(lost, borrower)
		if len(mine) == 0 || len(theirs) == 0 {
			return false
		}
		lostCkpt, theirCkpt := false, false
		for _, n := range names {
			ws, _ := record.ReadRoot(filepath.Join(ls.labs[n].Options().Dir, "records"))
			for _, w := range ws {
				_, ck := w.Find(record.Checkpoint)
				st := w.Start()
				lostCkpt = lostCkpt || ck && jobLab(st.Job, names) == lost
				theirCkpt = theirCkpt || ck && n == lost && slices.ContainsFunc(theirs, func(r launch.Worker) bool {
					return r.Job == st.Job && r.Inc == st.Inc && r.Rank == st.Rank && r.PID == st.PID
				})
			}
		}
		return lostCkpt && theirCkpt
	}
	if err := waitFor(lost+" lending to "+borrower+" and borrowing from "+lender+" with workers and checkpoints on both sides", 90*time.Second, lendsAndBorrows); err != nil {
		res.fail("%v", err)
		return res, nil
	}
	// The lender's jobs, accepted while it lends to the lost lab (on its
	// node that it keeps).
	for k, app := range []string{"cifar10", "ncf"} {
		if err := submit(lender, fmt.Sprintf("%s-%s-%d", labShort(lender), app, k+1), app); err != nil {
			return res, fmt.Errorf("chaos: %w", err)
		}
	}
	if err := waitFor(lost+" still lending and borrowing after the lender's submissions", 30*time.Second, lendsAndBorrows); err != nil {
		res.fail("%v", err)
		return res, nil
	}
	states := map[string]string{}
	if js, _, err := ls.labs[lost].Client().JobsAny(ctx); err == nil {
		for _, j := range js {
			states[j.ID] = j.State
		}
	}
	c := ls.labs[lost]
	members := append(slices.Clone(c.Servers), c.Agents...)
	workers := c.Workers()
	for _, n := range names {
		if n != lost {
			for _, w := range ls.labs[n].Workers() {
				if jobLab(w.Job, names) == lost {
					res.BorrowedWorkersAtLoss++
				}
			}
		}
	}
	for _, w := range workers {
		if jobLab(w.Job, names) != lost {
			res.PeerWorkersAtLoss++
		}
	}
	var killAt int64
	atLoss := map[string][]string{} // the leases each peer's ledger holds with the lost lab, by peer
	ask(func(l *leaseWatch) {
		l.poll(ctx)
		counted := map[string]bool{}
		for _, n := range names {
			if n == lost {
				continue
			}
			for _, le := range l.withLab(n, lost) {
				atLoss[n] = append(atLoss[n], le.ID)
				if counted[le.ID] {
					continue
				}
				counted[le.ID] = true
				res.LeasesAtLoss++
				if le.Lender == lost {
					res.LostLabLentAtLoss += le.GPUs()
				} else {
					res.LostLabBorrowedAtLoss += le.GPUs()
				}
			}
		}
		killAt = mono.Now()
	})
	log.Info("chaos: lab-loss: killing every process of the lab", "lab", lost, "members", len(members), "workers", len(workers))
	killSent := killLab(res, c, lost, members, workers)
	// Lost lab's leases out of the peers' ledgers, each judged against
	// its time to live from the loss (expiryBound).
	for _, n := range names {
		if n == lost {
			continue
		}
		werr := waitFor("the end of "+n+"'s leases with "+lost, expiryBound(o.TTL, interval)+10*time.Second, func(l *leaseWatch) bool {
			return len(l.withLab(n, lost)) == 0
		})
		if werr != nil {
			res.fail("%v", werr)
		}
	}
	var tracks []leaseTrack
	ask(func(l *leaseWatch) {
		for _, n := range names {
			for _, id := range atLoss[n] {
				if s := l.in[n][id]; s != nil {
					tracks = append(tracks, leaseTrack{lab: n, lease: id, sight: *s})
				}
			}
		}
	})
	judgeLeaseExpiry(res, tracks, o.TTL, interval, killAt, killSent)
	log.Info("chaos: lab-loss: leases gone from the peers' ledgers", "after_s", res.LeaseExpiryMaxS, "expires_max_s", res.LeaseExpiresMaxS,
		"bound_s", res.LeaseExpiryBoundS)
	// The peers carry on without the lost lab: the borrower's jobs that
	// ran on it run again from their checkpoints, on its own nodes (or
	// another lender's), before the lost lab returns.
	roots := map[string]string{}
	for _, n := range names {
		roots[n] = filepath.Join(ls.labs[n].Options().Dir, "records")
	}
	if err := awaitPeersResumed(ctx, res, roots, names, lost, killAt, o.Converge); err != nil {
		return res, err
	}
	log.Info("chaos: lab-loss: the peers' jobs that ran on the lost lab run again", "lab", lost)
	// The restart, on the same data directories.
	restartAt := mono.Now()
	for _, m := range members {
		if err := c.Start(ctx, m, "lab-loss", 2); err != nil {
			res.fail("restarting %s of %s: %v", m.ID, lost, err)
			return res, nil
		}
	}
	log.Info("chaos: lab-loss: restarted", "lab", lost)
	// Every job, in every lab, until done or the bound.
	final, reasons, err := awaitJobs(ctx, ls, accepted, o.Converge)
	if err != nil {
		return res, err
	}
	for _, n := range names {
		for _, j := range accepted[n] {
			s := final[n][j]
			if n == lost {
				res.LostLabJobs++
				if s == "completed" {
					res.LostLabCompleted++
				} else {
					res.fail("job %s of the lost lab %s did not complete after the restart: %s %s", j, n, s, reasons[j])
				}
				continue
			}
			res.JobsSubmitted++
			switch s {
			case "completed":
				res.JobsCompleted++
			case "failed":
				res.JobsFailed++
				res.LostJobs++
				res.fail("job %s of %s failed: %s", j, n, reasons[j])
			default:
				res.LostJobs++
				res.fail("job %s of %s not completed within %v of the restart: %q", j, n, o.Converge, s)
			}
		}
	}
	stopPoll()
	<-polled
	stop()
	judgeLabLossRecords(res, roots, lw.seen, ls.labs[lost].Options().Grace, names, lost, states, killAt, restartAt)
	if res.BorrowedWorkersAtLoss == 0 || res.PeerWorkersAtLoss == 0 || res.PeerJobsToResume == 0 || res.LostLabToResume == 0 {
		res.fail("the loss did not find %s lending and borrowing: its workers on %s's agents %d, %s's workers on its agents %d (jobs with a checkpoint %d), its own unfinished jobs with a checkpoint %d",
			lost, lender, res.BorrowedWorkersAtLoss, borrower, res.PeerWorkersAtLoss, res.PeerJobsToResume, res.LostLabToResume)
	}
	for _, n := range names {
		for _, m := range append(slices.Clone(ls.labs[n].Servers), ls.labs[n].Agents...) {
			if m.Running() {
				res.fail("%s of %s still runs after the end", m.ID, n)
			}
		}
	}
	return res, nil
}

// expireCommit bounds the Raft commit of a lab's expire command (one
// server, bolt on disk): the two-cluster commits of `pollux bench
// federation` take 6-9 ms at the median and at most 40 ms at the p99 on a
// loaded machine (docs/benchmarks.md), and an expire is one commit.
const expireCommit = 100 * time.Millisecond

// expiryBound is how long after a lab's loss its peers' ledgers may
// still hold a lease with it: the lease was last renewed before the loss
// (its expiry at most ttl after it), and a lab's leader expires leases
// at the start of its federation round, every interval; a round starts
// at most two intervals after the expiry, since the round's ticker drops
// the tick that falls while the previous round still runs (it sends the
// lab's bid to every peer and commits its part of the plan, and a loaded
// machine can stretch that past the interval); then the expire's commit
// (expireCommit). The lease is out of force from its expiry whether or
// not the ledger still lists it (orders and borrowed nodes are checked
// against the expiry), so this bounds bookkeeping, not what may run.
func expiryBound(ttl, interval time.Duration) time.Duration { return ttl + expiryGrace(interval) }

// expiryGrace is how long after its expiry a lease may still be listed:
// two federation intervals and the expire's commit (see expiryBound).
func expiryGrace(interval time.Duration) time.Duration { return 2*interval + expireCommit }

// leaseTrack is what the poller saw of a lease a surviving lab's ledger
// held with the lost lab at the loss.
type leaseTrack struct {
	lab, lease string
	sight      ledgerSight
}

// judgeLeaseExpiry checks, for every lease a survivor held with the lost
// lab at the loss (killAt: just before the signals; killSent: once they
// were all sent): that its expiry, as the survivor's ledger last showed
// it, is at most the time to live after the kill (no renewal after the
// loss; 1 ms for the conversion of the ledger's Unix seconds), that no
// poll started later than expiryGrace after that expiry still found it,
// and that it was seen gone.
// LeaseExpiryMaxS is the longest time from the loss to a poll that found
// a lease gone (the polling's 250 ms included), LeaseExpiresMaxS the
// latest expiry, LeaseHeldMaxS the latest poll that found one, and
// LeaseExpiryBoundS that poll's bound from the loss.
func judgeLeaseExpiry(res *labLossResult, tracks []leaseTrack, ttl, interval time.Duration, killAt, killSent int64) {
	res.LeaseExpiryBoundS = expiryBound(ttl, interval).Seconds()
	after := expiryGrace(interval)
	for _, t := range tracks {
		s := t.sight
		res.LeaseExpiresMaxS = max(res.LeaseExpiresMaxS, float64(s.expires-killAt)/1e9)
		res.LeaseHeldMaxS = max(res.LeaseHeldMaxS, float64(s.present-killAt)/1e9)
		if s.expires > killSent+int64(ttl+time.Millisecond) {
			res.fail("lease %s in %s's ledger expires %.3f s after the loss, beyond its time to live %v: renewed after the loss", t.lease, t.lab,
				float64(s.expires-killAt)/1e9, ttl)
		}
		if s.present > s.expires+int64(after) {
			res.fail("lease %s was still in %s's ledger %.3f s after its expiry, beyond two federation intervals and the expire's commit (%v)",
				t.lease, t.lab, float64(s.present-s.expires)/1e9, after)
		}
		if s.gone == 0 {
			res.fail("lease %s was not seen gone from %s's ledger", t.lease, t.lab)
			continue
		}
		res.LeaseExpiryMaxS = max(res.LeaseExpiryMaxS, float64(s.gone-killAt)/1e9)
	}
}

// killLab is kill -9 of every member of the lab and of the workers on
// its agents, all at once; then the process table: none of them may
// outlive the kill by 10 s. It returns when (mono ns) the last signal
// was sent.
func killLab(res *labLossResult, c *launch.Cluster, lost string, members []*launch.Member, workers []launch.Worker) int64 {
	var killErrs []error
	for _, m := range members {
		killErrs = append(killErrs, c.Signal(m, syscall.SIGKILL, "lab-loss", 1))
	}
	for _, w := range workers {
		killErrs = append(killErrs, c.KillWorker(w, "lab-loss", 1))
	}
	sent := mono.Now()
	if err := errors.Join(killErrs...); err != nil {
		res.fail("killing %s: %v", lost, err)
	}
	res.ProcessesKilled = len(members) + len(workers)
	// The process table: nothing of the lab may outlive the kill.
	deadline := time.Now().Add(10 * time.Second)
	for _, w := range workers {
		for mono.Alive(w.PID, w.Boot) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if mono.Alive(w.PID, w.Boot) {
			res.fail("worker %s (pid %d) on %s's agent %s still runs after SIGKILL", w.Job, w.PID, lost, w.Node)
		}
	}
	for _, m := range members {
		for m.Running() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if m.Running() {
			res.fail("%s of %s still runs after SIGKILL", m.ID, lost)
		}
	}
	return sent
}

// awaitJobs polls every lab's jobs until each job a lab accepted has
// completed or failed, or converge has passed; it returns the jobs'
// last states and reasons seen, by lab and job.
func awaitJobs(ctx context.Context, ls *labSet, accepted map[string][]string, converge time.Duration) (map[string]map[string]string,
	map[string]string, error) {
	final := map[string]map[string]string{}
	reasons := map[string]string{}
	convergeBy := time.Now().Add(converge)
	for {
		open := 0
		for _, n := range ls.names {
			js, _, err := ls.labs[n].Client().JobsAny(ctx)
			if err != nil {
				open++
				continue
			}
			final[n] = map[string]string{}
			for _, j := range js {
				final[n][j.ID] = j.State
				reasons[j.ID] = j.Reason
			}
			for _, j := range accepted[n] {
				if s := final[n][j]; s != "completed" && s != "failed" {
					open++
				}
			}
		}
		if open == 0 || time.Now().After(convergeBy) {
			break
		}
		select {
		case <-ctx.Done():
			return final, reasons, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return final, reasons, nil
}

// labWorker is a worker's records and the lab whose agent ran it.
type labWorker struct {
	lab string
	w   record.Worker
}

// workersByJob reads every lab's worker records (roots, by lab), by job.
func workersByJob(roots map[string]string, names []string) (map[string][]labWorker, error) {
	out := map[string][]labWorker{}
	for _, n := range names {
		ws, err := record.ReadRoot(roots[n])
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			out[w.Start().Job] = append(out[w.Start().Job], labWorker{n, w})
		}
	}
	return out, nil
}

// checkpointedAtLoss is the progress of the latest checkpoint of a job
// (rs, its workers' records) written before the loss, and whether there
// is one to resume from: not when the job had finished training before
// the loss (a done record, or a checkpoint of the end of training): it
// needs no worker again, only its completion.
func checkpointedAtLoss(rs []record.Record, killAt int64) (float64, bool) {
	before, checkpointed := 0.0, false
	for _, r := range rs {
		if r.T >= killAt {
			continue
		}
		if r.Kind == record.Done || r.Kind == record.Checkpoint && r.Finished {
			return 0, false
		}
		if r.Kind == record.Checkpoint {
			before, checkpointed = max(before, r.Progress), true
		}
	}
	return before, checkpointed
}

// onLostAtLoss reports whether a job (ws, its workers) had a worker on
// the lost lab's agents at the loss (started before it, no exit written)
// and a checkpoint to resume from (checkpointedAtLoss), with that
// checkpoint's progress.
func onLostAtLoss(ws []labWorker, lost string, killAt int64) (float64, bool) {
	onLost := false
	var rs []record.Record
	for _, lw := range ws {
		_, exited := lw.w.Find(record.Exit)
		onLost = onLost || lw.lab == lost && lw.w.Start().T < killAt && !exited
		rs = append(rs, lw.w.Records...)
	}
	before, checkpointed := checkpointedAtLoss(rs, killAt)
	return before, onLost && checkpointed
}

// firstAfter is the first of ws to start after t (nil: none).
func firstAfter(ws []labWorker, t int64) *labWorker {
	var next *labWorker
	for i, lw := range ws {
		if st := lw.w.Start().T; st > t && (next == nil || st < next.w.Start().T) {
			next = &ws[i]
		}
	}
	return next
}

// awaitPeersResumed waits, the lost lab still down, until every job of
// another lab that ran on the lost lab's agents at the loss with a
// checkpoint written has a worker started since (every lab's worker
// records), or until the bound; it fails the run then.
func awaitPeersResumed(ctx context.Context, res *labLossResult, roots map[string]string, names []string, lost string, killAt int64,
	within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		var waiting []string
		if byJob, err := workersByJob(roots, names); err == nil {
			for _, job := range slices.Sorted(maps.Keys(byJob)) {
				if _, ok := onLostAtLoss(byJob[job], lost, killAt); ok && jobLab(job, names) != lost && firstAfter(byJob[job], killAt) == nil {
					waiting = append(waiting, job)
				}
			}
		} else {
			waiting = append(waiting, err.Error())
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			res.fail("jobs of %s's peers that ran on it were not run again within %v of the loss, before its return: %v", lost, within, waiting)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// borrowedRun is a worker of one lab's job on another lab's agent, as
// its record shows it (mono ns).
type borrowedRun struct {
	lender, node, owner, job string
	start, end               int64
	gpus                     int
}

// judgeLabLossRecords judges the workers' own records (roots: every
// lab's, by lab) against the leases seen: a worker of a job of lab X on an agent of another lab L must
// have run while the poller saw a lease of that node from L to X (from
// its start to its last record, give or take the polling, the federation
// interval and the workers' SIGTERM grace), X's workers on that node
// together on no more GPUs than its leases of it give; the lost lab's jobs that
// were running with a checkpoint at the loss must restore it after the
// restart; no restore goes back before a checkpoint already written.
func judgeLabLossRecords(res *labLossResult, roots map[string]string, seen map[string]*leaseSeen, workerGrace time.Duration,
	names []string, lost string, states map[string]string, killAt, restartAt int64) {
	const slack = int64(3 * time.Second)
	grace := int64(workerGrace)
	byJob := map[string][]record.Record{}
	var borrowed []borrowedRun
	workersOf := map[string][]labWorker{} // by job
	for _, n := range names {
		ws, err := record.ReadRoot(roots[n])
		if err != nil {
			res.fail("reading %s's worker records: %v", n, err)
			continue
		}
		for _, w := range ws {
			job := w.Start().Job
			byJob[job] = append(byJob[job], w.Records...)
			workersOf[job] = append(workersOf[job], labWorker{n, w})
			owner := jobLab(job, names)
			if owner == "" {
				res.fail("worker record of an unknown job %s on %s/%s", job, n, w.Node)
				continue
			}
			if owner == n {
				continue
			}
			start, end := w.Start().T, w.Records[len(w.Records)-1].T
			ok := false
			for _, s := range seen {
				if s.lease.Lender != n || s.lease.Borrower != owner || !slices.ContainsFunc(s.lease.Nodes, func(g federation.NodeGPUs) bool {
					return g.Node == w.Node && g.GPUs >= len(w.Start().GPUs)
				}) {
					continue
				}
				if start >= s.first-slack && start <= min(s.last, s.exps)+slack && end <= max(s.last, s.exps)+slack+grace {
					ok = true
					break
				}
			}
			if !ok {
				res.violation("worker of %s's job %s (inc %d, rank %d) ran on %s's node %s from %s to %s s after the loss, outside any lease seen of that node to %s",
					owner, job, w.Start().Inc, w.Start().Rank, n, w.Node, secs(start-killAt), secs(end-killAt), owner)
			}
			borrowed = append(borrowed, borrowedRun{lender: n, node: w.Node, owner: owner, job: job, start: start, end: end, gpus: len(w.Start().GPUs)})
		}
	}
	// At each borrowed worker's start, its lab's workers on that node
	// together within the GPUs of that node its leases seen then give.
	for _, b := range borrowed {
		used, leased := 0, 0
		for _, o := range borrowed {
			if o.lender == b.lender && o.node == b.node && o.owner == b.owner && o.start <= b.start && o.end > b.start {
				used += o.gpus
			}
		}
		for _, s := range seen {
			if s.lease.Lender != b.lender || s.lease.Borrower != b.owner || b.start < s.first-slack || b.start > max(s.last, s.exps)+slack {
				continue
			}
			for _, g := range s.lease.Nodes {
				if g.Node == b.node {
					leased += g.GPUs
				}
			}
		}
		if used > leased {
			res.violation("%s's workers used %d GPUs of %s's node %s when a worker of %s started there %s s after the loss; its leases of that node gave %d",
				b.owner, used, b.lender, b.node, b.job, secs(b.start-killAt), leased)
		}
	}
	for job, rs := range byJob {
		sort.Slice(rs, func(i, k int) bool { return rs[i].T < rs[k].T })
		best := 0.0
		for _, r := range rs {
			switch r.Kind {
			case record.Checkpoint:
				best = max(best, r.Progress)
			case record.Restore:
				if r.Progress < best-1e-9 {
					res.violation("job %s restored progress %.4f after a checkpoint of %.4f was written", job, r.Progress, best)
				}
			}
		}
		if jobLab(job, names) != lost {
			// A peer's job running on the lost lab's agents at the loss,
			// with a checkpoint written before it: its owner runs it
			// again (on its own nodes or another lender's) from that
			// checkpoint, before the lost lab returns.
			before, ok := onLostAtLoss(workersOf[job], lost, killAt)
			if !ok {
				continue
			}
			res.PeerJobsToResume++
			next := firstAfter(workersOf[job], killAt)
			if next == nil || next.w.Start().T > restartAt {
				res.fail("%s's job %s ran on %s's agent at the loss, and no worker of it started after before %s returned", jobLab(job, names), job, lost, lost)
				continue
			}
			rst, ok := next.w.Find(record.Restore)
			if !ok || rst.Fresh || rst.Progress < before-1e-9 {
				res.fail("%s's job %s checkpointed progress %.4f before the loss of %s, where it ran; its first worker after (on %s's %s) did not restore it",
					jobLab(job, names), job, before, lost, next.lab, next.w.Node)
				continue
			}
			res.PeerJobsResumed++
			res.PeerResumeMaxS = max(res.PeerResumeMaxS, float64(next.w.Start().T-killAt)/1e9)
			if !slices.Contains(res.PeerResumedOn, next.lab) {
				res.PeerResumedOn = append(res.PeerResumedOn, next.lab)
				slices.Sort(res.PeerResumedOn)
			}
			continue
		}
		if st := states[job]; st == "" || st == "completed" || st == "failed" || st == "cancelled" {
			continue
		}
		before, checkpointed := checkpointedAtLoss(rs, killAt)
		if !checkpointed {
			continue
		}
		res.LostLabToResume++
		resumed := false
		for _, r := range rs {
			if r.Kind == record.Restore && r.T0 > restartAt {
				resumed = !r.Fresh && r.Progress >= before-1e-9
				break
			}
		}
		if resumed {
			res.LostLabResumed++
		} else {
			res.fail("job %s of %s checkpointed progress %.4f before the loss but its first worker after the restart did not restore it", job, lost, before)
		}
	}
}

func secs(ns int64) string { return fmt.Sprintf("%.1f", float64(ns)/1e9) }

// printLabLoss prints the result (JSON, or a table) and fails unless the
// run passed.
func printLabLoss(res *labLossResult, jsonOut bool, w io.Writer) error {
	if jsonOut {
		if err := writeJSON(w, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "scenario\tlost lab\tleases at loss\tlent/borrowed at loss\tlease held max / bound (s)\tTTL (s)\tother labs' jobs\tcompleted\tlost\tpeer jobs resumed (of)\tlost lab's jobs\tcompleted\tresumed (of)\tviolations\ttook (s)\t")
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%.2f / %.2f\t%.0f\t%d\t%d\t%d\t%d (%d)\t%d\t%d\t%d (%d)\t%d\t%.0f\t\n", res.Scenario, res.LostLab, res.LeasesAtLoss,
			res.LostLabLentAtLoss, res.LostLabBorrowedAtLoss, res.LeaseHeldMaxS, res.LeaseExpiryBoundS, res.LeaseTTLS, res.JobsSubmitted, res.JobsCompleted,
			res.LostJobs, res.PeerJobsResumed, res.PeerJobsToResume, res.LostLabJobs, res.LostLabCompleted, res.LostLabResumed, res.LostLabToResume,
			res.Violations, res.ElapsedS)
		if err := tw.Flush(); err != nil {
			return err
		}
		if res.Dir != "" {
			fmt.Fprintln(w, "kept:", res.Dir)
		}
		for _, f := range res.Failures {
			fmt.Fprintln(w, "FAIL:", f)
		}
	}
	if !res.Pass() {
		return fmt.Errorf("%w: lab-loss: %d failures (%d lost jobs, %d violations)", errChaosFailed, len(res.Failures), res.LostJobs, res.Violations)
	}
	return nil
}

// runLabLossCmd checks the flags of the lab-loss scenario, runs it and
// prints its result.
func runLabLossCmd(cmd *cobra.Command, o labLossOpts, logLevel string, jsonOut bool) error {
	f := cmd.Flags()
	for _, name := range []string{"judge", "network"} {
		if f.Changed(name) {
			return badInput(fmt.Errorf("chaos: --%s cannot be used with --scenario lab-loss", name))
		}
	}
	if !f.Changed("time-scale") {
		o.TimeScale = 100 // jobs long enough to be running at the loss and after the restart
	}
	if !(o.TimeScale > 0) || o.TTL <= 0 || o.TTL > time.Duration(federation.MaxTTL)*time.Second || o.Converge <= 0 {
		return badInput(fmt.Errorf("chaos: lab-loss needs --time-scale > 0, --lease-ttl in (0, %ds] and --converge > 0", federation.MaxTTL))
	}
	var err error
	if o.Logger, err = chaosLogger(cmd.ErrOrStderr(), logLevel, jsonOut); err != nil {
		return err
	}
	if o.Exec, err = ownExec(o.Exec); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := runLabLoss(ctx, o)
	if err != nil {
		if res != nil && res.Dir != "" {
			o.Logger.Error("chaos: lab-loss: the run is kept", "dir", res.Dir)
		}
		return fmt.Errorf("%w: %w", errChaosFailed, err)
	}
	if res.Dir != "" {
		o.Logger.Warn("chaos: lab-loss: the run is kept", "dir", res.Dir)
	}
	return printLabLoss(res, jsonOut, cmd.OutOrStdout())
}
