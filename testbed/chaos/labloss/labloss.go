package labloss

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pollux/actors/fedlink"
	"pollux/cluster/federation"
	"pollux/internal/usage"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/driver"
	"pollux/testbed/fedlab"
	"pollux/testbed/launch"
)

// Options are the settings of a lab-loss run.
type Options struct {
	Exec      []string
	Env       []string
	Dir       string // "" : a temporary directory, removed after a run that passes
	Seed      uint64 // picks the lab lost: lab-a, lab-b, lab-c by seed mod 3
	TimeScale float64
	TTL       time.Duration // the leases' time to live
	Converge  time.Duration // bound on the wait for every job after the restart
	// LinearTimeout bounds the linearizability search of one partition
	// of a lab's API history (default 2 minutes).
	LinearTimeout time.Duration
	LogLevel      string       // of the processes
	Logger        *slog.Logger // the run's progress (nil: discarded)
}

// Check refuses options a run cannot honour.
func (o Options) Check() error {
	if !(o.TimeScale > 0) || o.TTL <= 0 || o.TTL > time.Duration(federation.MaxTTL)*time.Second || o.Converge <= 0 {
		return usage.Errorf("chaos: lab-loss needs --time-scale > 0, --lease-ttl in (0, %ds] and --converge > 0", federation.MaxTTL)
	}
	return nil
}

// Result is the judgement of a lab-loss run, from outside the
// labs: their APIs, their agents' worker records and the process table.
type Result struct {
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
	// ProcessesKilled are the lab's servers, agents and workers killed
	// (those alive when signalled).
	ProcessesKilled int `json:"processes_killed"`
	// Linearizable says every lab's client-side API history (each lab
	// is its own Raft cluster, the lost one across its loss and
	// restart) was shown linearizable (package linear); LinearOps counts
	// the operations checked.
	Linearizable bool `json:"linearizable"`
	LinearOps    int  `json:"linear_ops"`
	// Violations: a worker on a GPU its job's lab did not lease then, or
	// a restore that went back before a checkpoint already written.
	Violations int      `json:"violations"`
	Failures   []string `json:"failures"`
	ElapsedS   float64  `json:"elapsed_s"`
	Dir        string   `json:"dir,omitempty"`
}

func (r *Result) fail(format string, a ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, a...))
}

func (r *Result) violation(format string, a ...any) {
	r.Violations++
	r.fail("violation: "+format, a...)
}

// Summary is the run's line in the figures of `pollux chaos --scenario
// all`: its jobs are those of every lab, the lost lab's that did not
// complete counted lost too.
func (r *Result) Summary() driver.ScenarioSummary {
	sc := driver.ScenarioSummary{Name: r.Scenario, FaultsByKind: map[string]int{}, JobsSubmitted: r.JobsSubmitted + r.LostLabJobs,
		JobsCompleted: r.JobsCompleted + r.LostLabCompleted, JobsFailed: r.JobsFailed, LostJobs: r.LostJobs + r.LostLabJobs - r.LostLabCompleted,
		Violations: r.Violations, Failures: r.Failures, ElapsedS: r.ElapsedS, Dir: r.Dir, LostLab: r.LostLab, LeaseExpiryMaxS: r.LeaseExpiryMaxS,
		FaultsPlanned: 1, Linearizable: r.Linearizable}
	if r.ProcessesKilled > 0 {
		sc.Faults, sc.FaultsByKind["lab-kill"] = 1, 1
	}
	return sc
}

// Pass says the run lost nothing and broke nothing.
func (r *Result) Pass() bool {
	return len(r.Failures) == 0 && r.LostJobs == 0 && r.Violations == 0
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

// The labs' shape: one server and two agents of 2 emulated GPUs each,
// federation rounds every interval.
const (
	gpusPerAgent, agents = 2, 2
	gpus                 = gpusPerAgent * agents
	interval             = 500 * time.Millisecond
)

// errJudged ends a run early whose failure its result already records.
var errJudged = errors.New("labloss: judged failed")

// run is one lab-loss run in progress.
type run struct {
	o                      Options
	res                    *Result
	log                    *slog.Logger
	names                  []string
	lost, borrower, lender string
	temp                   bool
	begin                  time.Time
	cat                    testbed.Catalog
	ls                     *fedlab.Set
	watch                  *watcher
	stopped                bool
	accepted               map[string][]string // the jobs each lab accepted
	states                 map[string]string   // the lost lab's jobs' states at the loss
	roots                  map[string]string   // every lab's worker records, by lab
	killAt, restartAt      int64               // mono ns
}

// Run runs the lab-loss scenario: three labs of one server and two
// agents of 2 emulated GPUs each (TLS on), the lost lab's jobs first so
// that it borrows, then the other labs' jobs; SIGKILL of every process of
// the lost lab (servers, agents, the workers on its agents) while its
// peers hold leases with it; the peers' ledgers watched until those
// leases are gone; the lab restarted on its data directories; every job
// waited for; then the worker records judged. A run that could not be
// judged returns an error; a judged one its Result, failed or not.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	r, err := newRun(o)
	if err != nil {
		return nil, err
	}
	defer r.finish(&err)
	if err = r.drive(ctx); errors.Is(err, errJudged) {
		err = nil
	}
	return r.res, err
}

// newRun picks the lost lab (lab-a, lab-b, lab-c by seed mod 3: it lends
// to one peer, the borrower, and borrows from the other, the lender) and
// makes the run's directory.
func newRun(o Options) (*run, error) {
	names := []string{"lab-a", "lab-b", "lab-c"}
	n := uint64(len(names))
	r := &run{o: o, log: o.Logger, names: names, lost: names[o.Seed%n], borrower: names[(o.Seed+1)%n], lender: names[(o.Seed+2)%n],
		temp: o.Dir == "", begin: time.Now(), accepted: map[string][]string{}, states: map[string]string{}, roots: map[string]string{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.res = &Result{Scenario: "lab-loss", Seed: o.Seed, LostLab: r.lost, LenderLab: r.lender, BorrowerLab: r.borrower,
		LeaseTTLS: o.TTL.Seconds(), Failures: []string{}}
	dir, err := o.Dir, error(nil)
	if r.temp {
		if dir, err = os.MkdirTemp("", "pollux-lab-loss-"); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	} else if err = os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	r.res.Dir = dir
	if r.cat, err = builtin.Catalog(); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return r, nil
}

// finish stops the labs and, after a temporary run that passed, removes
// its directory.
func (r *run) finish(err *error) {
	r.stopLabs()
	r.res.ElapsedS = time.Since(r.begin).Seconds()
	if *err == nil && r.res.Pass() && r.temp {
		_ = os.RemoveAll(r.res.Dir)
		r.res.Dir = ""
	}
}

// stopLabs stops every process of every lab, once.
func (r *run) stopLabs() {
	if r.stopped || r.ls == nil {
		return
	}
	r.stopped = true
	if err := r.ls.Stop(); err != nil {
		r.res.fail("stopping the labs: %v", err)
	}
}

// drive runs the scenario's steps, one after another.
func (r *run) drive(ctx context.Context) error {
	if err := r.start(ctx); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	r.watch = startWatch(ctx, r.ls)
	defer r.watch.close()
	if err := r.lendAndBorrow(ctx); err != nil {
		return err
	}
	r.lose(ctx)
	if err := awaitPeersResumed(ctx, r.res, r.roots, r.names, r.lost, r.killAt, r.o.Converge); err != nil {
		return err
	}
	r.log.Info("chaos: lab-loss: the peers' jobs that ran on the lost lab run again", "lab", r.lost)
	if err := r.restart(ctx); err != nil {
		return err
	}
	if err := r.awaitJobs(ctx); err != nil {
		return err
	}
	r.watch.close()
	r.stopLabs()
	r.judge()
	return nil
}

// start starts the three labs in a star around the lost lab: each peer
// trusts only it; the lender lends one node and borrows nothing, the
// borrower borrows one node and lends nothing, the lost lab lends and
// borrows one node each.
func (r *run) start(ctx context.Context) error {
	o := r.o
	terms := federation.DefaultSettings()
	terms.TTL = o.TTL.Seconds()
	tmpl := launch.Options{Exec: o.Exec, Env: o.Env, Dir: r.res.Dir, Servers: 1, Agents: agents, GPUsPerAgent: gpusPerAgent,
		Interval: time.Second, TimeScale: o.TimeScale, LogLevel: o.LogLevel, Observe: true, Scenario: "lab-loss", Seed: o.Seed}
	r.log.Info("chaos: lab-loss: starting three labs", "lost", r.lost, "dir", r.res.Dir)
	shape := func(lab string, f *fedlink.File) {
		node := gpusPerAgent
		switch lab {
		case r.lost:
			f.Quota = federation.Quota{Nominal: gpus, LendingLimit: node, BorrowingLimit: node}
			return
		case r.lender:
			f.Quota = federation.Quota{Nominal: gpus, LendingLimit: node}
		case r.borrower:
			f.Quota = federation.Quota{Nominal: gpus, BorrowingLimit: node}
		}
		f.Peers = slices.DeleteFunc(f.Peers, func(p fedlink.PeerFile) bool { return p.Name != r.lost })
	}
	var err error
	r.ls, err = fedlab.StartWith(ctx, tmpl, r.names, federation.Quota{Nominal: gpus, LendingLimit: gpus, BorrowingLimit: 2 * gpus},
		interval, terms, shape)
	if err != nil {
		return err
	}
	for _, n := range r.names {
		r.roots[n] = filepath.Join(r.ls.Labs[n].Options().Dir, "records")
	}
	return nil
}
