package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"pollux/actors/launch"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/check"
	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/proc"
	"pollux/testbed/chaos/schedule"
)

// Sentinel errors.
var (
	// ErrConfig is returned for unusable options.
	ErrConfig = errors.New("driver: bad options")
	// ErrCluster is returned when the cluster cannot be started, driven
	// or stopped as the run needs (a process that is not ready, no
	// leader, a refused job).
	ErrCluster = errors.New("driver: cluster")
)

// Options configure a run.
type Options struct {
	// Exec is the program (and leading arguments) that runs `pollux`.
	Exec []string
	// Env is added to every process's environment.
	Env []string
	// Dir holds one directory per scenario run (data directories, logs,
	// the history); "" uses a temporary directory removed afterwards.
	Dir string
	// Servers (default 3), Agents (default 2) and GPUsPerAgent (default 4).
	Servers, Agents, GPUsPerAgent int
	// Interval is the scheduling interval (default 500 ms); TimeScale
	// the emulated seconds per real second (default 400); RestartCost the
	// emulated start-up of a worker (default 30 s); Grace the SIGTERM to
	// SIGKILL delay for workers (default 2 s).
	Interval    time.Duration
	TimeScale   float64
	RestartCost time.Duration
	Grace       time.Duration
	// Jobs is how many jobs a scenario submits (default: its number of
	// faults + 2, at least 4), spread over its fault phase; Apps are the
	// applications they cycle through (default cifar10, ncf).
	Jobs int
	Apps []string
	// Converge bounds the time from the last fault until every job has
	// completed (default 120 s): the run waits that long at most, and the
	// checker reports jobs later than that.
	Converge time.Duration
	// Schedule times the faults (default schedule.DefaultOptions).
	Schedule schedule.Options
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
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Servers < 3 || o.Agents < 2 || o.GPUsPerAgent < 1 || !(o.TimeScale > 0) || o.Jobs < 0 || o.Interval < 0 || o.Converge < 0 {
		return fmt.Errorf("%w: %d servers (at least 3), %d agents (at least 2) of %d GPUs, time scale %v, %d jobs",
			ErrConfig, o.Servers, o.Agents, o.GPUsPerAgent, o.TimeScale, o.Jobs)
	}
	return nil
}

// Result is one scenario's run.
type Result struct {
	Scenario string
	Seed     uint64
	// Faults is the schedule injected; Skipped counts faults that found
	// no victim (a worker-kill while no worker ran).
	Faults  []schedule.Fault
	Skipped int
	// Metrics and Violations come from the history.
	Metrics    check.Metrics
	Violations []check.Violation
	// History is the path of the history file ("" once a temporary
	// directory is removed); Events its events.
	History string
	Events  []history.Event
	// Elapsed is the wall time of the run.
	Elapsed time.Duration
}

// Run runs one scenario under seed: start the cluster, submit the
// workload, inject the schedule, wait for convergence, stop everything,
// check the history. Every process it started is gone when it returns,
// whatever happened (also when ctx is cancelled).
func Run(ctx context.Context, sc schedule.Scenario, seed uint64, o Options) (res *Result, err error) {
	begin := time.Now()
	if err := o.defaults(); err != nil {
		return nil, err
	}
	faults, err := schedule.Generate(seed, sc, o.Schedule)
	if err != nil {
		return nil, err
	}
	cat, err := builtin.Catalog()
	if err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pollux-chaos-*"); err != nil {
			return nil, fmt.Errorf("driver: %w", err)
		}
		defer os.RemoveAll(dir)
	} else {
		dir = fmt.Sprintf("%s/%s-seed%d", o.Dir, sc.Name, seed)
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("driver: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("driver: %w", err)
		}
	}
	log := o.Logger.With("scenario", sc.Name, "seed", seed)
	o.Logger = log
	c, err := up(ctx, o, dir)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			err = errors.Join(err, c.stop())
		}
		err = errors.Join(err, c.close())
	}()
	log.Info("driver: cluster up", "dir", dir, "faults", len(faults))

	r := &run{c: c, o: o, log: log, faults: faults, cat: cat, rng: rand.New(rand.NewPCG(seed, 0x706f6c6c7578))}
	r.plan(sc)
	res = &Result{Scenario: sc.Name, Seed: seed, Faults: faults}
	r.start = time.Now()
	submitted := make(chan struct{})
	subCtx, stopSubmitting := context.WithCancel(ctx)
	r.subCtx = subCtx
	go r.submitter(subCtx, submitted)
	defer func() {
		stopSubmitting()
		<-submitted
		r.probes.Wait()
	}()
	if res.Skipped, err = r.inject(ctx); err != nil {
		return nil, err
	}
	if err := r.converge(ctx, submitted); err != nil {
		log.Warn("driver: not converged", "err", err)
	}
	stopSubmitting()
	<-submitted
	r.probes.Wait()
	stopped = true
	if err := c.stop(); err != nil {
		log.Warn("driver: stopping", "err", err)
	}
	ev, err := c.events()
	if err != nil {
		return nil, err
	}
	res.Events = ev
	res.Metrics = check.Measure(ev)
	res.Violations = check.Check(ev, check.Config{Converge: o.Converge})
	if o.Dir != "" {
		res.History = c.path
	}
	res.Elapsed = time.Since(begin)
	return res, nil
}

// submission is one job of the workload.
type submission struct {
	at   time.Duration
	name string
	spec []byte
}

// run is the state of one scenario's fault phase.
type run struct {
	c      *cluster
	o      Options
	log    *slog.Logger
	faults []schedule.Fault
	cat    testbed.Catalog
	rng    *rand.Rand
	subs   []submission
	// submitErr is the submitter's error, read once it is done.
	submitErr error
	// probes are the probe submissions in flight (see probe); probeErr
	// their first error.
	probes   sync.WaitGroup
	probeMu  sync.Mutex
	probeErr error
	subCtx   context.Context
	start    time.Time
	// scenario names the run's jobs.
	scenario string
}

// plan spreads the workload over the fault phase: two jobs at once, the
// rest at random times before the last fault begins.
func (r *run) plan(sc schedule.Scenario) {
	r.scenario = sc.Name
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
		name := fmt.Sprintf("%s-%02d-%s", abbrev(sc.Name), i, app)
		spec, err := launch.Job{Name: name, App: app}.Spec(r.cat, r.o.GPUsPerAgent*r.o.Agents)
		if err != nil {
			r.log.Error("driver: job spec", "err", err)
			continue
		}
		r.subs = append(r.subs, submission{at: at, name: name, spec: spec})
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

// submitter submits the workload at its times, in its own goroutine so
// that a slow submission (forwarded to a paused leader) never delays a
// fault; a submission no server can take now is retried. It closes done
// when every job is submitted or ctx ends, having stored its error.
func (r *run) submitter(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for _, s := range r.subs {
		for {
			if d := s.at - r.since(); d > 0 {
				select {
				case <-ctx.Done():
					r.submitErr = ctx.Err()
					return
				case <-time.After(d):
				}
			}
			err := r.c.submit(ctx, s.name, s.spec)
			if err == nil {
				break
			}
			if !errors.Is(err, errUnavailable) {
				r.submitErr = err
				return
			}
			r.log.Debug("driver: submission deferred", "err", err)
			s.at = r.since() + 250*time.Millisecond
		}
	}
}

// sleepUntil waits until the fault phase reaches t, tracking workers on
// the way.
func (r *run) sleepUntil(ctx context.Context, t time.Duration) error {
	for {
		if _, err := r.c.running(); err != nil {
			return err
		}
		d := t - r.since()
		if d <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(d, 100*time.Millisecond)):
		}
	}
}

// inject runs the schedule from r.start. A fault's times are relative: it begins at
// its scheduled offset from the end of the previous fault's injection,
// so that a slow step (waiting for a leader) never makes faults overlap.
func (r *run) inject(ctx context.Context) (skipped int, err error) {
	shift := time.Duration(0)
	prevEnd := time.Duration(0)
	for _, f := range r.faults {
		at := f.At + shift
		if err := r.sleepUntil(ctx, at); err != nil {
			return skipped, err
		}
		r.log.Info("driver: fault", "fault", f.String())
		began := r.since()
		ok, err := r.one(ctx, f)
		if err != nil {
			return skipped, fmt.Errorf("driver: fault %s: %w", f, err)
		}
		if !ok {
			skipped++
		}
		// Keep the scheduled gap after the fault's actual end.
		shift += max(0, r.since()-began-(f.End()-f.At))
		prevEnd = f.End() + shift
	}
	return skipped, r.sleepUntil(ctx, prevEnd)
}

// pick returns candidate pick % n of members sorted by id.
func pick[T any](cands []T, p uint32) T { return cands[int(p%uint32(len(cands)))] }

// one injects fault f; false if it found no victim.
func (r *run) one(ctx context.Context, f schedule.Fault) (bool, error) {
	kind := string(f.Kind)
	seq := f.Seq
	c := r.c
	switch f.Kind {
	case schedule.LeaderKill, schedule.FollowerKill, schedule.LeaderPause:
		leader, err := c.leader(ctx, 15*time.Second)
		if err != nil {
			return false, err
		}
		victim := leader
		if f.Kind == schedule.FollowerKill {
			var fs []*member
			for _, m := range c.servers {
				if p, _ := m.current(); p != nil && m != leader {
					fs = append(fs, m)
				}
			}
			if len(fs) == 0 {
				return false, nil
			}
			victim = pick(fs, f.Pick)
		}
		if f.Kind == schedule.LeaderPause {
			if err := c.signal(victim, syscall.SIGSTOP, kind, seq); err != nil {
				return false, err
			}
			r.probe(seq)
			if err := r.sleepUntil(ctx, r.since()+f.Down); err != nil {
				_ = c.signal(victim, syscall.SIGCONT, kind, seq)
				return false, err
			}
			return true, c.signal(victim, syscall.SIGCONT, kind, seq)
		}
		if err := c.kill(victim, kind, seq); err != nil {
			return false, err
		}
		if f.Kind == schedule.LeaderKill {
			r.probe(seq)
		}
		if err := r.sleepUntil(ctx, r.since()+f.Down); err != nil {
			return false, err
		}
		return true, c.start(ctx, victim, kind, seq)
	case schedule.ColdRestart:
		for _, m := range c.servers {
			if err := c.kill(m, kind, seq); err != nil {
				return false, err
			}
		}
		if err := r.sleepUntil(ctx, r.since()+f.Down); err != nil {
			return false, err
		}
		for _, m := range c.servers {
			if err := c.start(ctx, m, kind, seq); err != nil {
				return false, err
			}
		}
		_, err := c.leader(ctx, 30*time.Second)
		return true, err
	case schedule.AgentKill, schedule.AgentRestart:
		victim := pick(c.agents, f.Pick)
		if err := c.kill(victim, kind, seq); err != nil {
			return false, err
		}
		if err := c.reapOrphans(victim.id); err != nil {
			r.log.Warn("driver: orphans", "err", err)
		}
		if err := r.sleepUntil(ctx, r.since()+f.Down); err != nil {
			return false, err
		}
		return true, c.start(ctx, victim, kind, seq)
	case schedule.WorkerKill:
		deadline := r.since() + 20*time.Second
		extra := r.since() + 3*time.Second
		for {
			ws, err := c.running()
			if err != nil {
				return false, err
			}
			ws = slices.DeleteFunc(ws, func(w history.Event) bool { return !proc.Alive(w.PID) })
			if len(ws) > 0 {
				slices.SortFunc(ws, func(a, b history.Event) int {
					return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.Inc, b.Inc), cmp.Compare(a.Rank, b.Rank))
				})
				w := pick(ws, f.Pick)
				c.record(c.rec.Now(), history.Event{Kind: history.Signal, Role: history.Worker, ID: w.Job, PID: w.PID, Inc: w.Inc,
					Sig: "KILL", Fault: kind, FSeq: seq})
				_ = syscall.Kill(w.PID, syscall.SIGKILL)
				return true, nil
			}
			if r.since() > deadline {
				r.log.Warn("driver: no worker to kill", "fault", f.String())
				return false, nil
			}
			if extra > 0 && r.since() > extra {
				// Every job has finished: give the fault a victim.
				extra = 0
				if err := r.extraJob(ctx, f.Seq); err != nil {
					return false, err
				}
			}
			if err := r.sleepUntil(ctx, r.since()+100*time.Millisecond); err != nil {
				return false, err
			}
		}
	}
	return false, fmt.Errorf("%w: unknown fault kind %q", ErrConfig, f.Kind)
}

// probe submits one more job, in the background, right after a leader
// fault: it needs an allocation, so the new leader's first round commits
// one, and the failover time measures the election and that round rather
// than how long the workload happens to leave the allocation unchanged.
func (r *run) probe(seq int) {
	app := r.o.Apps[seq%len(r.o.Apps)]
	name := fmt.Sprintf("%s-p%02d-%s", abbrev(r.scenario), seq, app)
	spec, err := launch.Job{Name: name, App: app}.Spec(r.cat, r.o.GPUsPerAgent*r.o.Agents)
	if err != nil {
		r.setProbeErr(err)
		return
	}
	r.probes.Add(1)
	go func() {
		defer r.probes.Done()
		for {
			err := r.c.submit(r.subCtx, name, spec)
			if !errors.Is(err, errUnavailable) {
				r.setProbeErr(err)
				return
			}
			select {
			case <-r.subCtx.Done():
				r.setProbeErr(r.subCtx.Err())
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

func (r *run) setProbeErr(err error) {
	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	if r.probeErr == nil {
		r.probeErr = err
	}
}

// extraJob submits one more job now (for a fault that needs a running
// worker after the workload has finished).
func (r *run) extraJob(ctx context.Context, seq int) error {
	app := r.o.Apps[0]
	name := fmt.Sprintf("%s-x%02d-%s", abbrev(r.scenario), seq, app)
	spec, err := launch.Job{Name: name, App: app}.Spec(r.cat, r.o.GPUsPerAgent*r.o.Agents)
	if err != nil {
		return err
	}
	for {
		if err := r.c.submit(ctx, name, spec); !errors.Is(err, errUnavailable) {
			return err
		}
		if err := r.sleepUntil(ctx, r.since()+250*time.Millisecond); err != nil {
			return err
		}
	}
}

// converge waits until the workload is submitted and every acknowledged
// job has completed, or the convergence bound has passed.
func (r *run) converge(ctx context.Context, submitted <-chan struct{}) error {
	deadline := time.Now().Add(r.o.Converge)
	select {
	case <-submitted:
	case <-time.After(r.o.Converge):
		return fmt.Errorf("%w: the workload could not be submitted within %s", ErrCluster, r.o.Converge)
	}
	r.probes.Wait()
	if err := errors.Join(r.submitErr, r.probeErr); err != nil {
		return err
	}
	for {
		ev, err := r.c.events()
		if err != nil {
			return err
		}
		if _, err := r.c.running(); err != nil {
			return err
		}
		m := check.Measure(ev)
		if m.Lost == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d of %d jobs not completed %s after the last fault", ErrCluster, m.Lost, m.JobsSubmitted, r.o.Converge)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
