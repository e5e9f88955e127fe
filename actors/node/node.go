package node

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/jobspec"
	"pollux/actors/pb"
	"pollux/actors/workerproto"
)

// ActorName is the name the node actor is spawned under: a remote peer
// addresses it as actor.NewPID(address, ActorName).
const ActorName = "node"

// DefaultGrace is the time between SIGTERM and SIGKILL.
const DefaultGrace = 30 * time.Second

// ErrConfig is returned by Start for an unusable configuration.
var ErrConfig = errors.New("node: bad configuration")

// Config configures one node actor.
type Config struct {
	// Name is the node's name (its membership name).
	Name string
	// GPUs is how many GPUs the node has (indexes 0..GPUs-1).
	GPUs int
	// CPUSlots, when set, makes the node's GPUs CPU slots (for machines
	// without accelerators): it has one entry per GPU, the CPU ids of that
	// slot, and the worker on slot i is told CPUSlots[i] (POLLUX_CPUS,
	// OMP_NUM_THREADS) and no GPU.
	CPUSlots [][]int
	// Grace is the time between SIGTERM and SIGKILL (default 30 s).
	Grace time.Duration
	// ReportListen is where to listen for worker reports (default
	// 127.0.0.1:0).
	ReportListen string
	// ReportTLS secures the report port (pki's ChannelReport server
	// configuration) and ReportCA is the CA file workers check it with
	// (POLLUX_REPORT_CA); nil and "": plaintext (insecure mode).
	ReportTLS *tls.Config
	ReportCA  string
	// MaxReportConns bounds the report connections open at once (default
	// DefaultMaxReportConns); ReportIdle closes a connection that sends
	// no line for that long (default DefaultReportIdle).
	MaxReportConns int
	ReportIdle     time.Duration
	// Emulator returns the program and arguments that run a built-in
	// emulated application; nil refuses emulated runs.
	Emulator func(app string) []string
	// WorkerEnv is the environment workers inherit before the protocol's
	// variables are added (default os.Environ()).
	WorkerEnv []string
	// WorkerOutput receives workers' stdout and stderr (default
	// os.Stderr).
	WorkerOutput io.Writer
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Node is a running node actor and its report listener.
type Node struct {
	sys     *actor.ActorSystem
	pid     *actor.PID
	reports *reportListener

	stopOnce sync.Once
	stopErr  error
}

// Start spawns the node actor (named ActorName) in sys and opens its
// report listener.
func Start(sys *actor.ActorSystem, cfg Config) (*Node, error) {
	if cfg.Name == "" || cfg.GPUs < 0 {
		return nil, fmt.Errorf("%w: name %q, %d GPUs", ErrConfig, cfg.Name, cfg.GPUs)
	}
	if cfg.CPUSlots != nil {
		if len(cfg.CPUSlots) != cfg.GPUs {
			return nil, fmt.Errorf("%w: %d CPU slots for %d GPUs", ErrConfig, len(cfg.CPUSlots), cfg.GPUs)
		}
		for i, cpus := range cfg.CPUSlots {
			if len(cpus) == 0 || slices.Min(cpus) < 0 {
				return nil, fmt.Errorf("%w: CPU slot %d has CPUs %v", ErrConfig, i, cpus)
			}
		}
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.ReportListen == "" {
		cfg.ReportListen = "127.0.0.1:0"
	}
	if cfg.MaxReportConns <= 0 {
		cfg.MaxReportConns = DefaultMaxReportConns
	}
	if cfg.ReportIdle <= 0 {
		cfg.ReportIdle = DefaultReportIdle
	}
	if (cfg.ReportTLS == nil) != (cfg.ReportCA == "") {
		return nil, fmt.Errorf("%w: a TLS report port needs both its configuration and the CA file for workers", ErrConfig)
	}
	if cfg.WorkerEnv == nil {
		cfg.WorkerEnv = os.Environ()
	}
	if cfg.WorkerOutput == nil {
		cfg.WorkerOutput = os.Stderr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = cfg.Logger.With("node", cfg.Name)
	n := &Node{sys: sys}
	var pid *actor.PID
	ready := make(chan struct{})
	rl, err := listenReports(cfg, func(r workerproto.Report) {
		<-ready
		sys.Root.Send(pid, reportIn{r})
	})
	if err != nil {
		return nil, fmt.Errorf("%w: report listener: %w", ErrConfig, err)
	}
	n.reports = rl
	props := actor.PropsFromProducer(func() actor.Actor {
		return &nodeActor{
			cfg:        cfg,
			sys:        sys,
			reportAddr: rl.addr(),
			runs:       map[runKey]*run{},
			latest:     map[string]uint64{},
			owner:      make([]*run, cfg.GPUs),
		}
	})
	pid, err = sys.Root.SpawnNamed(props, ActorName)
	if err != nil {
		rl.close()
		return nil, fmt.Errorf("%w: spawning actor: %w", ErrConfig, err)
	}
	n.pid = pid
	close(ready)
	return n, nil
}

// PID is the node actor.
func (n *Node) PID() *actor.PID { return n.pid }

// ReportAddr is where workers send reports.
func (n *Node) ReportAddr() string { return n.reports.addr() }

// Stop stops every worker (SIGTERM, SIGKILL after the grace period), waits
// for them to exit or for timeout, then stops the actor and the report
// listener. Later calls return the first call's result.
func (n *Node) Stop(timeout time.Duration) error {
	n.stopOnce.Do(func() { n.stopErr = n.stop(timeout) })
	return n.stopErr
}

func (n *Node) stop(timeout time.Duration) error {
	done := make(chan struct{})
	n.sys.Root.Send(n.pid, shutdown{done: done})
	var err error
	select {
	case <-done:
	case <-time.After(timeout):
		err = fmt.Errorf("node: workers still running after %v", timeout)
	}
	if serr := n.sys.Root.StopFuture(n.pid).Wait(); serr != nil && err == nil {
		err = fmt.Errorf("node: stopping actor: %w", serr)
	}
	n.reports.close()
	return err
}

// Local messages of the actor (never sent across processes).
type (
	reportIn     struct{ r workerproto.Report }
	graceExpired struct{ key runKey }
	shutdown     struct{ done chan struct{} }
	procExited   struct {
		key   runKey
		rank  int
		state *os.ProcessState
		err   error
	}
)

type runKey struct {
	job         string
	incarnation uint64
}

// run is one job incarnation on this node.
type run struct {
	key      runKey
	spec     *pb.RunJob
	gpus     []int             // GPU of each local worker, once started
	procs    map[int]*exec.Cmd // alive workers by rank
	started  bool              // workers were launched
	stopping bool              // asked to stop
	// done is the run's final report and exits its workers' exits, kept
	// once they ended on their own: told again to the owner while the
	// run is still assigned (an owner that lost leadership meanwhile, or
	// a new one, has missed them).
	done  *pb.WorkerReport
	exits []*pb.WorkerExited
}

type nodeActor struct {
	cfg        Config
	sys        *actor.ActorSystem
	reportAddr string

	generation, term uint64
	runs             map[runKey]*run
	pending          []*run            // waiting for GPUs, in assignment order
	latest           map[string]uint64 // newest incarnation accepted per job
	owner            []*run            // per GPU: the run whose worker holds it
	shutdown         chan struct{}     // set once asked to shut down
}

func (a *nodeActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pb.Assign:
		ctx.Respond(a.assign(ctx, m))
	case *pb.StatusRequest:
		ctx.Respond(a.status())
	case reportIn:
		a.forwardReport(ctx, m.r)
	case procExited:
		a.exited(ctx, m)
	case graceExpired:
		if r := a.runs[m.key]; r != nil && r.stopping {
			for _, c := range r.procs {
				a.cfg.Logger.Warn("node: grace period over, killing worker", "job", r.key.job, "incarnation", r.key.incarnation, "pid", c.Process.Pid)
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
		}
	case shutdown:
		a.shutdown = m.done
		for _, r := range a.runs {
			a.stop(ctx, r)
		}
		a.maybeDrained()
	}
}

// assign applies one desired state.
func (a *nodeActor) assign(ctx actor.Context, m *pb.Assign) *pb.AssignAck {
	refuse := func(format string, args ...any) *pb.AssignAck {
		err := fmt.Sprintf(format, args...)
		a.cfg.Logger.Warn("node: refusing assignment", "generation", m.Generation, "err", err)
		return &pb.AssignAck{Ok: false, Error: err, Generation: a.generation}
	}
	if a.shutdown != nil {
		return refuse("node is shutting down")
	}
	if m.Generation < a.generation {
		return refuse("stale generation %d: node has seen %d", m.Generation, a.generation)
	}
	want := map[string]*pb.RunJob{}
	total := 0
	for _, rj := range m.Runs {
		if err := a.check(rj); err != nil {
			return refuse("job %q: %v", rj.GetJob(), err)
		}
		if want[rj.Job] != nil {
			return refuse("job %q listed twice", rj.Job)
		}
		want[rj.Job] = rj
		total += int(rj.Replicas)
	}
	if total > a.cfg.GPUs {
		return refuse("%d workers assigned to %d GPUs", total, a.cfg.GPUs)
	}
	a.generation, a.term = m.Generation, max(a.term, m.Term)
	for key, r := range a.runs {
		if w := want[key.job]; w == nil || w.Incarnation != key.incarnation {
			a.stop(ctx, r)
		} else {
			if w.Owner != nil {
				r.spec.Owner = w.Owner // a new leader re-homes the run
			}
			if r.started && len(r.procs) == 0 && !r.stopping {
				a.retell(ctx, r)
			}
		}
	}
	for _, rj := range m.Runs {
		key := runKey{rj.Job, rj.Incarnation}
		if a.runs[key] != nil {
			continue
		}
		if last, ok := a.latest[rj.Job]; ok && rj.Incarnation <= last {
			continue // already ran (or ran past): never start twice
		}
		a.latest[rj.Job] = rj.Incarnation
		r := &run{key: key, spec: rj, procs: map[int]*exec.Cmd{}}
		a.runs[key] = r
		a.pending = append(a.pending, r)
	}
	a.schedule(ctx)
	return &pb.AssignAck{Ok: true, Generation: a.generation}
}

// check validates one RunJob through the environment its first worker
// would get.
func (a *nodeActor) check(rj *pb.RunJob) error {
	if err := jobspec.CheckName(rj.GetJob()); err != nil {
		return err
	}
	switch {
	case rj.Replicas < 1 || int(rj.Replicas) > a.cfg.GPUs:
		return fmt.Errorf("replicas %d outside [1, %d]", rj.Replicas, a.cfg.GPUs)
	case uint64(rj.FirstRank)+uint64(rj.Replicas) > uint64(rj.WorldSize):
		return fmt.Errorf("ranks %d..%d beyond world size %d", rj.FirstRank, rj.FirstRank+rj.Replicas-1, rj.WorldSize)
	case (rj.Application == "") == (len(rj.Command) == 0):
		return errors.New("want exactly one of application and command")
	case rj.Application != "" && a.cfg.Emulator == nil:
		return errors.New("this node runs no emulated applications")
	case len(rj.Command) > 0 && rj.Command[0] == "":
		return errors.New("empty program")
	}
	return a.env(rj, 0, 0).Validate()
}

func (a *nodeActor) env(rj *pb.RunJob, local, gpu int) workerproto.Env {
	gpus, cpus := []int{gpu}, []int(nil)
	if a.cfg.CPUSlots != nil {
		gpus, cpus = nil, a.cfg.CPUSlots[gpu]
	}
	return workerproto.Env{
		JobID:         rj.Job,
		Incarnation:   rj.Incarnation,
		Rank:          int(rj.FirstRank) + local,
		LocalRank:     local,
		WorldSize:     int(rj.WorldSize),
		NumNodes:      int(rj.NumNodes),
		MasterAddr:    rj.MasterAddr,
		MasterPort:    int(rj.MasterPort),
		GPUs:          gpus,
		CPUs:          cpus,
		InitBatch:     int(rj.InitBatch),
		AtomicBatch:   int(rj.AtomicBatch),
		AccumSteps:    int(rj.AccumSteps),
		Gain:          rj.Gain,
		CheckpointDir: rj.CheckpointDir,
		ReportAddr:    a.reportAddr,
		ReportCA:      a.cfg.ReportCA,
	}
}

// schedule starts pending runs, in order, whose GPUs are free.
func (a *nodeActor) schedule(ctx actor.Context) {
	var free []int
	for g, r := range a.owner {
		if r == nil {
			free = append(free, g)
		}
	}
	keep := a.pending[:0]
	for _, r := range a.pending {
		if r.stopping {
			continue
		}
		n := int(r.spec.Replicas)
		if len(free) < n {
			keep = append(keep, r)
			continue
		}
		r.gpus, free = free[:n:n], free[n:]
		a.launch(ctx, r)
	}
	clear(a.pending[len(keep):])
	a.pending = keep
}

// launch starts the workers of r on r.gpus.
func (a *nodeActor) launch(ctx actor.Context, r *run) {
	r.started = true
	argv := r.spec.Command
	if r.spec.Application != "" {
		argv = a.cfg.Emulator(r.spec.Application)
	}
	self := ctx.Self()
	for local, gpu := range r.gpus {
		env := a.env(r.spec, local, gpu)
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = append(slices.Clip(a.cfg.WorkerEnv), env.Environ()...)
		c.Stdout, c.Stderr = a.cfg.WorkerOutput, a.cfg.WorkerOutput
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			a.cfg.Logger.Error("node: cannot start worker", "job", r.key.job, "rank", env.Rank, "err", err)
			a.tell(ctx, r, &pb.WorkerExited{
				Node: a.cfg.Name, Job: r.key.job, Incarnation: r.key.incarnation,
				Rank: uint32(env.Rank), ExitCode: -1, Error: err.Error(),
			})
			continue
		}
		a.owner[gpu] = r
		r.procs[env.Rank] = c
		a.cfg.Logger.Info("node: worker started", "job", r.key.job, "incarnation", r.key.incarnation,
			"rank", env.Rank, "gpu", gpu, "pid", c.Process.Pid)
		key, rank := r.key, env.Rank
		go func() {
			err := c.Wait()
			a.sys.Root.Send(self, procExited{key: key, rank: rank, state: c.ProcessState, err: err})
		}()
	}
	if len(r.procs) == 0 {
		delete(a.runs, r.key)
	}
}

// stop asks r's workers to exit; a run not started yet is dropped.
func (a *nodeActor) stop(ctx actor.Context, r *run) {
	if r.stopping {
		return
	}
	r.stopping = true
	if len(r.procs) == 0 {
		delete(a.runs, r.key)
		return
	}
	for _, c := range r.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	self, key := ctx.Self(), r.key
	time.AfterFunc(a.cfg.Grace, func() { a.sys.Root.Send(self, graceExpired{key: key}) })
}

func (a *nodeActor) exited(ctx actor.Context, m procExited) {
	r := a.runs[m.key]
	if r == nil || r.procs[m.rank] == nil {
		return
	}
	delete(r.procs, m.rank)
	if g := r.gpus[m.rank-int(r.spec.FirstRank)]; a.owner[g] == r {
		a.owner[g] = nil
	}
	ev := &pb.WorkerExited{
		Node: a.cfg.Name, Job: m.key.job, Incarnation: m.key.incarnation,
		Rank: uint32(m.rank), ExitCode: int32(m.state.ExitCode()), Requested: r.stopping,
	}
	if ws, ok := m.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ev.Signal = ws.Signal().String()
	}
	a.cfg.Logger.Info("node: worker exited", "job", ev.Job, "incarnation", ev.Incarnation, "rank", ev.Rank,
		"code", ev.ExitCode, "signal", ev.Signal, "requested", ev.Requested)
	if !r.stopping {
		r.exits = append(r.exits, ev)
	}
	a.tell(ctx, r, ev)
	if len(r.procs) == 0 && r.stopping {
		delete(a.runs, r.key)
	}
	a.schedule(ctx)
	a.maybeDrained()
}

func (a *nodeActor) maybeDrained() {
	if a.shutdown == nil {
		return
	}
	for _, r := range a.runs {
		if len(r.procs) > 0 {
			return
		}
	}
	select {
	case <-a.shutdown:
	default:
		close(a.shutdown)
	}
}

// forwardReport passes a worker's report to its run's owner if the report
// belongs to a run of this node.
func (a *nodeActor) forwardReport(ctx actor.Context, rep workerproto.Report) {
	r := a.runs[runKey{rep.Job, rep.Incarnation}]
	if r == nil || !r.started || rep.Rank < int(r.spec.FirstRank) || rep.Rank >= int(r.spec.FirstRank+r.spec.Replicas) {
		a.cfg.Logger.Warn("node: dropping report of a run this node does not have",
			"job", rep.Job, "incarnation", rep.Incarnation, "rank", rep.Rank)
		return
	}
	msg := &pb.WorkerReport{
		Node: a.cfg.Name, Job: rep.Job, Incarnation: rep.Incarnation, Rank: uint32(rep.Rank),
		StepTime: rep.StepTime, SyncTime: rep.SyncTime, GradSqr: rep.GradSqr, GradVar: rep.GradVar,
		Epoch: uint32(rep.Epoch), Progress: rep.Progress, LocalBsz: uint32(rep.LocalBatch),
		AccumSteps: uint32(rep.AccumSteps), Done: rep.Done,
	}
	if rep.Done {
		r.done = msg
	}
	a.tell(ctx, r, msg)
}

// retell tells r's owner again how r ended: its final report, then its
// workers' exits. A run whose workers all ended while the control plane
// changed leader would otherwise stay running in the state for ever: the
// old owner's completion or restart died with its leadership, and the
// new owner hears nothing from a run that no longer runs.
func (a *nodeActor) retell(ctx actor.Context, r *run) {
	if r.done != nil {
		a.tell(ctx, r, r.done)
	}
	for _, e := range r.exits {
		a.tell(ctx, r, e)
	}
}

// tell sends msg to r's owner, if it has one.
func (a *nodeActor) tell(ctx actor.Context, r *run, msg any) {
	if o := r.spec.Owner; o != nil && o.Id != "" {
		ctx.Send(actor.NewPID(o.Address, o.Id), msg)
	}
}

func (a *nodeActor) status() *pb.NodeStatus {
	st := &pb.NodeStatus{Node: a.cfg.Name, Gpus: uint32(a.cfg.GPUs), Generation: a.generation}
	for _, r := range a.runs {
		rj := &pb.RunningJob{
			Job: r.key.job, Incarnation: r.key.incarnation, Alive: uint32(len(r.procs)),
			Stopping: r.stopping, Pending: !r.started,
		}
		for _, g := range r.gpus {
			rj.Gpus = append(rj.Gpus, uint32(g))
		}
		st.Jobs = append(st.Jobs, rj)
	}
	slices.SortFunc(st.Jobs, func(x, y *pb.RunningJob) int {
		return cmp.Or(cmp.Compare(x.Job, y.Job), cmp.Compare(x.Incarnation, y.Incarnation))
	})
	return st
}
