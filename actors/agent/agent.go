package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"pollux/actors/node"
	"pollux/actors/node/workerlog"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/member"
	"pollux/internal/secure"
	"pollux/internal/usage"
)

// Config is the configuration of one agent. The comments name the
// `pollux agent` flags the fields come from; errors about a field name
// its flag.
type Config struct {
	Name string // --name, unique in the cluster
	// Bind is the address of the gossip, actor and report listeners;
	// GossipPort and ActorPort their ports (0: any free port).
	Bind                  string
	GossipPort, ActorPort int
	// Join are gossip addresses of cluster members to join.
	Join []string
	// GPUs emulates that many GPUs (0: count them with nvidia-smi);
	// CPUSlots offers that many CPU slots as GPUs instead.
	GPUs, CPUSlots int
	// CPUs are the cores the CPU slots split, a cpu-list such as "0-3,6"
	// within the process's affinity (--cpus; "": the whole affinity).
	CPUs string
	// Topology is where the machine sits (level=domain pairs), Rack the
	// older --rack (the rack alone), GPUType the type of its GPUs.
	Topology, Rack, GPUType string
	// Grace is the time between SIGTERM and SIGKILL when stopping a
	// worker.
	Grace      time.Duration
	FastGossip bool // --fast-gossip: sub-second failure detection
	// TimeScale and RestartCost are the emulated workers'.
	TimeScale   float64
	RestartCost time.Duration
	// DataDir keeps the agent's fencing state ("": memory only).
	DataDir string
	// LogDir keeps the workers' logs (--log-dir; "": DataDir/logs, or
	// without DataDir a temporary directory removed when the agent
	// stops); LogMaxBytes caps each worker's log (--worker-log-max; 0:
	// workerlog.DefaultMaxBytes).
	LogDir      string
	LogMaxBytes int64
	// LogMaxTotal caps all the workers' logs (--worker-log-total; 0:
	// workerlog.DefaultMaxTotal): logs are kept until their job is
	// pruned, or this cap deletes the least recently written first.
	LogMaxTotal int64
	// WorkerExec runs `pollux worker` (default: this binary).
	WorkerExec []string
	// AllowCommands are the commands workers may run (nil: the default,
	// node.DefaultAllowCommands); PassEnv the variables of the agent's
	// environment workers get; RunAs the one user (name or uid) every
	// job's workers run as, a single-tenant agent ("": see RunAsRange).
	// RunAsRange, FIRST-LAST, gives each job's workers a uid of their
	// own (node.Config.UIDs); "" is node.DefaultUIDRange for an agent
	// running as root without RunAs, else the agent's own user.
	AllowCommands []string
	// ReloadAllowCommands, if set, gives the allow-list anew on SIGHUP
	// (pollux agent --config: the file's); runs assigned from then on
	// are admitted by it.
	ReloadAllowCommands func() ([]string, error)
	PassEnv             []string
	RunAs               string
	RunAsRange          string
	Security            secure.Options
	// Logger is the agent's log; LibLogger the actor library's (nil:
	// Logger).
	Logger, LibLogger *slog.Logger
	// OnReady, if set, is called once the agent serves.
	OnReady func(Ready)
}

// Ready is what an agent tells once it serves: `pollux agent` prints it
// as a JSON line on stdout.
type Ready struct {
	Name    string `json:"name"`
	Gossip  string `json:"gossip"`
	Actor   string `json:"actor"`
	Reports string `json:"reports"`
	GPUs    int    `json:"gpus"`
	// Topology and GPUType are what the agent declares (empty: the
	// default rack, untyped).
	Topology string `json:"topology,omitempty"`
	GPUType  string `json:"gpu_type,omitempty"`
	// CPUSlots is set when the GPUs are CPU slots (--cpu-slots).
	CPUSlots bool `json:"cpu_slots,omitempty"`
}

// Run runs an agent until ctx ends (nil: a clean stop) or the agent
// fails; on the way out it stops its workers and leaves the cluster.
// Errors of a bad Config, including a topology the cluster's levels
// refuse once joined, are marked by usage.Wrap.
func Run(ctx context.Context, cfg Config) error {
	a := &agent{cfg: cfg, log: cfg.Logger, lib: cfg.LibLogger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.lib == nil {
		a.lib = a.log
	}
	if err := a.check(ctx); err != nil {
		return err
	}
	a.log = a.log.With("agent", cfg.Name)
	switch {
	case a.runAs != nil:
		a.log.Warn("agent: SINGLE-TENANT: every job's workers run as one user (--run-as "+a.runAs.User+"): they can read "+
			"each other's checkpoints, environment and report tokens, and signal each other; use --run-as-range for "+
			"a cluster shared by tenants", "run_as", a.runAs.User)
	case a.uids != nil:
		a.log.Info("agent: each job's workers run as a uid of their own", "run_as_range", a.uids.String())
	default:
		a.log.Warn("agent: SINGLE-TENANT: workers run as the agent's own user (it is not root, so --run-as-range cannot apply)")
	}
	defer a.close()
	return a.run(ctx)
}

// agent is a running agent: what check derived from its Config, its
// parts, and what stops them.
type agent struct {
	cfg      Config
	log, lib *slog.Logger
	// From check: the declared place, the GPUs (and CPU slots), and the
	// workers' settings.
	meta       cluster.Meta
	gpus       int
	slots      [][]int
	allow      []string
	workerEnv  []string
	runAs      *node.RunAs
	uids       *node.UIDRange
	workerExec []string

	sec     *secure.Security
	sys     *actor.ActorSystem
	nd      *node.Node
	members *cluster.Membership
	closers []func()
}

// onClose adds f to what close runs, last added first.
func (a *agent) onClose(f func()) { a.closers = append(a.closers, f) }

func (a *agent) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// run starts the parts in order and waits for the end.
func (a *agent) run(ctx context.Context) error {
	reportTLS, err := a.startRemote()
	if err != nil {
		return err
	}
	if err := a.startNode(reportTLS); err != nil {
		return err
	}
	if err := a.startGossip(ctx); err != nil {
		return err
	}
	a.ready()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	go checkJoinTopology(ctx, a.members, a.meta.Topology, fail)
	if len(a.cfg.Join) > 0 {
		if err := member.JoinUntil(ctx, a.members, a.cfg.Join, a.log); err != nil {
			if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return usage.Wrap(err)
			}
			return nil // interrupted before joining: a clean stop
		}
		// Gossip does not heal a partition by itself: keep the seeds.
		go a.members.KeepJoined(ctx, a.cfg.Join, time.Second)
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		a.log.Error("agent: stopping", "err", err)
		return usage.Wrap(err)
	}
	a.log.Info("agent: stopping")
	return nil
}

// startRemote loads the certificates and keys and starts the actor
// system with its remote listener; it returns the report port's TLS
// (nil when insecure).
func (a *agent) startRemote() (*tls.Config, error) {
	var err error
	if a.sec, err = a.cfg.Security.Load(pki.RoleAgent, a.cfg.Name, []string{a.cfg.Bind}, a.log); err != nil {
		return nil, err
	}
	// The actor library logs every connection at info: keep its warnings.
	libLog := a.lib.With("agent", a.cfg.Name, "lib", "protoactor")
	remoteOpts, err := secure.RemoteOptions(a.sec.Creds, a.sec.Gate(pki.ChannelActor, libLog, nil), libLog)
	if err != nil {
		return nil, err
	}
	var reportTLS *tls.Config
	if a.sec.Creds != nil {
		if reportTLS, err = a.sec.Creds.ServerConfig(pki.ChannelReport); err != nil {
			return nil, err
		}
	}
	a.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return libLog }))
	rem := remote.NewRemote(a.sys, remote.Configure(a.cfg.Bind, a.cfg.ActorPort, remoteOpts...))
	rem.Start()
	a.onClose(func() { rem.Shutdown(false) })
	return reportTLS, nil
}

// startNode starts the node actor, which runs the machine's workers.
func (a *agent) startNode(reportTLS *tls.Config) error {
	reportCA := a.sec.CAPath
	if (a.runAs != nil || a.uids != nil) && reportCA != "" {
		// The workers' user must read the CA certificate (public).
		dir, err := workerCA(reportCA)
		if err != nil {
			return err
		}
		a.onClose(func() { os.RemoveAll(dir) })
		reportCA = filepath.Join(dir, filepath.Base(reportCA))
	}
	if a.cfg.DataDir != "" {
		if err := secure.PrivateDir(a.cfg.DataDir, a.log); err != nil {
			return usage.Errorf("agent: --data-dir: %w", err)
		}
	}
	tokens, err := tokenDir()
	if err != nil {
		return err
	}
	a.onClose(func() { os.RemoveAll(tokens) })
	logs, err := a.startLogs()
	if err != nil {
		return err
	}
	c := a.cfg
	nd, err := node.Start(a.sys, node.Config{
		Name: c.Name, GPUs: a.gpus, GPUType: a.meta.GPUType, Topology: a.meta.Topology, CPUSlots: a.slots, Grace: c.Grace,
		ReportListen: net.JoinHostPort(c.Bind, "0"), DataDir: c.DataDir, Logger: a.log,
		ReportTLS: reportTLS, ReportGate: a.sec.Gate(pki.ChannelReport, a.log, nil), ReportCA: reportCA, AllowCommands: a.allow, RunAs: a.runAs, UIDs: a.uids, WorkerEnv: a.workerEnv, TokenDir: tokens,
		Logs: logs,
		Emulator: func(app string) []string {
			return append(append([]string(nil), a.workerExec...), "worker", "--emulate", app,
				"--time-scale", strconv.FormatFloat(c.TimeScale, 'g', -1, 64),
				"--restart-cost", c.RestartCost.String())
		},
	})
	if err != nil {
		return err
	}
	a.nd = nd
	a.onClose(func() {
		if err := nd.Stop(c.Grace + 5*time.Second); err != nil {
			a.log.Error("agent: stopping workers", "err", err)
		}
	})
	return nil
}

// startLogs opens the workers' log store and spawns the logs actor,
// which answers the servers' pb.LogRead over the actor channel.
func (a *agent) startLogs() (*workerlog.Store, error) {
	if one := cmp.Or(a.cfg.LogMaxBytes, workerlog.DefaultMaxBytes); a.cfg.LogMaxTotal < 0 || (a.cfg.LogMaxTotal > 0 && a.cfg.LogMaxTotal < one) {
		return nil, usage.Errorf("agent: --worker-log-total %d: want a positive size, at least --worker-log-max (%d)", a.cfg.LogMaxTotal, one)
	}
	if a.cfg.LogMaxBytes < 0 {
		return nil, usage.Errorf("agent: --worker-log-max %d: want a positive size", a.cfg.LogMaxBytes)
	}
	dir := a.cfg.LogDir
	switch {
	case dir != "":
	case a.cfg.DataDir != "":
		dir = filepath.Join(a.cfg.DataDir, "logs")
	default:
		tmp, err := os.MkdirTemp("", "pollux-agent-logs-")
		if err != nil {
			return nil, fmt.Errorf("agent: worker log directory: %w", err)
		}
		a.onClose(func() { os.RemoveAll(tmp) })
		dir = tmp
	}
	logs, err := workerlog.Open(workerlog.Config{Dir: dir, MaxBytes: a.cfg.LogMaxBytes, MaxTotal: a.cfg.LogMaxTotal})
	if err != nil {
		return nil, usage.Errorf("agent: --log-dir %s: %w", dir, err)
	}
	pid, err := a.sys.Root.SpawnNamed(workerlog.Props(a.cfg.Name, logs), pb.LogsActor)
	if err != nil {
		return nil, fmt.Errorf("agent: spawning the logs actor: %w", err)
	}
	a.onClose(func() { _ = a.sys.Root.StopFuture(pid).Wait() })
	a.log.Info("agent: workers' logs", "dir", dir, "max_bytes_per_worker", logs.MaxBytes())
	return logs, nil
}

// startGossip starts the agent's member of the cluster's gossip,
// advertising its place, GPUs and actor address.
func (a *agent) startGossip(ctx context.Context) error {
	c := a.cfg
	members, err := cluster.Start(cluster.Config{
		Name: c.Name, BindAddr: c.Bind, BindPort: c.GossipPort, Fast: c.FastGossip, Logger: a.log.With("lib", "memberlist"),
		Keys: a.sec.GossipKeys,
		Meta: cluster.Meta{Role: cluster.RoleAgent, Rack: a.meta.Rack, Topology: a.meta.Topology, GPUType: a.meta.GPUType, GPUs: a.gpus,
			ActorAddr: a.sys.Address()},
	})
	if err != nil {
		return err
	}
	a.members = members
	a.onClose(func() { _ = members.Leave(time.Second); _ = members.Shutdown() })
	// The gates keep room for the lab's members (servers send Assigns)
	// and this machine (workers report from it).
	a.sec.TrackMembers(ctx, time.Second, func() []string {
		var out []string
		for _, m := range members.Members() {
			out = append(out, m.Addr, m.Meta.ActorAddr)
		}
		return out
	})
	go member.LogEvents(members, a.log)
	var also []secure.Reload
	if reload := a.cfg.ReloadAllowCommands; reload != nil {
		also = append(also, secure.Reload{What: "allow-list", Do: func() error {
			allow, err := reload()
			if err == nil {
				err = a.nd.SetAllowCommands(allow)
			}
			if err == nil {
				a.log.Info("agent: allow-list reloaded", "allow_commands", allow)
			}
			return err
		}})
	}
	a.sec.ReloadOnHangup(ctx, members, a.log, also...)
	return nil
}

// ready tells the agent's addresses (OnReady) and logs that it serves.
func (a *agent) ready() {
	c, m := a.cfg, a.meta
	if c.OnReady != nil {
		c.OnReady(Ready{Name: c.Name, Gossip: a.members.Addr(), Actor: a.sys.Address(), Reports: a.nd.ReportAddr(),
			GPUs: a.gpus, Topology: m.Topology, GPUType: m.GPUType, CPUSlots: a.slots != nil})
	}
	a.log.Info("agent: ready", "gossip", a.members.Addr(), "actor", a.sys.Address(), "gpus", a.gpus, "cpu_slots", a.slots,
		"topology", m.Topology, "gpu_type", m.GPUType, "allow_commands", a.allow, "run_as", c.RunAs, "run_as_range", a.uids, "pass_env", c.PassEnv)
}
