package labloss

import (
	"context"
	"fmt"
	"slices"
	"time"

	"pollux/cluster/federation"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
	"pollux/testbed/launch"
)

// submit submits job (of application app) to lab and counts it accepted.
func (r *run) submit(ctx context.Context, lab, job, app string) error {
	spec, err := launch.Job{Name: job, App: app}.Spec(r.cat, 2*gpus)
	if err != nil {
		return err
	}
	if a := r.ls.Labs[lab].Client().SubmitAny(ctx, job, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
		return fmt.Errorf("submitting %s to %s: %s", job, lab, a.Error())
	}
	r.accepted[lab] = append(r.accepted[lab], job)
	return nil
}

// submitAll submits lab's jobs, one of each of apps.
func (r *run) submitAll(ctx context.Context, lab string, apps ...string) error {
	for k, app := range apps {
		if err := r.submit(ctx, lab, fmt.Sprintf("%s-%s-%d", labShort(lab), app, k+1), app); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	return nil
}

// waitFor polls cond on what the watcher saw until it holds; after
// within it fails the run (errJudged).
func (r *run) waitFor(ctx context.Context, what string, within time.Duration, cond func(*leaseWatch) bool) error {
	deadline := time.Now().Add(within)
	for {
		ok := false
		r.watch.ask(func(l *leaseWatch) { ok = cond(l) })
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: lab-loss: %s not seen within %v", what, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.watch.lw.every):
		}
	}
}

// await is waitFor with its failure recorded in the result.
func (r *run) await(ctx context.Context, what string, within time.Duration, cond func(*leaseWatch) bool) error {
	if err := r.waitFor(ctx, what, within, cond); err != nil {
		r.res.fail("%v", err)
		return errJudged
	}
	return nil
}

// lendAndBorrow submits the labs' jobs until the lost lab lends and
// borrows with workers and checkpoints on both sides. The lost lab's four
// jobs come first, more than its GPUs hold once it lends a node: it
// borrows the lender's node for them. Then the borrower's six, more than
// its 4 GPUs: it borrows a node of the lost lab, whose last GPUs are
// worth less to its own jobs. Then the lender's, accepted while it lends
// to the lost lab (on its node that it keeps).
func (r *run) lendAndBorrow(ctx context.Context) error {
	lost, lender, borrower := r.lost, r.lender, r.borrower
	if err := r.submitAll(ctx, lost, "cifar10", "ncf", "cifar10", "deepspeech2"); err != nil {
		return err
	}
	if err := r.await(ctx, lost+" borrowing from "+lender, 60*time.Second, func(l *leaseWatch) bool {
		return slices.ContainsFunc(l.withLab(lender, lost), func(le federation.Lease) bool { return le.Borrower == lost })
	}); err != nil {
		return err
	}
	if err := r.submitAll(ctx, borrower, "cifar10", "ncf", "cifar10", "cifar10", "ncf", "cifar10"); err != nil {
		return err
	}
	if err := r.await(ctx, lost+" lending to "+borrower+" and borrowing from "+lender+" with workers and checkpoints on both sides",
		90*time.Second, r.lendsAndBorrows); err != nil {
		return err
	}
	if err := r.submitAll(ctx, lender, "cifar10", "ncf"); err != nil {
		return err
	}
	return r.await(ctx, lost+" still lending and borrowing after the lender's submissions", 30*time.Second, r.lendsAndBorrows)
}

// lendsAndBorrows is the moment of the loss: the lost lab lends and
// borrows, with workers on both sides (the agents' worker records): its
// own on the lender's agent, the borrower's on its agent, one of its jobs
// and one of the borrower's workers on its agent with a checkpoint
// written, so that both have something to resume.
func (r *run) lendsAndBorrows(l *leaseWatch) bool {
	lost, lender, borrower, names := r.lost, r.lender, r.borrower, r.names
	leased := func(from, to string) bool {
		return slices.ContainsFunc(l.withLab(from, to), func(le federation.Lease) bool { return le.Lender == from && le.Borrower == to }) ||
			slices.ContainsFunc(l.withLab(to, from), func(le federation.Lease) bool { return le.Lender == from && le.Borrower == to })
	}
	if !leased(lender, lost) || !leased(lost, borrower) {
		return false
	}
	on := func(agentLab, owner string) []launch.Worker {
		return slices.DeleteFunc(r.ls.Labs[agentLab].Workers(), func(w launch.Worker) bool { return jobLab(w.Job, names) != owner })
	}
	mine, theirs := on(lender, lost), on(lost, borrower)
	if len(mine) == 0 || len(theirs) == 0 {
		return false
	}
	lostCkpt, theirCkpt := false, false
	for _, n := range names {
		ws, _ := record.ReadRoot(r.roots[n])
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

// lose kills every process of the lost lab, having noted what ran where
// and which leases the peers held with it, then watches the peers'
// ledgers until those leases are gone and judges their expiry against
// the time to live from the loss (expiryBound).
func (r *run) lose(ctx context.Context) {
	res, lost, names := r.res, r.lost, r.names
	if js, _, err := r.ls.Labs[lost].Client().JobsAny(ctx); err == nil {
		for _, j := range js {
			r.states[j.ID] = j.State
		}
	}
	c := r.ls.Labs[lost]
	members := append(slices.Clone(c.Servers), c.Agents...)
	// A resize or a finished job can leave a moment with no worker on one
	// side since lendsAndBorrows held: the loss waits (boundedly) for a
	// moment with workers on both, and kills the workers it counted. If
	// none comes, judge reports the zero counts.
	var workers []launch.Worker
	both := func(*leaseWatch) bool {
		res.BorrowedWorkersAtLoss, res.PeerWorkersAtLoss = 0, 0
		for _, n := range names {
			if n != lost {
				for _, w := range r.ls.Labs[n].Workers() {
					if jobLab(w.Job, names) == lost {
						res.BorrowedWorkersAtLoss++
					}
				}
			}
		}
		workers = c.Workers()
		for _, w := range workers {
			if jobLab(w.Job, names) != lost {
				res.PeerWorkersAtLoss++
			}
		}
		return res.BorrowedWorkersAtLoss > 0 && res.PeerWorkersAtLoss > 0
	}
	if err := r.waitFor(ctx, lost+"'s workers on both sides", 30*time.Second, both); err != nil {
		r.log.Warn("chaos: lab-loss: losing the lab without workers on both sides", "err", err)
	}
	atLoss := r.leasesAtLoss(ctx)
	r.log.Info("chaos: lab-loss: killing every process of the lab", "lab", lost, "members", len(members), "workers", len(workers))
	killSent := killLab(res, c, lost, members, workers)
	for _, n := range names {
		if n == lost {
			continue
		}
		werr := r.waitFor(ctx, "the end of "+n+"'s leases with "+lost, expiryBound(r.o.TTL, interval)+10*time.Second, func(l *leaseWatch) bool {
			return len(l.withLab(n, lost)) == 0
		})
		if werr != nil {
			res.fail("%v", werr)
		}
	}
	var tracks []leaseTrack
	r.watch.ask(func(l *leaseWatch) {
		for _, n := range names {
			for _, id := range atLoss[n] {
				if s := l.in[n][id]; s != nil {
					tracks = append(tracks, leaseTrack{lab: n, lease: id, sight: *s})
				}
			}
		}
	})
	judgeLeaseExpiry(res, tracks, r.o.TTL, interval, r.killAt, killSent)
	r.log.Info("chaos: lab-loss: leases gone from the peers' ledgers", "after_s", res.LeaseExpiryMaxS, "expires_max_s", res.LeaseExpiresMaxS,
		"bound_s", res.LeaseExpiryBoundS)
}

// leasesAtLoss polls the ledgers once more, counts the leases each peer
// holds with the lost lab and the GPUs they lend and borrow, and sets
// the moment of the loss (killAt) just after. It returns those leases'
// IDs, by peer.
func (r *run) leasesAtLoss(ctx context.Context) map[string][]string {
	res := r.res
	atLoss := map[string][]string{}
	r.watch.ask(func(l *leaseWatch) {
		l.poll(ctx)
		counted := map[string]bool{}
		for _, n := range r.names {
			if n == r.lost {
				continue
			}
			for _, le := range l.withLab(n, r.lost) {
				atLoss[n] = append(atLoss[n], le.ID)
				if counted[le.ID] {
					continue
				}
				counted[le.ID] = true
				res.LeasesAtLoss++
				if le.Lender == r.lost {
					res.LostLabLentAtLoss += le.GPUs()
				} else {
					res.LostLabBorrowedAtLoss += le.GPUs()
				}
			}
		}
		r.killAt = mono.Now()
	})
	return atLoss
}

// restart starts the lost lab's servers and agents again on their data
// directories.
func (r *run) restart(ctx context.Context) error {
	r.restartAt = mono.Now()
	c := r.ls.Labs[r.lost]
	for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
		if err := c.Start(ctx, m, "lab-loss", 2); err != nil {
			r.res.fail("restarting %s of %s: %v", m.ID, r.lost, err)
			return errJudged
		}
	}
	r.log.Info("chaos: lab-loss: restarted", "lab", r.lost)
	return nil
}

// awaitJobs waits for every job, in every lab, until done or the bound,
// and counts them.
func (r *run) awaitJobs(ctx context.Context) error {
	res := r.res
	final, reasons, err := awaitJobs(ctx, r.ls, r.accepted, r.o.Converge)
	if err != nil {
		return err
	}
	for _, n := range r.names {
		for _, j := range r.accepted[n] {
			s := final[n][j]
			if n == r.lost {
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
				res.fail("job %s of %s not completed within %v of the restart: %q", j, n, r.o.Converge, s)
			}
		}
	}
	return nil
}

// judge judges the workers' records, once the labs stopped, and checks
// that the loss found the lost lab lending and borrowing and that no
// process outlived the end.
func (r *run) judge() {
	res, lost := r.res, r.lost
	judgeRecords(res, r.roots, r.watch.lw.seen, r.ls.Labs[lost].Options().Grace, r.names, lost, r.states, r.killAt, r.restartAt)
	if res.BorrowedWorkersAtLoss == 0 || res.PeerWorkersAtLoss == 0 || res.PeerJobsToResume == 0 || res.LostLabToResume == 0 {
		res.fail("the loss did not find %s lending and borrowing: its workers on %s's agents %d, %s's workers on its agents %d (jobs with a checkpoint %d), its own unfinished jobs with a checkpoint %d",
			lost, r.lender, res.BorrowedWorkersAtLoss, r.borrower, res.PeerWorkersAtLoss, res.PeerJobsToResume, res.LostLabToResume)
	}
	for _, n := range r.names {
		for _, m := range append(slices.Clone(r.ls.Labs[n].Servers), r.ls.Labs[n].Agents...) {
			if m.Running() {
				res.fail("%s of %s still runs after the end", m.ID, n)
			}
		}
	}
	judgeLinear(res, r.names, func(lab string) string { return r.ls.Labs[lab].Options().Dir }, r.o.LinearTimeout)
}
