package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"pollux/actors/node"
	"pollux/cluster"
	"pollux/cluster/pki"
)

func init() { subcommands = append(subcommands, newAgentCmd) }

// agentOpts are the flags of `pollux agent`.
type agentOpts struct {
	name, bind, rack, logLevel  string
	topology, gpuType           string
	dataDir                     string
	join                        []string
	gossipPort, actorPort, gpus int
	cpuSlots                    int
	grace                       time.Duration
	fast                        bool
	timeScale                   float64
	restartCost                 time.Duration
	workerExec                  []string
	allowCommands, passEnv      []string
	runAs                       string
	sec                         securityOpts
}

// agentReady is the line `pollux agent` prints on stdout once it serves.
type agentReady struct {
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

func newAgentCmd() *cobra.Command {
	var o agentOpts
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent of one GPU machine: joins the cluster and runs the workers it is assigned",
		Long: "Runs one node agent: a gossip member (role agent) advertising its GPUs and rack, and the node " +
			"actor that starts, stops and watches the machine's workers. GPUs are counted with nvidia-smi " +
			"unless --gpus N emulates N of them, or --cpu-slots N offers N CPU slots instead (machines without " +
			"accelerators: each slot's worker is pinned to its share of the cores). --topology rack=R[,zone=Z...] declares where the " +
			"machine sits (innermost level first, the cluster's levels in order; nothing: the default rack) and --gpu-type T the type of its " +
			"GPUs (say a100 or t4; the allocator gives a job GPUs of one type at a time); a topology that does not fit the cluster's levels " +
			"is refused when the agent joins (exit status 2). It prints one JSON line with its addresses on stdout when " +
			"ready, and on SIGTERM or SIGINT stops its workers (SIGTERM, SIGKILL after --grace) and leaves. Its actor " +
			"port accepts only server certificates of --ca, its workers report to it over TLS (they get the CA in " +
			"POLLUX_REPORT_CA) and gossip is encrypted with --gossip-key (docs/security.md); --insecure runs plaintext. " +
			"It runs only commands of its allow-list (--allow-command), as --run-as, with only the protocol's " +
			"POLLUX_* variables and those named by --pass-env, and only with checkpoint directories below the " +
			"cluster's checkpoint root.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runAgent(ctx, o, cmd)
		},
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&o.name, "name", host, "unique member name of this machine")
	f.StringVar(&o.bind, "bind", "127.0.0.1", "address to listen on (gossip, actors, worker reports)")
	f.IntVar(&o.gossipPort, "gossip-port", 0, "gossip port (0: any free port)")
	f.IntVar(&o.actorPort, "actor-port", 0, "actor port (0: any free port)")
	f.StringSliceVar(&o.join, "join", nil, "gossip addresses (host:port) of cluster members to join")
	f.IntVar(&o.gpus, "gpus", 0, "emulate this many GPUs (0: count them with nvidia-smi)")
	f.IntVar(&o.cpuSlots, "cpu-slots", 0, "offer this many CPU slots as GPUs, each pinned to its share of this machine's cores (POLLUX_CPUS)")
	f.StringVar(&o.topology, "topology", "", "where this machine sits: level=domain pairs, innermost first, e.g. rack=r3,zone=z1 (empty: the default rack)")
	f.StringVar(&o.rack, "rack", "", "this machine's rack: short for --topology rack=R on a cluster whose only level is the rack")
	f.StringVar(&o.gpuType, "gpu-type", "", "the type of this machine's GPUs, lower-case letters, digits, '-', '_', '.' (e.g. a100, t4; empty: untyped)")
	f.DurationVar(&o.grace, "grace", node.DefaultGrace, "time between SIGTERM and SIGKILL when stopping a worker")
	f.BoolVar(&o.fast, "fast-gossip", false, "sub-second failure detection (loopback and test clusters)")
	f.Float64Var(&o.timeScale, "time-scale", 1, "time scale of emulated workers (simulated seconds per real second)")
	f.DurationVar(&o.restartCost, "restart-cost", 30*time.Second, "simulated start-up time of emulated workers")
	f.StringVar(&o.dataDir, "data-dir", "", "directory of the agent's fencing state (the newest term, generation and job "+
		"incarnations it accepted), so a restarted agent never reruns an old incarnation; empty: kept in memory only")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringSliceVar(&o.workerExec, "worker-exec", nil, "program (and leading arguments) that runs `pollux worker` (default: this binary)")
	_ = f.MarkHidden("worker-exec")
	f.StringArrayVar(&o.allowCommands, "allow-command", nil, "a command workers may run (repeatable; replaces the default "+
		strings.Join(quoteAll(node.DefaultAllowCommands), " and ")+"): words separated by spaces, each a glob "+
		"(* and ? never match a '/') matched against the argument at its position, a last word ** allowing any "+
		"further arguments; emulated:GLOB allows the emulated applications it matches")
	f.StringVar(&o.runAs, "run-as", "", "user (name or uid) workers run as, with its groups, and who owns their "+
		"checkpoint directories (needs root; empty: the agent's own user)")
	f.StringArrayVar(&o.passEnv, "pass-env", nil, "name of a variable of the agent's environment to pass to workers "+
		"(repeatable; workers get only the protocol's variables and these)")
	o.sec.flags(f)
	return cmd
}

func runAgent(ctx context.Context, o agentOpts, cmd *cobra.Command) error {
	log, err := newLogger(cmd.ErrOrStderr(), o.logLevel)
	if err != nil {
		return badInput(err)
	}
	if o.name == "" {
		return badInput(errors.New("agent: --name is empty"))
	}
	if !(o.timeScale > 0) {
		return badInput(fmt.Errorf("agent: --time-scale %v, want > 0", o.timeScale))
	}
	meta, err := placeMeta(o.topology, o.rack, o.gpuType)
	if err != nil {
		return badInput(fmt.Errorf("agent: %w", err))
	}
	gpus := o.gpus
	if gpus < 0 || gpus > cluster.MaxGPUs {
		return badInput(fmt.Errorf("agent: --gpus %d outside [0, %d]", gpus, cluster.MaxGPUs))
	}
	var slots [][]int
	switch {
	case o.cpuSlots != 0 && gpus != 0:
		return badInput(errors.New("agent: --gpus and --cpu-slots exclude each other"))
	case o.cpuSlots < 0 || o.cpuSlots > cluster.MaxGPUs:
		return badInput(fmt.Errorf("agent: --cpu-slots %d outside [1, %d]", o.cpuSlots, cluster.MaxGPUs))
	case o.cpuSlots > 0:
		cpus, err := allowedCPUs()
		if err != nil {
			return fmt.Errorf("agent: --cpu-slots: %w", err)
		}
		gpus, slots = o.cpuSlots, splitCPUs(cpus, o.cpuSlots)
		if o.cpuSlots > len(cpus) {
			log.Warn("agent: more CPU slots than cores: slots share cores", "slots", o.cpuSlots, "cores", len(cpus))
		}
	case gpus == 0:
		if gpus, err = countGPUs(ctx); err != nil {
			return badInput(fmt.Errorf("agent: %w; pass --gpus N to emulate N GPUs or --cpu-slots N to run on CPUs", err))
		}
	}
	allow := o.allowCommands
	if !cmd.Flags().Changed("allow-command") {
		allow = nil // the default
	}
	if _, err := node.ParseAllowCommands(allow); err != nil {
		return badInput(fmt.Errorf("agent: --allow-command: %w", err))
	}
	workerEnv, err := passEnv(o.passEnv)
	if err != nil {
		return badInput(err)
	}
	runAs, err := lookupRunAs(o.runAs)
	if err != nil {
		return badInput(err)
	}
	workerExec := o.workerExec
	if len(workerExec) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("agent: finding own executable: %w", err)
		}
		workerExec = []string{exe}
	}
	log = log.With("agent", o.name)
	if runAs == nil && os.Geteuid() == 0 {
		log.Warn("agent: WORKERS RUN AS ROOT: pass --run-as USER to run them as an unprivileged user")
	}

	// The actor library logs every connection at info: keep its warnings.
	libLog := log
	if o.logLevel != "debug" {
		libLog, _ = newLogger(cmd.ErrOrStderr(), "warn")
	}
	sec, err := o.sec.load(pki.RoleAgent, o.name, []string{o.bind}, log)
	if err != nil {
		return err
	}
	remoteOpts, err := sec.remoteOptions(libLog.With("agent", o.name, "lib", "protoactor"))
	if err != nil {
		return err
	}
	var reportTLS *tls.Config
	if sec.creds != nil {
		if reportTLS, err = sec.creds.ServerConfig(pki.ChannelReport); err != nil {
			return err
		}
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return libLog.With("agent", o.name, "lib", "protoactor")
	}))
	rem := remote.NewRemote(sys, remote.Configure(o.bind, o.actorPort, remoteOpts...))
	rem.Start()
	defer rem.Shutdown(false)

	reportCA := sec.caPath
	if runAs != nil && reportCA != "" {
		// The workers' user must read the CA certificate (public).
		dir, err := workerCA(reportCA)
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		reportCA = filepath.Join(dir, filepath.Base(reportCA))
	}
	if o.dataDir != "" {
		if err := os.MkdirAll(o.dataDir, 0o755); err != nil {
			return badInput(fmt.Errorf("agent: --data-dir: %w", err))
		}
	}
	nd, err := node.Start(sys, node.Config{
		Name: o.name, GPUs: gpus, GPUType: meta.GPUType, Topology: meta.Topology, CPUSlots: slots, Grace: o.grace, ReportListen: net.JoinHostPort(o.bind, "0"), DataDir: o.dataDir, Logger: log,
		ReportTLS: reportTLS, ReportCA: reportCA, AllowCommands: allow, RunAs: runAs, WorkerEnv: workerEnv,
		Emulator: func(app string) []string {
			return append(append([]string(nil), workerExec...), "worker", "--emulate", app,
				"--time-scale", strconv.FormatFloat(o.timeScale, 'g', -1, 64),
				"--restart-cost", o.restartCost.String())
		},
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := nd.Stop(o.grace + 5*time.Second); err != nil {
			log.Error("agent: stopping workers", "err", err)
		}
	}()

	members, err := cluster.Start(cluster.Config{
		Name: o.name, BindAddr: o.bind, BindPort: o.gossipPort, Fast: o.fast, Logger: log.With("lib", "memberlist"),
		Keys: sec.gossipKeys,
		Meta: cluster.Meta{Role: cluster.RoleAgent, Rack: meta.Rack, Topology: meta.Topology, GPUType: meta.GPUType, GPUs: gpus, ActorAddr: sys.Address()},
	})
	if err != nil {
		return err
	}
	defer members.Shutdown()
	defer members.Leave(time.Second)
	go drainEvents(members, log)
	sec.reloadGossipKeys(ctx, members, log)

	ready, _ := json.Marshal(agentReady{Name: o.name, Gossip: members.Addr(), Actor: sys.Address(), Reports: nd.ReportAddr(),
		GPUs: gpus, Topology: meta.Topology, GPUType: meta.GPUType, CPUSlots: slots != nil})
	fmt.Fprintln(cmd.OutOrStdout(), string(ready))
	log.Info("agent: ready", "gossip", members.Addr(), "actor", sys.Address(), "gpus", gpus, "cpu_slots", slots,
		"topology", meta.Topology, "gpu_type", meta.GPUType, "allow_commands", allow, "run_as", o.runAs, "pass_env", o.passEnv)

	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	go checkJoinTopology(ctx, members, meta.Topology, fail)

	if len(o.join) > 0 {
		if err := joinUntil(ctx, members, o.join, log); err != nil {
			if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return badInput(err)
			}
			return nil // interrupted before joining: a clean stop
		}
		// Gossip does not heal a partition by itself: keep the seeds.
		go members.KeepJoined(ctx, o.join, time.Second)
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("agent: stopping", "err", err)
		return badInput(err)
	}
	log.Info("agent: stopping")
	return nil
}

// joinUntil retries joining until one address answers or ctx ends.
func joinUntil(ctx context.Context, m *cluster.Membership, addrs []string, log *slog.Logger) error {
	for {
		n, err := m.Join(addrs)
		if err == nil {
			log.Info("agent: joined the cluster", "via", n)
			return nil
		}
		log.Warn("agent: join failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// drainEvents logs membership changes until the membership shuts down.
func drainEvents(m *cluster.Membership, log *slog.Logger) {
	for ev := range m.Events() {
		log.Debug("membership", "event", ev.Kind.String(), "member", ev.Member.Name, "role", ev.Member.Meta.Role)
	}
}

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading the CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// splitCPUs shares cpus among n slots: contiguous runs as even as
// possible, or, with more slots than CPUs, one CPU per slot round robin.
func splitCPUs(cpus []int, n int) [][]int {
	slots := make([][]int, n)
	for i := range slots {
		if n > len(cpus) {
			slots[i] = []int{cpus[i%len(cpus)]}
			continue
		}
		slots[i] = slices.Clone(cpus[i*len(cpus)/n : (i+1)*len(cpus)/n])
	}
	return slots
}

// countGPUs counts the GPUs nvidia-smi lists.
func countGPUs(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "-L").Output()
	if err != nil {
		return 0, fmt.Errorf("no GPUs detected (nvidia-smi -L: %w)", err)
	}
	n := 0
	for _, line := range bytes.Split(out, []byte("\n")) {
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("GPU ")) {
			n++
		}
	}
	if n == 0 {
		return 0, errors.New("no GPUs detected (nvidia-smi lists none)")
	}
	return n, nil
}

// newLogger is a text slog logger at the named level.
func newLogger(w interface{ Write([]byte) (int, error) }, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return nil, fmt.Errorf("bad log level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// passEnv is the part of the agent's environment named by --pass-env.
func passEnv(names []string) ([]string, error) {
	var env []string
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return nil, fmt.Errorf("agent: --pass-env %q is not a variable name", name)
		}
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env, nil
}

// lookupRunAs resolves --run-as (a user name or uid) with its groups; ""
// is nil (the agent's own user).
func lookupRunAs(name string) (*node.RunAs, error) {
	if name == "" {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return nil, fmt.Errorf("agent: --run-as %q: %w", name, err)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("agent: --run-as %q: %w", name, err)
	}
	if os.Geteuid() != 0 && uint64(os.Geteuid()) != uid {
		return nil, fmt.Errorf("agent: --run-as %q needs the agent to run as root", name)
	}
	r := &node.RunAs{User: u.Username, UID: uint32(uid), GID: uint32(gid)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("agent: --run-as %q: groups: %w", name, err)
	}
	for _, g := range gids {
		v, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("agent: --run-as %q: group %q: %w", name, g, err)
		}
		r.Groups = append(r.Groups, uint32(v))
	}
	return r, nil
}

// workerCA copies the CA certificate (public) into a new directory every
// user can read, for workers running as --run-as; the caller removes it.
func workerCA(ca string) (string, error) {
	b, err := os.ReadFile(ca)
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	dir, err := os.MkdirTemp("", "pollux-agent-ca-")
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	if err := errors.Join(os.Chmod(dir, 0o755), os.WriteFile(filepath.Join(dir, filepath.Base(ca)), b, 0o644)); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("agent: a CA file for the workers: %w", err)
	}
	return dir, nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}
