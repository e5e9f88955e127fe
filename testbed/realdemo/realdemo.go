package realdemo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pollux/actors/node/worker"
	"pollux/actors/server/api"
	"pollux/internal/cpuset"
	"pollux/testbed/launch"
)

// Sentinel errors.
var (
	// ErrConfig: unusable options.
	ErrConfig = errors.New("realdemo: bad options")
	// ErrJob: a job failed, was cancelled, or completed without what its
	// checkpoint should show.
	ErrJob = errors.New("realdemo: job")
	// ErrShort: the run ended but did not show what the demo is for (a
	// job below its target, or resized fewer than MinResizes times).
	ErrShort = errors.New("realdemo: not shown")
)

// defaultAgents is how many agents a run starts by default.
const defaultAgents = 2

// MinResizes is how many times every job's replica count must change
// between its incarnations for the run to show elastic scheduling.
const MinResizes = 2

// Job is one real job of the demo.
type Job struct {
	Name    string
	Example worker.Example
	// After is when it is submitted, after the cluster is up (real time).
	After time.Duration
	// Args are added to the example's command (e.g. --augment 4 and
	// --min-epochs 8 make it longer).
	Args []string
	// Fixed, if set, makes it a user-sized job (jobspec replicas and
	// batch_size), as under the Tiresias policy.
	Fixed *Fixed
	// UserBatch is the total batch a careful user gives it when sizing it
	// for a comparison (Choose; 0: the example's initial batch).
	UserBatch int
}

// Workload is the demo's three jobs: two CNNs, then an MLP, submitted gap
// apart, on digits augmented augment-fold. The CNNs train at least
// minEpochs epochs, the MLP (whose epochs take a quarter of a CNN's)
// four times as many, so that it is still training when the CNNs finish:
// every job arrives while others hold the slots (and takes some of
// theirs), and is given more as they finish.
func Workload(gap time.Duration, augment, minEpochs int) []Job {
	cnn, mlp := worker.Examples[1], worker.Examples[0]
	args := func(epochs int) []string {
		// The examples' default learning rate (0.05 at M0 = 32) scaled
		// up by AdaScale makes the CNN diverge after some 20 epochs at a
		// total batch near 100 with momentum 0.9; 0.02 trains both
		// models stably for as long as the demo runs them.
		return []string{"--augment", fmt.Sprint(augment), "--min-epochs", fmt.Sprint(epochs),
			"--max-epochs", fmt.Sprint(max(3*epochs, 30)), "--lr", "0.02", "--checkpoint-interval", "5"}
	}
	return digitsJobs(gap, cnn, mlp, args(minEpochs), args(4*minEpochs))
}

// digitsJobs are the demos' two CNNs and MLP, submitted gap apart, with
// the arguments cnnArgs and mlpArgs.
func digitsJobs(gap time.Duration, cnn, mlp worker.Example, cnnArgs, mlpArgs []string) []Job {
	return []Job{
		{Name: "digits-cnn-1", Example: cnn, After: 0, Args: cnnArgs},
		{Name: "digits-cnn-2", Example: cnn, After: gap, Args: cnnArgs},
		{Name: "digits-mlp-3", Example: mlp, After: 2 * gap, Args: mlpArgs},
	}
}

// Options describe a run.
type Options struct {
	// Exec runs `pollux` (the servers and agents); Env is added to their
	// environment.
	Exec []string
	Env  []string
	// Dir holds everything of the run: the installed worker library
	// (Dir/worker), the cluster's data and logs, the jobs' checkpoints
	// (Dir/checkpoints/JOB) and the API history (Dir/history.jsonl).
	Dir string
	// Python is the interpreter of the workers (default worker.Python,
	// Debian's /usr/bin/python3).
	Python string
	// Servers (default 3), Agents (default 2) and Slots, the CPU slots
	// of each agent (default 2; Compare's default: CoreSlots).
	Servers, Agents, Slots int
	// Jobs (default Workload(15 s, 16, 60)).
	Jobs []Job
	// Interval is the scheduling interval (default 1 s); TimeScale the
	// servers' clock rate for job ages (default 20; see the package
	// doc); Grace the agents' SIGTERM to SIGKILL delay (default 10 s).
	Interval  time.Duration
	TimeScale float64
	Grace     time.Duration
	// Tick is how often the API is polled (default 500 ms).
	Tick time.Duration
	// Policy is the servers' --policy (empty: their default).
	Policy string
	// Progress receives progress lines (nil: none).
	Progress io.Writer
	// Logger receives the launcher's log (default: discarded).
	Logger *slog.Logger
}

func (o *Options) defaults() error {
	if len(o.Exec) == 0 || o.Dir == "" {
		return fmt.Errorf("%w: Exec and Dir are required", ErrConfig)
	}
	if o.Python == "" {
		o.Python = worker.Python
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Servers, 3)
	def(&o.Agents, defaultAgents)
	def(&o.Slots, 2)
	if o.Jobs == nil {
		o.Jobs = Workload(15*time.Second, 16, 60)
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	dur(&o.Interval, time.Second)
	dur(&o.Grace, 10*time.Second)
	dur(&o.Tick, 500*time.Millisecond)
	if o.TimeScale == 0 {
		o.TimeScale = 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Servers < 1 || o.Agents < 1 || o.Slots < 1 || len(o.Jobs) == 0 || !(o.TimeScale > 0) ||
		o.Interval < 0 || o.Grace < 0 || o.Tick < 0 {
		return fmt.Errorf("%w: %d servers, %d agents of %d CPU slots, %d jobs, time scale %v, interval %v, grace %v, tick %v",
			ErrConfig, o.Servers, o.Agents, o.Slots, len(o.Jobs), o.TimeScale, o.Interval, o.Grace, o.Tick)
	}
	seen := map[string]bool{}
	for _, j := range o.Jobs {
		if seen[j.Name] || j.After < 0 {
			return fmt.Errorf("%w: job %q twice or submitted at %v", ErrConfig, j.Name, j.After)
		}
		seen[j.Name] = true
	}
	return nil
}

// Result is what the run showed, per job (the JSON of `pollux demo
// --real --json`).
type Result struct {
	Jobs map[string]JobResult `json:"jobs"`
}

// JobResult is one job: its checkpoint's accuracy (digits) or validation
// loss (the language model) and the target it trained to, how many incarnations the scheduler started (the API's
// count), the total batch size M = K m (s + 1) and the replicas K of
// each incarnation that trained, in order (the checkpoint's run
// history), and its completion time in seconds from submission.
type JobResult struct {
	Accuracy     float64 `json:"accuracy,omitempty"`
	Loss         float64 `json:"loss,omitempty"`
	Target       float64 `json:"target"`
	Incarnations int     `json:"incarnations"`
	BatchSizes   []int   `json:"batch_sizes"`
	Replicas     []int   `json:"replicas"`
	JCT          float64 `json:"jct_s"`
	// Metric is the example's metric: "accuracy" or "loss".
	Metric string `json:"-"`
}

// Reached reports whether the job's final metric is at its target.
func (r JobResult) Reached() bool {
	if r.Metric == "loss" {
		return r.Loss <= r.Target
	}
	return r.Accuracy >= r.Target
}

// Resizes counts the changes of the replica count between successive
// incarnations.
func (r JobResult) Resizes() int {
	n := 0
	for i := 1; i < len(r.Replicas); i++ {
		if r.Replicas[i] != r.Replicas[i-1] {
			n++
		}
	}
	return n
}

// Check names what the result fails to show: a job short of its target or
// resized fewer than MinResizes times. Nil when it shows everything.
func (r Result) Check() error { return r.check(true) }

// check is Check, the resizes only when resized.
func (r Result) check(resized bool) error {
	var errs []error
	for _, name := range r.names() {
		j := r.Jobs[name]
		if !j.Reached() {
			errs = append(errs, fmt.Errorf("%w: %s reached %s %.4f, short of its target %g", ErrShort, name, j.metric(), j.value(), j.Target))
		}
		if n := j.Resizes(); resized && n < MinResizes {
			errs = append(errs, fmt.Errorf("%w: %s was resized %d times (replicas %v), want at least %d", ErrShort, name, n, j.Replicas, MinResizes))
		}
	}
	return errors.Join(errs...)
}

func (r JobResult) metric() string { return cmp.Or(r.Metric, "accuracy") }

func (r JobResult) value() float64 {
	if r.Metric == "loss" {
		return r.Loss
	}
	return r.Accuracy
}

func (r Result) names() []string {
	names := make([]string, 0, len(r.Jobs))
	for n := range r.Jobs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// WriteTable prints the result as a table.
func (r Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s %-8s %8s %6s %5s %5s  %-22s %s\n", "job", "metric", "value", "target", "incs", "JCT s", "replicas", "batch sizes")
	for _, name := range r.names() {
		j := r.Jobs[name]
		fmt.Fprintf(&b, "%-14s %-8s %8.4f %6.3g %5d %5.0f  %-22s %s\n", name, j.metric(), j.value(), j.Target, j.Incarnations, j.JCT,
			ints(j.Replicas), ints(j.BatchSizes))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " ")
}

// Run runs the demo: it checks the interpreter, installs the worker
// library, starts the cluster, submits the jobs at their times, waits
// until all have completed and reads their checkpoints. It stops every
// process it started on every way out (ctx's end included). The error
// wraps ErrJob if a job failed, ErrShort (with the result) if the run
// did not show what it is for.
func Run(ctx context.Context, o Options) (Result, error) {
	res, _, err := run(ctx, o)
	if err != nil {
		return Result{}, err
	}
	return res, res.Check()
}

// run is Run without the check; it also returns each job as the API
// last showed it, with its bid.
func run(ctx context.Context, o Options) (res Result, final map[string]api.Job, err error) {
	if err := o.defaults(); err != nil {
		return Result{}, nil, err
	}
	if err := worker.CheckInterpreter(ctx, o.Python); err != nil {
		return Result{}, nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return Result{}, nil, fmt.Errorf("realdemo: %w", err)
	}
	lib, err := worker.Install(filepath.Join(dir, "worker"))
	if err != nil {
		return Result{}, nil, err
	}
	lib.Python = o.Python
	specs := map[string][]byte{}
	ckpt := map[string]string{}
	for _, j := range o.Jobs {
		ckpt[j.Name] = filepath.Join(dir, "checkpoints", j.Name)
		s, err := j.Example.Spec(j.Name, lib, ckpt[j.Name], j.Args...)
		if err != nil {
			return Result{}, nil, err
		}
		if j.Fixed != nil {
			if s, err = j.Fixed.apply(s); err != nil {
				return Result{}, nil, fmt.Errorf("%w: job %s: %w", ErrConfig, j.Name, err)
			}
		}
		// JSON is YAML: the API decodes it.
		if specs[j.Name], err = json.Marshal(s); err != nil {
			return Result{}, nil, fmt.Errorf("realdemo: %w", err)
		}
	}
	progressf(o.Progress, "starting %d servers and %d agents of %d CPU slots on 127.0.0.1, mutual TLS and encrypted gossip (logs in %s)",
		o.Servers, o.Agents, o.Slots, dir)
	// The agents run the library's scripts with this interpreter, and
	// nothing else.
	allow := []string{"--allow-command", lib.Python + " " + lib.Dir + "/*.py **"}
	c, err := launch.Start(ctx, launch.Options{Exec: o.Exec, Env: o.Env, Dir: dir, Servers: o.Servers, Agents: o.Agents,
		CPUSlots: o.Slots, Interval: o.Interval, TimeScale: o.TimeScale, Grace: o.Grace, AgentArgs: allow,
		Policy: o.Policy, Observe: true, Scenario: "demo-real", Logger: o.Logger})
	if err != nil {
		return Result{}, nil, err
	}
	progressf(o.Progress, "%s", cores(c.Agents, o.Slots))
	defer func() {
		progressf(o.Progress, "stopping the cluster")
		if serr := c.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	d := &driver{o: o, c: c, cl: c.Client(), specs: specs, ckpt: ckpt, metric: map[string]string{}}
	for _, j := range o.Jobs {
		d.metric[j.Name] = j.Example.Metric
	}
	js, err := d.run(ctx)
	if err != nil {
		return Result{}, nil, err
	}
	if res, err = d.result(js); err != nil {
		return Result{}, nil, err
	}
	return res, d.final(ctx, js), nil
}

// final reads every job with its bid: from the leader, else (a busy
// leader cannot always confirm its lease) the freshest follower's copy,
// which is what the bid was when the job completed.
func (d *driver) final(ctx context.Context, js []api.Job) map[string]api.Job {
	out := map[string]api.Job{}
	for _, j := range js {
		if full, found, err := d.cl.JobAny(ctx, j.ID); err == nil && found {
			out[j.ID] = full
			continue
		}
		for _, m := range d.c.Servers {
			if !m.Serving() {
				continue
			}
			full, found, _, a := d.cl.Job(ctx, m, j.ID, 5*time.Second)
			if a.OK() && found && full.State == "completed" && full.Bid != nil {
				out[j.ID] = full
				break
			}
		}
	}
	return out
}

// driver submits and follows the jobs of one run.
type driver struct {
	o      Options
	c      *launch.Cluster
	cl     *launch.Client
	specs  map[string][]byte
	ckpt   map[string]string
	metric map[string]string // job -> its example's metric

	lastKey   string
	lastPrint time.Time
}

// run submits the jobs at their times and polls the API until every one
// has completed; it returns the final list.
func (d *driver) run(ctx context.Context) ([]api.Job, error) {
	pending := slices.Clone(d.o.Jobs)
	slices.SortStableFunc(pending, func(a, b Job) int { return cmp.Compare(a.After, b.After) })
	begin := time.Now()
	for {
		elapsed := time.Since(begin)
		for len(pending) > 0 && pending[0].After <= elapsed {
			j := pending[0]
			if a := d.cl.SubmitAny(ctx, j.Name, d.specs[j.Name], 250*time.Millisecond, 30*time.Second); !a.OK() {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("realdemo: interrupted after %v: %w", elapsed.Round(time.Second), ctx.Err())
				}
				return nil, fmt.Errorf("%w: submitting %s: %s", ErrJob, j.Name, a.Error())
			}
			progressf(d.o.Progress, "%5.0fs  submitted %s (%s, target %s %g)", elapsed.Seconds(), j.Name, j.Example.Model, j.Example.Metric, j.Example.Target)
			pending = pending[1:]
		}
		js, _, jerr := d.cl.JobsAny(ctx)
		if jerr == nil {
			done := 0
			for _, j := range js {
				switch j.State {
				case "completed":
					done++
				case "failed", "cancelled":
					return nil, fmt.Errorf("%w: %s %s: %s (see the agents' logs in %s)", ErrJob, j.ID, j.State, j.Reason, d.c.Options().Dir)
				}
			}
			d.progress(elapsed, js)
			if len(pending) == 0 && done == len(d.o.Jobs) {
				return js, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("realdemo: interrupted after %v: %w", elapsed.Round(time.Second), ctx.Err())
		case <-time.After(d.o.Tick):
		}
	}
}

// progress prints a line when a job's state, slots or incarnation
// changed, and every 10 s otherwise: the slots in use, then per live job
// its slots, incarnation, epoch and accuracy (from its progress file).
func (d *driver) progress(elapsed time.Duration, js []api.Job) {
	if d.o.Progress == nil {
		return
	}
	var key, b strings.Builder
	used, done := 0, 0
	for _, j := range js {
		used += j.GPUs
		fmt.Fprintf(&key, "%s/%s/%d/%d ", j.ID, j.State, j.GPUs, j.Incarnation)
		if j.State == "completed" {
			done++
			continue
		}
		fmt.Fprintf(&b, "  %s: ", j.ID)
		if j.GPUs == 0 {
			b.WriteString("waiting")
		} else {
			fmt.Fprintf(&b, "%d slots on %d agents, inc %d", j.GPUs, j.Nodes, j.Incarnation)
		}
		if p, err := worker.ReadProgress(d.ckpt[j.ID]); err == nil {
			fmt.Fprintf(&b, ", epoch %d", p.Epoch)
			if acc, ok := p.Metrics["accuracy"]; ok {
				fmt.Fprintf(&b, ", accuracy %.3f", acc)
			}
			if loss, ok := p.Metrics["loss"]; ok {
				fmt.Fprintf(&b, ", loss %.3f", loss)
			}
		}
	}
	if key.String() == d.lastKey && time.Since(d.lastPrint) < 10*time.Second {
		return
	}
	d.lastKey, d.lastPrint = key.String(), time.Now()
	progressf(d.o.Progress, "%5.0fs  slots %d/%d, done %d/%d%s", elapsed.Seconds(), used, d.o.Agents*d.o.Slots, done, len(d.o.Jobs), b.String())
}

// result reads every job's final checkpoint.
func (d *driver) result(js []api.Job) (Result, error) {
	res := Result{Jobs: map[string]JobResult{}}
	for _, j := range js {
		p, err := worker.ReadProgress(d.ckpt[j.ID])
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return Result{}, fmt.Errorf("%w: %s completed without a checkpoint in %s", ErrJob, j.ID, d.ckpt[j.ID])
		case err != nil:
			return Result{}, fmt.Errorf("%w: %s: %w", ErrJob, j.ID, err)
		case !p.Done:
			return Result{}, fmt.Errorf("%w: %s completed but its checkpoint (epoch %d) is not done", ErrJob, j.ID, p.Epoch)
		}
		metric := d.metric[j.ID]
		v, ok := p.Metrics[metric]
		if !ok {
			return Result{}, fmt.Errorf("%w: %s: no %s in %s", ErrJob, j.ID, metric, filepath.Join(d.ckpt[j.ID], worker.ProgressFile))
		}
		r := JobResult{Target: p.Metrics["target"], Incarnations: int(j.Incarnation), Metric: metric,
			BatchSizes: []int{}, Replicas: []int{}, JCT: j.FinishTime - j.SubmitTime}
		if metric == "loss" {
			r.Loss = v
		} else {
			r.Accuracy = v
		}
		for _, run := range p.Runs {
			r.BatchSizes = append(r.BatchSizes, run.BatchSize)
			r.Replicas = append(r.Replicas, run.Replicas)
		}
		res.Jobs[j.ID] = r
	}
	return res, nil
}

// cores says which cores each agent's slots run on.
func cores(agents []*launch.Member, slots int) string {
	var parts []string
	for _, a := range agents {
		if a.CPUs == nil {
			return "agents' cores: all of them, each agent's slots splitting them (fewer cores than slots in all)"
		}
		what := fmt.Sprintf("%d CPU slots", slots)
		if slots == 1 {
			what = "1 CPU slot"
		}
		parts = append(parts, fmt.Sprintf("%s on cores %s (%s)", a.ID, cpuset.Format(a.CPUs), what))
	}
	return "agents' cores: " + strings.Join(parts, ", ")
}

func progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
