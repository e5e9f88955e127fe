package node

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/jobspec"
	"pollux/actors/node/workerlog"
	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/cluster/pki"
	"pollux/optimizer/topology"
)

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
	// GPUType and Topology are what the agent declares in its gossip
	// metadata (its GPU type, "" untyped; its place, "rack=r0,zone=z1",
	// "" the default domain): an Assign placed for a node registered
	// with others is refused (checkAttrs).
	GPUType  string
	Topology string
	// Grace is the time between SIGTERM and SIGKILL (default 30 s).
	Grace time.Duration
	// ReportListen is where to listen for worker reports (default
	// 127.0.0.1:0; "none": no listener, for in-process workers that
	// report through WorkerSpec.Report, whose POLLUX_REPORT_ADDR is then
	// the unreachable "in-process:0").
	ReportListen string
	// ReportTLS secures the report port (pki's ChannelReport server
	// configuration) and ReportCA is the CA file workers check it with
	// (POLLUX_REPORT_CA); nil and "": plaintext (insecure mode).
	ReportTLS *tls.Config
	ReportCA  string
	// ReportGate, if set, admits connections to the report port before
	// their handshake (default: pki's gate, without members).
	ReportGate *pki.Gate
	// MaxReportConns bounds the report connections open at once (default
	// DefaultMaxReportConns); ReportFirst is how long a new connection
	// has to deliver its first accepted report (default
	// DefaultReportFirst); ReportIdle closes a connection without an
	// accepted report for that long (default DefaultReportIdle).
	MaxReportConns int
	ReportFirst    time.Duration
	ReportIdle     time.Duration
	// Emulator returns the program and arguments that run a built-in
	// emulated application; nil refuses emulated runs.
	Emulator func(app string) []string
	// Launch starts workers (default ExecLauncher).
	Launch Launcher
	// WorkerEnv is the environment workers get besides the protocol's
	// variables (default: none; the agent passes the variables named by
	// --pass-env).
	WorkerEnv []string
	// AllowCommands is the node's allow-list (CommandPattern; nil:
	// DefaultAllowCommands): an assigned job whose command (or emulated
	// application) it does not match is denied in the ack, and so is one
	// whose checkpoint directory is not below the cluster's checkpoint
	// root (Assign.checkpoint_root).
	AllowCommands []string
	// RunAs is the user workers run as, and who owns their checkpoint
	// directories (nil: the agent's own user): one user for every job,
	// a single-tenant node.
	RunAs *RunAs
	// UIDs, if set, replaces RunAs: each run's workers run as a uid of
	// the range of their own, taken when the run is admitted and given
	// back when it is dropped, which owns the run's checkpoint directory
	// (mode 0700) and its report token files.
	UIDs *UIDRange
	// TokenDir, if set, is where the node writes each worker's report
	// token, in a file only the worker's user reads, passed as
	// workerproto.EnvReportTokenFile instead of the token itself. The
	// directory must let the workers' users reach their files (0711).
	TokenDir string
	// WorkerOutput receives workers' stdout and stderr (default
	// os.Stderr) when Logs is nil.
	WorkerOutput io.Writer
	// Logs, if set, keeps each worker's stdout and stderr in a log file
	// of its own (job, incarnation, rank), instead of WorkerOutput.
	Logs *workerlog.Store
	// ReportFlush is how long the node gathers reports for one owner
	// before it forwards them in one message (default 100 ms); a done
	// report is forwarded at once.
	ReportFlush time.Duration
	// DataDir holds the fencing state (cluster id, term, generation and
	// the newest incarnation of every assigned job), written before any
	// worker of a new incarnation starts, so a restarted agent never runs
	// an incarnation twice. "" keeps it in memory only.
	DataDir string
	// ActorName is the actor's name (default pb.NodeActor).
	ActorName string
	// PropsOptions are added to the actor's props (middleware).
	PropsOptions []actor.PropsOption
	// Now is the clock of the lease (default time.Now).
	Now func() time.Time
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

// Start spawns the node actor (named Config.ActorName) in sys and opens its
// report listener.
func Start(sys *actor.ActorSystem, cfg Config) (*Node, error) {
	if cfg.Name == "" || cfg.GPUs < 0 {
		return nil, fmt.Errorf("%w: name %q, %d GPUs", ErrConfig, cfg.Name, cfg.GPUs)
	}
	if cfg.UIDs != nil && (cfg.RunAs != nil || cfg.UIDs.First == 0 || cfg.UIDs.First > cfg.UIDs.Last) {
		return nil, fmt.Errorf("%w: uid range %v (with run-as %v): want one of them, and a range without root", ErrConfig, cfg.UIDs, cfg.RunAs != nil)
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
	if cfg.ReportFirst <= 0 {
		cfg.ReportFirst = DefaultReportFirst
	}
	if cfg.ReportIdle <= 0 {
		cfg.ReportIdle = DefaultReportIdle
	}
	allow, err := ParseAllowCommands(cfg.AllowCommands)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if (cfg.ReportTLS == nil) != (cfg.ReportCA == "") {
		return nil, fmt.Errorf("%w: a TLS report port needs both its configuration and the CA file for workers", ErrConfig)
	}
	if cfg.Launch == nil {
		cfg.Launch = ExecLauncher
	}
	if cfg.ReportFlush <= 0 {
		cfg.ReportFlush = 100 * time.Millisecond
	}
	if cfg.ActorName == "" {
		cfg.ActorName = pb.NodeActor
	}
	if cfg.WorkerOutput == nil {
		cfg.WorkerOutput = os.Stderr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cfg.Logger.With("node", cfg.Name)
	n := &Node{sys: sys}
	var fence fencing
	fence, err = loadFencing(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if fence.ClusterID != "" {
		cfg.Logger.Info("node: fencing state restored", "cluster", fence.ClusterID, "term", fence.Term,
			"generation", fence.Generation, "jobs", len(fence.Latest))
	}
	var pid *actor.PID
	ready := make(chan struct{})
	auth := newReportAuth()
	queue := &reportQueue{}
	// Every report, from the listener or an in-process worker, is
	// checked against the runs' tokens before the actor sees it.
	deliver := func(r workerproto.Report) error {
		if err := auth.check(r); err != nil {
			return err
		}
		<-ready
		if queue.push(r) {
			sys.Root.Send(pid, reportsIn{})
		}
		return nil
	}
	deliverInProcess := func(r workerproto.Report) {
		if err := deliver(r); err != nil {
			cfg.Logger.Warn("node: refused worker report", "peer", "in-process", "job", r.Job, "incarnation", r.Incarnation,
				"rank", r.Rank, "done", r.Done, "err", err)
		}
	}
	// Without a listener, workers report through WorkerSpec.Report; their
	// environment names no reachable address.
	reportAddr := "in-process:0"
	if cfg.ReportListen != "none" {
		rl, err := listenReports(cfg, deliver)
		if err != nil {
			return nil, fmt.Errorf("%w: report listener: %w", ErrConfig, err)
		}
		n.reports, reportAddr = rl, rl.addr()
	}
	props := actor.PropsFromProducer(func() actor.Actor {
		var uids *uidPool
		if cfg.UIDs != nil {
			uids = newUIDPool(*cfg.UIDs)
		}
		return &nodeActor{
			uids:       uids,
			cfg:        cfg,
			sys:        sys,
			reportAddr: reportAddr,
			deliver:    deliverInProcess,
			queue:      queue,
			auth:       auth,
			allow:      allow,
			denied:     map[runKey]string{},
			fence:      fence,
			outbox:     map[string]*outbox{},
			runs:       map[runKey]*run{},
			owner:      make([]*run, cfg.GPUs),
		}
	}, cfg.PropsOptions...)
	pid, err = sys.Root.SpawnNamed(props, cfg.ActorName)
	if err != nil {
		n.reports.close()
		return nil, fmt.Errorf("%w: spawning actor: %w", ErrConfig, err)
	}
	n.pid = pid
	close(ready)
	return n, nil
}

// PID is the node actor.
func (n *Node) PID() *actor.PID { return n.pid }

// SetAllowCommands replaces the node's allow-list (nil: the default):
// runs it is assigned from then on are admitted by the new one, runs
// already started go on. A bad list changes nothing.
func (n *Node) SetAllowCommands(patterns []string) error {
	allow, err := ParseAllowCommands(patterns)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	_, err = n.sys.Root.RequestFuture(n.pid, setAllow(allow), 5*time.Second).Result()
	return err
}

// setAllow is the node actor's new allow-list.
type setAllow []CommandPattern

// ReportAddr is where workers send reports ("" without a listener).
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
	reportsIn    struct{} // the queue has reports
	flushReports struct{}
	graceExpired struct{ key runKey }
	shutdown     struct{ done chan struct{} }
	procExited   struct {
		key  runKey
		rank int
		exit Exit
	}
)

type runKey struct {
	job         string
	incarnation uint64
}

// run is one job incarnation on this node. It stays until an assignment
// no longer lists it (and its workers have exited), so that every
// assignment's acknowledgement tells how it ended.
type run struct {
	key        runKey
	spec       *pb.RunJob
	gpus       []int          // GPU of each local worker, once started
	procs      map[int]Worker // alive workers by rank
	started    bool           // workers were launched
	stopping   bool           // asked to stop
	done       bool           // rank 0 reported done
	doneToken  string         // the token of that report
	exits      []*pb.WorkerExit
	user       *RunAs   // who the workers run as (nil: the agent's user)
	tokenFiles []string // the workers' report token files
}

type nodeActor struct {
	cfg        Config
	sys        *actor.ActorSystem
	reportAddr string
	deliver    func(workerproto.Report)
	queue      *reportQueue
	taken      []workerproto.Report // the last reports taken from queue (its buffer, reused)
	auth       *reportAuth
	allow      []CommandPattern
	denied     map[runKey]string // runs of the last assignment the policy forbids

	fence    fencing
	lease    leaseState
	outbox   map[string]*outbox // reports gathered per owner
	flushing bool               // a flush is scheduled
	runs     map[runKey]*run
	uids     *uidPool      // nil without Config.UIDs
	pending  []*run        // waiting for GPUs, in assignment order
	owner    []*run        // per GPU: the run whose worker holds it
	shutdown chan struct{} // set once asked to shut down
}

func (a *nodeActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pb.Assign:
		ctx.Respond(a.assign(ctx, m))
	case *pb.LeaseRenew:
		ctx.Respond(a.renew(ctx, m))
	case leaseCheck:
		a.checkLease(ctx)
	case setAllow:
		a.allow = m
		ctx.Respond(true)
	case *pb.StatusRequest:
		ctx.Respond(a.status())
	case reportsIn:
		a.taken = a.queue.take(a.taken)
		for _, r := range a.taken {
			a.forwardReport(ctx, r)
		}
	case flushReports:
		a.flushing = false
		a.flush(ctx)
	case procExited:
		a.exited(ctx, m)
	case graceExpired:
		if r := a.runs[m.key]; r != nil && r.stopping {
			for _, w := range r.procs {
				a.cfg.Logger.Warn("node: grace period over, killing worker", "job", r.key.job, "incarnation", r.key.incarnation, "pid", w.Pid())
				_ = w.Signal(syscall.SIGKILL)
			}
		}
	case shutdown:
		a.shutdown = m.done
		for _, r := range a.runs {
			a.stop(ctx, r)
		}
		a.maybeDrained()
	case *actor.Stopping:
		if a.lease.timer != nil {
			a.lease.timer.Stop()
		}
	}
}

// checkAttrs compares the node the leader placed runs on (its registered
// GPU type and domains; nil: no check) with this node's own attributes.
// They differ when the agent restarted with another --gpu-type or
// --topology and the leader has not seen the new registration yet: the
// runs were placed for the machine it was.
func (a *nodeActor) checkAttrs(reg *pb.NodeAttrs) error {
	if reg == nil {
		return nil
	}
	if reg.GpuType != a.cfg.GPUType {
		return fmt.Errorf("placed for GPU type %q, node has %q: wait for the node's new registration", reg.GpuType, a.cfg.GPUType)
	}
	own, err := topology.ParseTopology(a.cfg.Topology, reg.Levels)
	if err != nil {
		return fmt.Errorf("node topology under the cluster's levels: %w", err)
	}
	if !slices.Equal(own, reg.Domains) {
		return fmt.Errorf("placed for topology %q, node is in %q: wait for the node's new registration",
			topology.FormatTopology(reg.Domains, reg.Levels), topology.FormatTopology(own, reg.Levels))
	}
	return nil
}

// ack is the answer to an assignment: ok or why not, and what the node
// runs either way.
func (a *nodeActor) ack(ok bool, err string, refused map[runKey]string) *pb.AssignAck {
	ack := &pb.AssignAck{Ok: ok, Error: err, Generation: a.fence.Generation, Term: a.fence.Term,
		Node: a.cfg.Name, ClusterId: a.fence.ClusterID, LogJobs: a.logJobs()}
	for _, r := range a.runs {
		rs := &pb.RunStatus{Job: r.key.job, Incarnation: r.key.incarnation, Alive: uint32(len(r.procs)),
			Pending: !r.started, Stopping: r.stopping, Done: r.done, DoneToken: r.doneToken, Exits: r.exits}
		for _, g := range r.gpus {
			rs.Gpus = append(rs.Gpus, uint32(g))
		}
		ack.Runs = append(ack.Runs, rs)
	}
	for key, why := range refused {
		ack.Runs = append(ack.Runs, &pb.RunStatus{Job: key.job, Incarnation: key.incarnation, Refused: why})
	}
	for key, why := range a.denied {
		ack.Runs = append(ack.Runs, &pb.RunStatus{Job: key.job, Incarnation: key.incarnation, Denied: why})
	}
	slices.SortFunc(ack.Runs, func(x, y *pb.RunStatus) int {
		return cmp.Or(cmp.Compare(x.Job, y.Job), cmp.Compare(x.Incarnation, y.Incarnation))
	})
	return ack
}

// assign applies one desired state.
func (a *nodeActor) assign(ctx actor.Context, m *pb.Assign) *pb.AssignAck {
	refuse := func(format string, args ...any) *pb.AssignAck {
		err := fmt.Sprintf(format, args...)
		a.cfg.Logger.Warn("node: refusing assignment", "generation", m.Generation, "term", m.Term, "err", err)
		return a.ack(false, err, nil)
	}
	if a.shutdown != nil {
		return refuse("node is shutting down")
	}
	if m.ClusterId == "" {
		return refuse("assignment names no cluster")
	}
	next := a.fence.clone()
	if next.ClusterID != m.ClusterId {
		if next.ClusterID != "" {
			a.cfg.Logger.Error("node: ASSIGNMENT FROM ANOTHER CLUSTER: the Raft cluster was rebuilt; resetting fencing state",
				"old_cluster", next.ClusterID, "old_term", next.Term, "old_generation", next.Generation,
				"new_cluster", m.ClusterId, "term", m.Term, "generation", m.Generation)
		}
		next = fencing{ClusterID: m.ClusterId, Latest: map[string]uint64{}, Dropped: map[string]uint64{}}
	}
	switch {
	case m.Term < next.Term:
		return refuse("stale term %d: node has accepted term %d", m.Term, next.Term)
	case m.Term == next.Term && m.Generation < next.Generation:
		return refuse("stale generation %d of term %d: node has accepted %d", m.Generation, m.Term, next.Generation)
	}
	if err := a.checkAttrs(m.Node); err != nil {
		return refuse("%v", err)
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
	next.Term, next.Generation = m.Term, m.Generation
	refused := map[runKey]string{}
	denied := map[runKey]string{}
	var start []*pb.RunJob
	users := map[runKey]*RunAs{}
	for job := range next.Latest {
		if _, dropped := next.Dropped[job]; want[job] == nil && !dropped {
			next.Dropped[job] = m.Generation
		}
	}
	for _, rj := range m.Runs {
		key := runKey{rj.Job, rj.Incarnation}
		last, seen := next.Latest[rj.Job]
		switch {
		case a.runs[key] != nil:
		case rj.Hold:
			continue // the leader's gate holds it: not started, not fenced
		case seen && rj.Incarnation <= last:
			// Already run (or run past), possibly before this agent
			// restarted: never started twice. The leader restarts the
			// job under a new incarnation.
			refused[key] = fmt.Sprintf("incarnation %d already ran on this node (newest %d)", rj.Incarnation, last)
		default:
			root := m.CheckpointRoot
			if rj.CheckpointRoot != "" {
				root = rj.CheckpointRoot // a borrower's run: the root its lender declared for it
			}
			user, err := a.admit(rj, root)
			if err != nil {
				// Not run, and not recorded as run: the leader fails the
				// job (denied) or restarts it (refused).
				if errors.Is(err, errDenied) {
					denied[key] = err.Error()
				} else {
					refused[key] = err.Error()
				}
				if a.denied[key] != err.Error() {
					a.cfg.Logger.Warn("node: refusing to run a job", "job", rj.Job, "incarnation", rj.Incarnation,
						"generation", m.Generation, "term", m.Term, "err", err)
				}
				continue
			}
			users[key] = user
			start = append(start, rj)
		}
		next.Latest[rj.Job] = max(last, rj.Incarnation)
		delete(next.Dropped, rj.Job)
	}
	a.denied = denied
	next.prune()
	if !next.equal(&a.fence) {
		if err := next.save(a.cfg.DataDir); err != nil {
			return refuse("cannot persist fencing state: %v", err)
		}
		a.fence = next
	}
	for key, r := range a.runs {
		if w := want[key.job]; w == nil || w.Incarnation != key.incarnation {
			a.stop(ctx, r)
		} else if w.Owner != nil {
			r.spec.Owner = w.Owner // a new job actor takes over the run
		}
	}
	for _, rj := range start {
		r := &run{key: runKey{rj.Job, rj.Incarnation}, spec: rj, procs: map[int]Worker{}}
		r.user = users[r.key]
		a.runs[r.key] = r
		a.auth.add(r.key, int(rj.FirstRank), rj.ReportTokens)
		a.pending = append(a.pending, r)
	}
	a.schedule(ctx)
	a.forgetLogs(m.ForgetLogs)
	return a.ack(true, "", refused)
}

// MaxLogJobs bounds the jobs an AssignAck lists in log_jobs.
const MaxLogJobs = 4096

// logJobs lists the jobs the node keeps logs of but runs no more (at
// most MaxLogJobs), for the leader to say which the cluster pruned.
func (a *nodeActor) logJobs() []string {
	if a.cfg.Logs == nil {
		return nil
	}
	running := map[string]bool{}
	for key := range a.runs {
		running[key.job] = true
	}
	var out []string
	for _, job := range a.cfg.Logs.Jobs() {
		if !running[job] && len(out) < MaxLogJobs {
			out = append(out, job)
		}
	}
	return out
}

// forgetLogs deletes the logs of the jobs the cluster pruned (an
// accepted assignment's forget_logs), but never of a job it runs: its
// logs are kept until then, and a log still being written is left for
// a later assignment.
func (a *nodeActor) forgetLogs(jobs []string) {
	if a.cfg.Logs == nil {
		return
	}
	running := map[string]bool{}
	for key := range a.runs {
		running[key.job] = true
	}
	for _, job := range jobs {
		if running[job] {
			continue
		}
		if err := a.cfg.Logs.Forget(job); err != nil {
			a.cfg.Logger.Debug("node: keeping a pruned job's logs for now", "job", job, "err", err)
			continue
		}
		a.cfg.Logger.Info("node: deleted the logs of a pruned job", "job", job)
	}
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
	case len(rj.ReportTokens) != int(rj.Replicas):
		return fmt.Errorf("%d report tokens for %d workers", len(rj.ReportTokens), rj.Replicas)
	case slices.Contains(rj.ReportTokens, ""):
		return errors.New("an empty report token")
	}
	return a.env(rj, 0, 0).Validate()
}

// admit applies the node's policy to a run it is to start: its command
// (or emulated application) must be in the allow-list and its checkpoint
// directory below the cluster's root, which is then prepared for the
// workers and given to the user they run as (userFor), which admit
// returns. An error wrapping errDenied is final; others (the file
// system's, no free uid) may pass.
func (a *nodeActor) admit(rj *pb.RunJob, root string) (*RunAs, error) {
	if err := allowed(a.allow, rj.Application, rj.Command); err != nil {
		return nil, err
	}
	if err := checkCheckpointDir(root, rj.CheckpointDir); err != nil {
		return nil, err
	}
	user, err := a.userFor(runKey{rj.Job, rj.Incarnation})
	if err != nil {
		return nil, err
	}
	resume := rj.CheckpointDir != filepath.Join(root, rj.Job)
	if err := prepareCheckpointDir(root, rj.CheckpointDir, user, rj.Submitter, resume); err != nil {
		if a.uids != nil {
			a.uids.give(user)
		}
		return nil, err
	}
	return user, nil
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
		ReportToken:   rj.ReportTokens[local],
	}
}

// schedule starts pending runs, in order, whose GPUs are free, while
// the node holds a lease.
func (a *nodeActor) schedule(ctx actor.Context) {
	if !a.leaseValid(a.cfg.Now()) {
		return
	}
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
		var err error
		if a.cfg.TokenDir != "" && env.ReportToken != "" {
			env.ReportTokenFile, err = a.writeTokenFile(r, env.Rank, env.ReportToken)
		}
		var w Worker
		output, logw := a.cfg.WorkerOutput, (*workerlog.Writer)(nil)
		if err == nil && a.cfg.Logs != nil {
			logw, err = a.cfg.Logs.Create(workerlog.Key{Job: r.key.job, Incarnation: r.key.incarnation, Rank: env.Rank})
			output = logw
		}
		if err == nil {
			w, err = a.cfg.Launch(WorkerSpec{Argv: argv, App: r.spec.Application, Env: env,
				Environ: append(slices.Clip(a.cfg.WorkerEnv), env.Environ()...), RunAs: r.user,
				Output: output, Report: a.deliver})
			if err != nil && logw != nil {
				_ = logw.Close()
			}
		}
		if err != nil {
			a.cfg.Logger.Error("node: cannot start worker", "job", r.key.job, "rank", env.Rank, "err", err)
			ev := &pb.WorkerExited{Node: a.cfg.Name, Job: r.key.job, Incarnation: r.key.incarnation,
				Rank: uint32(env.Rank), ExitCode: -1, Error: err.Error()}
			r.exits = append(r.exits, &pb.WorkerExit{Rank: ev.Rank, ExitCode: -1, Error: ev.Error})
			a.tell(ctx, r, ev)
			continue
		}
		a.owner[gpu] = r
		r.procs[env.Rank] = w
		a.cfg.Logger.Info("node: worker started", "job", r.key.job, "incarnation", r.key.incarnation,
			"rank", env.Rank, "gpu", gpu, "pid", w.Pid())
		key, rank := r.key, env.Rank
		go func() {
			exit := w.Wait()
			if logw != nil {
				if err := logw.Close(); err != nil {
					a.cfg.Logger.Warn("node: closing worker log", "job", key.job, "incarnation", key.incarnation, "rank", rank, "err", err)
				}
			}
			a.sys.Root.Send(self, procExited{key: key, rank: rank, exit: exit})
		}()
	}
}

// stop asks r's workers to exit (SIGKILL at once while the lease has
// lapsed); a run without workers is dropped.
func (a *nodeActor) stop(ctx actor.Context, r *run) {
	if r.stopping {
		return
	}
	r.stopping = true
	a.auth.stopping(r.key)
	if len(r.procs) == 0 {
		delete(a.runs, r.key)
		a.auth.remove(r.key)
		a.release(r)
		return
	}
	sig := a.stopSignal()
	for _, w := range r.procs {
		_ = w.Signal(sig)
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
		Rank: uint32(m.rank), ExitCode: int32(m.exit.Code), Requested: r.stopping,
	}
	if m.exit.Signal != 0 {
		ev.Signal = m.exit.Signal.String()
	}
	a.cfg.Logger.Info("node: worker exited", "job", ev.Job, "incarnation", ev.Incarnation, "rank", ev.Rank,
		"code", ev.ExitCode, "signal", ev.Signal, "requested", ev.Requested)
	r.exits = append(r.exits, &pb.WorkerExit{Rank: ev.Rank, ExitCode: ev.ExitCode, Signal: ev.Signal, Requested: ev.Requested})
	a.flush(ctx) // the owner gets a worker's reports before its exit
	a.tell(ctx, r, ev)
	if len(r.procs) == 0 && r.stopping {
		delete(a.runs, r.key)
		a.auth.remove(r.key)
		a.release(r)
	}
	if len(r.procs) == 0 {
		a.tellLeader(ctx)
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
// belongs to a run of this node, and notes rank 0's done report.
func (a *nodeActor) forwardReport(ctx actor.Context, rep workerproto.Report) {
	r := a.runs[runKey{rep.Job, rep.Incarnation}]
	if r == nil || !r.started || rep.Rank < int(r.spec.FirstRank) || rep.Rank >= int(r.spec.FirstRank+r.spec.Replicas) {
		a.cfg.Logger.Warn("node: dropping report of a run this node does not have",
			"job", rep.Job, "incarnation", rep.Incarnation, "rank", rep.Rank)
		return
	}
	if rep.Done && (rep.Rank != 0 || r.stopping) {
		rep.Done = false // checked on the way in; the run has stopped since
	}
	if rep.Done {
		r.done, r.doneToken = true, rep.Token
	}
	o := r.spec.Owner
	if o == nil || o.Id == "" {
		return
	}
	key := o.Address + "/" + o.Id
	box := a.outbox[key]
	if box == nil {
		box = &outbox{to: actor.NewPID(o.Address, o.Id)}
		a.outbox[key] = box
	}
	wr := &pb.WorkerReport{
		Node: a.cfg.Name, Job: rep.Job, Incarnation: rep.Incarnation, Rank: uint32(rep.Rank),
		StepTime: rep.StepTime, SyncTime: rep.SyncTime, GradSqr: rep.GradSqr, GradVar: rep.GradVar,
		Epoch: uint32(rep.Epoch), Progress: rep.Progress, LocalBsz: uint32(rep.LocalBatch),
		AccumSteps: uint32(rep.AccumSteps), Done: rep.Done,
		CheckpointEpoch: uint32(rep.Checkpoint.Epoch), CheckpointProgress: rep.Checkpoint.Progress, CheckpointAt: rep.Checkpoint.SavedAt,
	}
	if rep.Done {
		wr.Token = rep.Token // for the leader to check
	}
	box.reports = append(box.reports, wr)
	switch {
	case rep.Done || len(box.reports) >= maxBatch:
		a.flush(ctx)
	case !a.flushing:
		a.flushing = true
		self := ctx.Self()
		time.AfterFunc(a.cfg.ReportFlush, func() { a.sys.Root.Send(self, flushReports{}) })
	}
}

// maxBatch bounds the reports of one WorkerReports message.
const maxBatch = 256

// outbox holds the reports gathered for one owner.
type outbox struct {
	to      *actor.PID
	reports []*pb.WorkerReport
}

// flush forwards every owner's gathered reports.
func (a *nodeActor) flush(ctx actor.Context) {
	for key, box := range a.outbox {
		if len(box.reports) > 0 {
			ctx.Send(box.to, &pb.WorkerReports{Reports: box.reports})
		}
		delete(a.outbox, key)
	}
}

// tell sends msg to r's owner, if it has one.
func (a *nodeActor) tell(ctx actor.Context, r *run, msg any) {
	if o := r.spec.Owner; o != nil && o.Id != "" {
		ctx.Send(actor.NewPID(o.Address, o.Id), msg)
	}
}

func (a *nodeActor) status() *pb.NodeStatus {
	st := &pb.NodeStatus{Node: a.cfg.Name, Gpus: uint32(a.cfg.GPUs), Generation: a.fence.Generation}
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
