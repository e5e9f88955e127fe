package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"pollux/actors/server/api"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/check"
	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/linear"
	"pollux/testbed/chaos/record"
	"pollux/testbed/chaos/schedule"
	"pollux/testbed/launch"
)

// ErrConfig is returned for unusable options.
var ErrConfig = errors.New("driver: bad options")

// Options configure a run.
type Options struct {
	// Exec is the program (and leading arguments) that runs `pollux`;
	// Env is added to every process's environment.
	Exec []string
	Env  []string
	// Dir keeps one directory per run (data, logs, history, worker
	// records); "" uses a temporary directory, removed after a run that
	// passes and kept after one that fails.
	Dir string
	// Servers (default 3), Agents (default 2) and GPUsPerAgent (default 4).
	Servers, Agents, GPUsPerAgent int
	// Interval is the scheduling interval (default 500 ms); TimeScale the
	// emulated seconds per real second (default 400); RestartCost the
	// emulated start-up of a worker (default 30 s); Grace the SIGTERM to
	// SIGKILL delay for workers (default 2 s).
	Interval    time.Duration
	TimeScale   float64
	RestartCost time.Duration
	Grace       time.Duration
	// Network is launch.Loopback (default) or launch.Namespaces, which
	// network faults need.
	Network launch.Network
	// Jobs is how many jobs a scenario submits (default: its number of
	// faults + 2, at least 4), spread over its fault phase; Apps are the
	// applications they cycle through (default cifar10, ncf).
	Jobs int
	Apps []string
	// Cancels is how many jobs of the workload are cancelled, each at a
	// seeded time within CancelWithin after its acknowledgement
	// (default: a quarter of them; -1: none). Every scenario also
	// cancels a job that was never submitted.
	Cancels      int
	CancelWithin time.Duration
	// Converge bounds the wait, after the last fault, until every
	// acknowledged job has finished (default 120 s).
	Converge time.Duration
	// Schedule times the faults (default schedule.DefaultOptions).
	Schedule schedule.Options
	// LinearTimeout bounds the linearizability search of one partition
	// (default 2 minutes).
	LinearTimeout time.Duration
	// LogLevel of the processes (default "warn").
	LogLevel string
	// Logger receives the driver's progress (default: discarded).
	Logger *slog.Logger
}

func (o *Options) defaults() error {
	if len(o.Exec) == 0 {
		return fmt.Errorf("%w: Exec is required", ErrConfig)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Servers, 3)
	def(&o.Agents, 2)
	def(&o.GPUsPerAgent, 4)
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	dur(&o.Interval, 500*time.Millisecond)
	dur(&o.RestartCost, 30*time.Second)
	dur(&o.Grace, 2*time.Second)
	dur(&o.Converge, 120*time.Second)
	dur(&o.LinearTimeout, 2*time.Minute)
	dur(&o.CancelWithin, 3*time.Second)
	if o.TimeScale == 0 {
		o.TimeScale = 400
	}
	if len(o.Apps) == 0 {
		o.Apps = []string{"cifar10", "ncf"}
	}
	if o.Schedule == (schedule.Options{}) {
		o.Schedule = schedule.DefaultOptions
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	if o.Network == "" {
		o.Network = launch.Loopback
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Servers < 3 || o.Agents < 2 || o.GPUsPerAgent < 1 || !(o.TimeScale > 0) || o.Jobs < 0 || o.Interval < 0 || o.Converge < 0 ||
		o.Cancels < -1 || o.CancelWithin < 0 {
		return fmt.Errorf("%w: %d servers (at least 3), %d agents (at least 2) of %d GPUs, time scale %v, %d jobs, %d cancels within %v",
			ErrConfig, o.Servers, o.Agents, o.GPUsPerAgent, o.TimeScale, o.Jobs, o.Cancels, o.CancelWithin)
	}
	return nil
}

// Result is one scenario's run.
type Result struct {
	Scenario string
	Seed     uint64
	// Faults is the schedule.
	Faults []schedule.Fault
	// Check is the judgement of the observers' records.
	Check *check.Result
	// Harness lists what went wrong in the harness's own hands (a worker
	// that outlived its agent); it fails the run. Notes lists what is
	// worth knowing but breaks no promise (a server that needed SIGKILL
	// at the end of the run).
	Harness []string
	Notes   []string
	// Dir is the run's directory if it was kept.
	Dir string
	// Elapsed is the wall time of the run.
	Elapsed time.Duration
}

// Failures lists every reason the run fails (none: it passes).
func (r *Result) Failures() []string {
	out := slices.Clone(r.Harness)
	if r.Check != nil {
		out = append(out, r.Check.Failures()...)
	}
	return out
}

// Run runs one scenario under seed: start the cluster, submit the
// workload, inject the schedule, wait for every job, stop everything,
// judge the observers' records. Every process it started is gone when it
// returns, whatever happened (also when ctx is cancelled). An error means
// the run could not be judged at all.
func Run(ctx context.Context, sc schedule.Scenario, seed uint64, o Options) (res *Result, err error) {
	begin := time.Now()
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if sc.Network() && o.Network != launch.Namespaces {
		return nil, fmt.Errorf("%w: scenario %s has network faults: it needs network namespaces", ErrConfig, sc.Name)
	}
	faults, err := schedule.Generate(seed, sc, o.Schedule)
	if err != nil {
		return nil, err
	}
	cat, err := builtin.Catalog()
	if err != nil {
		return nil, err
	}
	dir, temp := filepath.Join(o.Dir, fmt.Sprintf("%s-seed%d", sc.Name, seed)), o.Dir == ""
	if temp {
		if dir, err = os.MkdirTemp("", "pollux-chaos-*"); err != nil {
			return nil, fmt.Errorf("driver: %w", err)
		}
	} else if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	res = &Result{Scenario: sc.Name, Seed: seed, Faults: faults, Dir: dir}
	defer func() {
		if temp && err == nil && len(res.Failures()) == 0 {
			os.RemoveAll(dir)
			res.Dir = ""
		}
		res.Elapsed = time.Since(begin)
	}()
	log := o.Logger.With("scenario", sc.Name, "seed", seed)
	var planned []history.Planned
	for _, f := range faults {
		planned = append(planned, history.Planned{Seq: f.Seq, Fault: string(f.Kind)})
	}
	lo := launch.Options{Exec: o.Exec, Env: o.Env, Dir: dir, Servers: o.Servers, Agents: o.Agents,
		GPUsPerAgent: o.GPUsPerAgent, Interval: o.Interval, TimeScale: o.TimeScale, RestartCost: o.RestartCost, Grace: o.Grace,
		LogLevel: o.LogLevel, Network: o.Network, Observe: true, Scenario: sc.Name, Seed: seed, Planned: planned, Logger: log}
	if sc.Racks > 0 {
		// A server and two agents in every rack, at least.
		lo.Racks, lo.ServerRacks = sc.Racks, true
		lo.Servers, lo.Agents = max(o.Servers, sc.Racks), max(o.Agents, 2*sc.Racks)
		o.Servers, o.Agents = lo.Servers, lo.Agents
	}
	c, err := launch.Start(ctx, lo)
	if err != nil {
		return res, err
	}
	log.Info("driver: cluster up", "dir", dir, "faults", len(faults), "network", o.Network)
	r := &run{c: c, o: o, log: log, faults: faults, cat: cat, rng: rand.New(rand.NewPCG(seed, 0x706f6c6c7578)),
		cancelRng: rand.New(rand.NewPCG(seed, 0x63616e63656c)), scenario: sc.Name, acked: map[string]bool{}}
	r.plan()
	runErr := r.drive(ctx)
	if err := c.Stop(); err != nil {
		if errors.Is(err, launch.ErrSlowStop) && !errors.Is(err, launch.ErrCluster) {
			res.Notes = append(res.Notes, "stopping the cluster: "+err.Error())
		} else {
			res.Harness = append(res.Harness, "stopping the cluster: "+err.Error())
		}
	}
	if runErr != nil {
		return res, runErr
	}
	res.Check, err = judge(dir, o.LinearTimeout)
	return res, err
}

// judge checks a stopped run's directory: its history and worker records.
func judge(dir string, linearTimeout time.Duration) (*check.Result, error) {
	lines, err := history.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	workers, err := record.ReadRoot(filepath.Join(dir, "records"))
	if err != nil {
		return nil, err
	}
	return check.Check(check.Input{History: lines, Workers: workers},
		check.Options{Linear: linear.Options{Timeout: linearTimeout, VisualizeDir: dir}})
}

// Judge checks again a run directory kept with Options.Dir (the files
// alone: the processes are long gone). The result's Elapsed is the
// history's span.
func Judge(dir string) (*Result, error) {
	c, err := judge(dir, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	return &Result{Scenario: c.Scenario, Seed: c.Seed, Check: c, Dir: dir, Elapsed: c.Duration}, nil
}

// submission is one job of the workload; cancel, if positive, is when
// after its acknowledgement it is cancelled.
type submission struct {
	at     time.Duration
	name   string
	spec   []byte
	cancel time.Duration
}

// run is the state of one scenario's run.
type run struct {
	c      *launch.Cluster
	o      Options
	log    *slog.Logger
	faults []schedule.Fault
	cat    testbed.Catalog
	rng    *rand.Rand
	// cancelRng draws the cancels (its own stream: the workload's times
	// stay those of the seed without cancels).
	cancelRng *rand.Rand
	scenario  string
	subs      []submission
	start     time.Time

	// bg is every background goroutine (submitter, reader, probes);
	// bgCtx stops them.
	bg     sync.WaitGroup
	bgCtx  context.Context
	stopBg context.CancelFunc

	mu sync.Mutex
	// acked are the jobs acknowledged; submitted says the workload is
	// all submitted (or given up on); last is the newest linearizable
	// jobs list.
	acked     map[string]bool
	submitted bool
	last      []api.Job
	lastAt    time.Time
}

// plan spreads the workload over the fault phase: two jobs at once, the
// rest at seeded random times before the last fault begins.
func (r *run) plan() {
	n := r.o.Jobs
	if n == 0 {
		n = max(4, len(r.faults)+2)
	}
	var end time.Duration
	if len(r.faults) > 0 {
		end = r.faults[len(r.faults)-1].At
	}
	for i := range n {
		var at time.Duration
		if i >= 2 && end > 0 {
			at = time.Duration(r.rng.Int64N(int64(end)))
		}
		app := r.o.Apps[i%len(r.o.Apps)]
		name := fmt.Sprintf("%s-%02d-%s", abbrev(r.scenario), i, app)
		spec, err := launch.Job{Name: name, App: app}.Spec(r.cat, r.o.GPUsPerAgent*r.o.Agents)
		if err != nil {
			r.log.Error("driver: job spec", "err", err)
			continue
		}
		r.subs = append(r.subs, submission{at: at, name: name, spec: spec})
	}
	// The cancels: jobs after the first two (which start the run), at
	// seeded times after their acknowledgement, some while the job runs,
	// some after it finished (answered 409).
	cancels := r.o.Cancels
	switch {
	case cancels == 0:
		cancels = len(r.subs) / 4
	case cancels < 0:
		cancels = 0
	}
	if len(r.subs) > 2 {
		for _, i := range r.cancelRng.Perm(len(r.subs) - 2)[:min(cancels, len(r.subs)-2)] {
			r.subs[i+2].cancel = 1 + time.Duration(r.cancelRng.Int64N(int64(r.o.CancelWithin)+1))
		}
	}
	slices.SortStableFunc(r.subs, func(a, b submission) int { return cmp.Compare(a.at, b.at) })
}

// abbrev shortens a scenario name for job names.
func abbrev(s string) string {
	out := []byte{}
	for i := 0; i < len(s); i++ {
		if i == 0 || s[i-1] == '-' {
			out = append(out, s[i])
		}
	}
	return string(out)
}

// since is the time since the fault phase began.
func (r *run) since() time.Duration { return time.Since(r.start) }

// drive runs the fault phase and the convergence; the background
// goroutines are stopped when it returns.
func (r *run) drive(ctx context.Context) error {
	r.bgCtx, r.stopBg = context.WithCancel(ctx)
	defer func() {
		r.stopBg()
		r.bg.Wait()
	}()
	r.start = time.Now()
	r.background(r.submitter)
	r.background(r.reader)
	// A job nobody submitted: its cancel must be refused as unknown.
	r.background(func(ctx context.Context) { r.cancel(ctx, abbrev(r.scenario)+"-never-submitted", 0) })
	if err := r.inject(ctx); err != nil {
		return err
	}
	if err := r.converge(ctx); err != nil {
		r.log.Warn("driver: not converged", "err", err)
	}
	// A last linearizable read, once everything has settled.
	r.stopBg()
	r.bg.Wait()
	return r.finalRead(ctx)
}

func (r *run) background(f func(ctx context.Context)) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		f(r.bgCtx)
	}()
}

// submit submits one job until it is acknowledged or definitely refused,
// or ctx ends; it returns whether it was acknowledged.
func (r *run) submit(ctx context.Context, cl *launch.Client, name string, spec []byte, retry time.Duration) bool {
	key := cl.NewKey() // one submission, however many attempts
	for {
		a := cl.SubmitAnyKeyed(ctx, name, spec, key, retry, 0)
		switch {
		case a.OK():
			r.mu.Lock()
			r.acked[name] = true
			r.mu.Unlock()
			return true
		case a.Type == history.Fail:
			r.log.Error("driver: job refused", "job", name, "answer", a.Error())
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(retry):
		}
	}
}

// submitter submits the workload at its times; a submission no server
// can take now is retried (in its own goroutine, so that a slow one never
// delays a fault).
func (r *run) submitter(ctx context.Context) {
	defer func() {
		r.mu.Lock()
		r.submitted = true
		r.mu.Unlock()
	}()
	cl := r.c.Client()
	for _, s := range r.subs {
		if d := s.at - r.since(); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		acked := r.submit(ctx, cl, s.name, s.spec, 250*time.Millisecond)
		if !acked && ctx.Err() != nil {
			return
		}
		if acked && s.cancel > 0 {
			r.background(func(ctx context.Context) { r.cancel(ctx, s.name, s.cancel) })
		}
	}
}

// cancel cancels job after delay, through the serving servers until one
// answers definitely, then reads it back from the leader: both
// operations go into the history, where the checker holds them to the
// model (a cancel is 200 only for a job that exists, 404 only for one
// that does not, 409 only for one that finished; a cancelled job never
// shows completed) and no worker of the job may start after a 200.
func (r *run) cancel(ctx context.Context, job string, delay time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	cl := r.c.Client()
	a := cl.CancelAny(ctx, job, 250*time.Millisecond, r.o.Converge)
	r.log.Info("driver: cancel", "job", job, "answer", a.Type, "code", a.Code)
	if j, found, err := cl.JobAny(ctx, job); err == nil {
		r.log.Info("driver: job read after its cancel", "job", job, "found", found, "state", j.State)
	}
}

// reader reads the jobs and the status every 250 ms: the linearizable
// reads the checker and the convergence use.
func (r *run) reader(ctx context.Context) {
	cl := r.c.Client()
	for {
		if js, stale, err := cl.JobsAny(ctx); err == nil && !stale {
			r.mu.Lock()
			r.last, r.lastAt = js, time.Now()
			r.mu.Unlock()
		}
		_, _ = cl.StatusAny(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// probe submits one more job right after a fault that takes the leader
// away, to every serving server every 100 ms until one acknowledges it:
// the first write acknowledged after the fault ends the failover.
func (r *run) probe(seq int) {
	app := r.o.Apps[seq%len(r.o.Apps)]
	name := fmt.Sprintf("%s-p%02d-%s", abbrev(r.scenario), seq, app)
	spec, err := launch.Job{Name: name, App: app}.Spec(r.cat, r.o.GPUsPerAgent*r.o.Agents)
	if err != nil {
		r.log.Error("driver: probe spec", "err", err)
		return
	}
	r.background(func(ctx context.Context) {
		ctx, done := context.WithCancel(ctx)
		defer done()
		var wg sync.WaitGroup
		key := r.c.Client().NewKey() // one submission, sent to every server
		for _, m := range r.c.Servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := r.c.Client()
				for ctx.Err() == nil {
					if m.Serving() {
						a := cl.SubmitKeyed(ctx, m, name, spec, key, time.Second)
						if a.OK() {
							r.mu.Lock()
							r.acked[name] = true
							r.mu.Unlock()
							done()
							return
						}
						if a.Type == history.Fail {
							r.log.Error("driver: probe refused", "job", name, "answer", a.Error())
							done()
							return
						}
					}
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}()
		}
		wg.Wait()
	})
}

// extraJob submits one more job now, for a worker-kill that finds no
// worker once the workload has finished.
func (r *run) extraJob(seq int) {
	app := r.o.Apps[0]
	name := fmt.Sprintf("%s-x%02d-%s", abbrev(r.scenario), seq, app)
	spec, err := launch.Job{Name: name, App: app}.Spec(r.cat, r.o.GPUsPerAgent*r.o.Agents)
	if err != nil {
		r.log.Error("driver: job spec", "err", err)
		return
	}
	r.background(func(ctx context.Context) { r.submit(ctx, r.c.Client(), name, spec, 250*time.Millisecond) })
}

// pending lists the acknowledged jobs the last linearizable read does not
// show finished.
func (r *run) pending() (done bool, left []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	state := map[string]string{}
	for _, j := range r.last {
		state[j.ID] = j.State
	}
	for job := range r.acked {
		switch state[job] {
		case "completed", "failed", "cancelled":
		default:
			left = append(left, job)
		}
	}
	slices.Sort(left)
	return r.submitted, left
}

// converge waits until the workload is submitted and every acknowledged
// job is seen finished, or the bound has passed.
func (r *run) converge(ctx context.Context) error {
	deadline := time.Now().Add(r.o.Converge)
	for {
		submitted, left := r.pending()
		if submitted && len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("driver: %v not finished %s after the last fault (workload submitted: %v)", left, r.o.Converge, submitted)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// finalRead makes one more linearizable read of the jobs (for up to
// 30 s): the checker takes the outcomes from the last one.
func (r *run) finalRead(ctx context.Context) error {
	cl := r.c.Client()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, stale, err := cl.JobsAny(ctx); err == nil && !stale {
			return nil
		}
		if time.Now().After(deadline) {
			r.log.Warn("driver: no linearizable read at the end of the run")
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
