package labloss

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"pollux/cluster/federation"
	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/linear"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
	"pollux/testbed/fedlab"
	"pollux/testbed/launch"
)

// expireCommit bounds the Raft commit of a lab's expire command (one
// server, bolt on disk): the two-cluster commits of `pollux bench
// federation` take 6-9 ms at the median and at most 40 ms at the p99 on a
// loaded machine (docs/benchmarks.md), and an expire is one commit.
const expireCommit = 100 * time.Millisecond

// expiryBound is how long after a lab's loss its peers' ledgers may
// still hold a lease with it: the time to live since the last renewal,
// then up to two federation intervals until a round expires it and the
// expire's commit. It bounds bookkeeping, not what may run
// (docs/reliability.md, "Lab loss").
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

// judgeLeaseExpiry checks every lease a survivor held with the lost lab
// at the loss (killAt: just before the signals; killSent: once all were
// sent): its expiry is at most the time to live after the kill, no poll
// later than expiryGrace past it still found it, and it was seen gone.
// It sets res's LeaseExpiryMaxS, LeaseExpiresMaxS, LeaseHeldMaxS and
// LeaseExpiryBoundS.
func judgeLeaseExpiry(res *Result, tracks []leaseTrack, ttl, interval time.Duration, killAt, killSent int64) {
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
func killLab(res *Result, c *launch.Cluster, lost string, members []*launch.Member, workers []launch.Worker) int64 {
	var killErrs []error
	killed := 0
	for _, m := range members {
		err := c.Signal(m, syscall.SIGKILL, "lab-loss", 1)
		if err == nil {
			killed++
		}
		killErrs = append(killErrs, err)
	}
	for _, w := range workers {
		// A worker that exited on its own meanwhile was not killed, and
		// is no failure of the kill.
		switch err := c.KillWorker(w, "lab-loss", 1); {
		case err == nil:
			killed++
		case !errors.Is(err, launch.ErrNotRunning):
			killErrs = append(killErrs, err)
		}
	}
	sent := mono.Now()
	if err := errors.Join(killErrs...); err != nil {
		res.fail("killing %s: %v", lost, err)
	}
	res.ProcessesKilled = killed
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
func awaitJobs(ctx context.Context, ls *fedlab.Set, accepted map[string][]string, converge time.Duration) (map[string]map[string]string,
	map[string]string, error) {
	final := map[string]map[string]string{}
	reasons := map[string]string{}
	convergeBy := time.Now().Add(converge)
	for {
		open := 0
		for _, n := range ls.Names {
			js, _, err := ls.Labs[n].Client().JobsAny(ctx)
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
func awaitPeersResumed(ctx context.Context, res *Result, roots map[string]string, names []string, lost string, killAt int64,
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

// judgeRecords judges the workers' own records (roots, by lab) against
// the leases seen: a lab's worker on another lab's agent ran only under a
// lease of that node, on no more GPUs than its leases give; the jobs
// running on the lost lab with a checkpoint restore it (a peer's before
// the lost lab returns); no restore goes back before a checkpoint already
// written (docs/reliability.md, "Lab loss").
func judgeRecords(res *Result, roots map[string]string, seen map[string]*leaseSeen, workerGrace time.Duration,
	names []string, lost string, states map[string]string, killAt, restartAt int64) {
	byJob := map[string][]record.Record{}
	workersOf := map[string][]labWorker{} // by job
	var borrowed []borrowedRun
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
			if b, ok := judgeBorrowed(res, n, w, seen, workerGrace, names, killAt); ok {
				borrowed = append(borrowed, b)
			}
		}
	}
	judgeNodeUse(res, borrowed, seen, killAt)
	for job, rs := range byJob {
		judgeRestores(res, job, rs, workersOf[job], names, lost, states, killAt, restartAt)
	}
}

// slack is the give or take of the lease checks: the polling, the
// federation interval.
const slack = int64(3 * time.Second)

// judgeBorrowed judges a worker w that lab n's agent ran: when it is of
// another lab's job, it must have run within a lease seen of its node
// from n to that lab; it is then returned as a borrowed run.
func judgeBorrowed(res *Result, n string, w record.Worker, seen map[string]*leaseSeen, workerGrace time.Duration, names []string,
	killAt int64) (borrowedRun, bool) {
	grace := int64(workerGrace)
	job := w.Start().Job
	owner := jobLab(job, names)
	if owner == "" {
		res.fail("worker record of an unknown job %s on %s/%s", job, n, w.Node)
		return borrowedRun{}, false
	}
	if owner == n {
		return borrowedRun{}, false
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
	return borrowedRun{lender: n, node: w.Node, owner: owner, job: job, start: start, end: end, gpus: len(w.Start().GPUs)}, true
}

// judgeNodeUse checks that at each borrowed worker's start, its lab's
// workers on that node together were within the GPUs of that node its
// leases seen then give.
func judgeNodeUse(res *Result, borrowed []borrowedRun, seen map[string]*leaseSeen, killAt int64) {
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
}

// judgeRestores judges the restores of one job (rs: its workers'
// records, ws: its workers): none behind a checkpoint already written;
// a peer's job that ran on the lost lab at the loss restored its
// checkpoint before the lost lab returned (judgePeerResume); the lost
// lab's own unfinished jobs with a checkpoint restored it after the
// restart.
func judgeRestores(res *Result, job string, rs []record.Record, ws []labWorker, names []string, lost string, states map[string]string,
	killAt, restartAt int64) {
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
		judgePeerResume(res, job, ws, names, lost, killAt, restartAt)
		return
	}
	if st := states[job]; st == "" || st == "completed" || st == "failed" || st == "cancelled" {
		return
	}
	before, checkpointed := checkpointedAtLoss(rs, killAt)
	if !checkpointed {
		return
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

// judgePeerResume judges a peer's job (ws: its workers) running on the
// lost lab's agents at the loss, with a checkpoint written before it: its
// owner runs it again (on its own nodes or another lender's) from that
// checkpoint, before the lost lab returns.
func judgePeerResume(res *Result, job string, ws []labWorker, names []string, lost string, killAt, restartAt int64) {
	before, ok := onLostAtLoss(ws, lost, killAt)
	if !ok {
		return
	}
	res.PeerJobsToResume++
	next := firstAfter(ws, killAt)
	if next == nil || next.w.Start().T > restartAt {
		res.fail("%s's job %s ran on %s's agent at the loss, and no worker of it started after before %s returned", jobLab(job, names), job, lost, lost)
		return
	}
	rst, ok := next.w.Find(record.Restore)
	if !ok || rst.Fresh || rst.Progress < before-1e-9 {
		res.fail("%s's job %s checkpointed progress %.4f before the loss of %s, where it ran; its first worker after (on %s's %s) did not restore it",
			jobLab(job, names), job, before, lost, next.lab, next.w.Node)
		return
	}
	res.PeerJobsResumed++
	res.PeerResumeMaxS = max(res.PeerResumeMaxS, float64(next.w.Start().T-killAt)/1e9)
	if !slices.Contains(res.PeerResumedOn, next.lab) {
		res.PeerResumedOn = append(res.PeerResumedOn, next.lab)
		slices.Sort(res.PeerResumedOn)
	}
}

func secs(ns int64) string { return fmt.Sprintf("%.1f", float64(ns)/1e9) }

// judgeLinear checks each lab's client-side API history (dir(lab)'s
// history.jsonl) for linearizability: a history that cannot be read, an
// operation not linearizable and a search not decided within timeout
// fail the run.
func judgeLinear(res *Result, labs []string, dir func(string) string, timeout time.Duration) {
	res.Linearizable = true
	for _, lab := range labs {
		path := filepath.Join(dir(lab), "history.jsonl")
		lines, err := history.ReadFile(path)
		if err != nil {
			res.Linearizable = false
			res.fail("%s: API history: %v", lab, err)
			continue
		}
		lr, err := linear.Check(lines, linear.Options{Timeout: timeout, VisualizeDir: dir(lab)})
		if err != nil {
			res.Linearizable = false
			res.fail("%s: API history: %v", lab, err)
			continue
		}
		res.LinearOps += lr.Ops
		for _, f := range lr.Illegal {
			res.violation("%s: linearizable: %s", lab, f)
		}
		if len(lr.Unknown) > 0 {
			res.fail("%s: linearizability undecided within %v: %s", lab, timeout, strings.Join(lr.Unknown, ", "))
		}
		res.Linearizable = res.Linearizable && lr.Linearizable()
	}
}
