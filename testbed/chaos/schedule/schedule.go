package schedule

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds. "Killed" is SIGKILL, without any chance to clean up.
const (
	// LeaderKill kills the Raft leader and restarts it from its data
	// directory after Fault.Down.
	LeaderKill Kind = "leader-kill"
	// FollowerKill kills a follower (Fault.Pick chooses which) and
	// restarts it after Fault.Down.
	FollowerKill Kind = "follower-kill"
	// LeaderPause stops the leader with SIGSTOP for Fault.Down, longer
	// than the election timeout, then resumes it with SIGCONT: a stale
	// leader that comes back after the others elected a new one.
	LeaderPause Kind = "leader-pause"
	// AgentKill kills a node agent (Fault.Pick) and restarts it, with
	// the same id, after Fault.Down: long enough for the cluster to
	// declare it dead and re-place its jobs.
	AgentKill Kind = "agent-kill"
	// WorkerKill kills one worker process (Fault.Pick among the running
	// workers).
	WorkerKill Kind = "worker-kill"
	// ColdRestart kills every server at once and restarts them all from
	// their data directories after Fault.Down.
	ColdRestart Kind = "cold-restart"
	// AgentRestart kills a node agent (Fault.Pick) and restarts it with
	// the same id after Fault.Down, shorter than failure detection: the
	// new incarnation must take over, or clear, the old one's workers.
	AgentRestart Kind = "agent-restart"
	// RackLoss kills every process of one rack (Fault.Pick among the
	// racks), its server and its agents, at once, and restarts them
	// after Fault.Down: the rack's jobs must be re-placed in the others.
	RackLoss Kind = "rack-loss"

	// The network faults need every process in a network namespace of
	// its own (package netns); each lasts Fault.Down, then the network
	// heals.

	// IsolateLeader cuts the Raft leader off from every other member,
	// servers and agents: the majority must elect another.
	IsolateLeader Kind = "isolate-leader"
	// Split21 splits the servers 2/1 (Fault.Pick chooses the lone one);
	// each agent lands on one side.
	Split21 Kind = "split-2-1"
	// Split111 splits the servers 1/1/1: no side has a quorum until the
	// network heals; each agent lands on one side.
	Split111 Kind = "split-1-1-1"
	// Bridge is a non-transitive partition of the servers (Fault.Pick
	// orders them A, B, C): A sees B, B sees C, A does not see C; the
	// agents see everyone.
	Bridge Kind = "bridge"
	// Loss drops 30 % of the packets every member sends.
	Loss Kind = "loss"
	// Latency delays every packet every member sends by 200 ms.
	Latency Kind = "latency"
	// RackPartition cuts one rack (Fault.Pick among the racks), its
	// server and its agents, off from the other racks.
	RackPartition Kind = "rack-partition"
)

// Kinds lists every fault kind, in catalogue order.
var Kinds = []Kind{LeaderKill, FollowerKill, LeaderPause, AgentKill, WorkerKill, ColdRestart, AgentRestart,
	IsolateLeader, Split21, Split111, Bridge, Loss, Latency, RackLoss, RackPartition}

// Network reports whether k is a network fault (it needs network
// namespaces).
func (k Kind) Network() bool {
	switch k {
	case IsolateLeader, Split21, Split111, Bridge, Loss, Latency, RackPartition:
		return true
	}
	return false
}

// Rack reports whether k strikes a whole rack (the scenario needs racks).
func (k Kind) Rack() bool { return k == RackLoss || k == RackPartition }

// Partition reports whether k partitions the network (as opposed to
// degrading every link).
func (k Kind) Partition() bool { return k.Network() && k != Loss && k != Latency }

// Sentinel errors.
var (
	// ErrUnknownScenario is returned for a scenario name not in the
	// catalogue.
	ErrUnknownScenario = errors.New("schedule: unknown scenario")
	// ErrInvalid is returned for a scenario or options that cannot give a
	// schedule (negative counts, unknown kinds, non-positive durations).
	ErrInvalid = errors.New("schedule: invalid")
)

// Fault is one scheduled fault.
type Fault struct {
	// Seq is the fault's position in its schedule, from 0; the history
	// events of its injection carry it as FSeq.
	Seq int
	// Kind is what to do.
	Kind Kind
	// At is when to begin, from the start of the fault phase of the run.
	At time.Duration
	// Down is how long the victim stays stopped or dead before it is
	// resumed or restarted (0 for WorkerKill: its agent handles that).
	Down time.Duration
	// Pick selects the victim among the n candidates alive at injection
	// time, sorted by id: candidate Pick % n.
	Pick uint32
}

// End is when the fault's victim is back (resumed or restarted).
func (f Fault) End() time.Duration { return f.At + f.Down }

func (f Fault) String() string {
	return fmt.Sprintf("#%d %s at %s (down %s, pick %d)", f.Seq, f.Kind, f.At, f.Down, f.Pick)
}

// Options sets the timing of generated schedules.
type Options struct {
	// Gap is the mean quiet time between the end of one fault and the
	// beginning of the next (uniform in [Gap/2, 3Gap/2)).
	Gap time.Duration
	// ElectionTimeout is the servers' Raft election timeout: a leader
	// pause lasts between 2 and 3 times it.
	ElectionTimeout time.Duration
	// ServerDown is the mean time a killed server stays dead (uniform in
	// [ServerDown/2, 3ServerDown/2)); a cold restart keeps all down for it.
	ServerDown time.Duration
	// AgentDown is the mean time a killed agent (AgentKill) stays dead;
	// it must exceed failure detection so that its jobs get re-placed.
	AgentDown time.Duration
	// AgentRestartDown is how long an AgentRestart keeps the agent dead:
	// shorter than failure detection.
	AgentRestartDown time.Duration
	// NetDown is the mean time a network fault lasts before the network
	// heals (uniform in [NetDown/2, 3NetDown/2)).
	NetDown time.Duration
}

// DefaultOptions suits a loopback cluster with a 1 s election timeout and
// sub-second failure detection.
var DefaultOptions = Options{
	Gap:              3 * time.Second,
	ElectionTimeout:  time.Second,
	ServerDown:       2 * time.Second,
	AgentDown:        6 * time.Second,
	AgentRestartDown: 200 * time.Millisecond,
	NetDown:          4 * time.Second,
}

func (o Options) validate() error {
	for _, d := range []time.Duration{o.Gap, o.ElectionTimeout, o.ServerDown, o.AgentDown, o.AgentRestartDown, o.NetDown} {
		if d <= 0 {
			return fmt.Errorf("%w: options %+v: every duration must be positive", ErrInvalid, o)
		}
	}
	return nil
}

// Count is how many faults of one kind a scenario injects.
type Count struct {
	Kind Kind
	N    int
}

// Scenario is a named mix of faults.
type Scenario struct {
	Name   string
	Counts []Count
	// Racks, if positive, runs the scenario on a cluster of that many
	// racks, each with one server and two agents (the rack faults need
	// it).
	Racks int
}

// Network reports whether the scenario holds a network fault.
func (s Scenario) Network() bool {
	for _, c := range s.Counts {
		if c.N > 0 && c.Kind.Network() {
			return true
		}
	}
	return false
}

// WithoutNetwork is the scenario without its network faults.
func (s Scenario) WithoutNetwork() Scenario {
	out := Scenario{Name: s.Name, Racks: s.Racks}
	for _, c := range s.Counts {
		if !c.Kind.Network() {
			out.Counts = append(out.Counts, c)
		}
	}
	return out
}

// Total is the scenario's number of faults.
func (s Scenario) Total() int {
	n := 0
	for _, c := range s.Counts {
		n += c.N
	}
	return n
}

// All is the name that selects every scenario of the catalogue.
const All = "all"

// catalogue: one scenario per kind, and mixed with every kind.
var catalogue = []Scenario{
	{Name: string(LeaderKill), Counts: []Count{{LeaderKill, 10}}},
	{Name: string(FollowerKill), Counts: []Count{{FollowerKill, 8}}},
	{Name: string(LeaderPause), Counts: []Count{{LeaderPause, 8}}},
	{Name: string(AgentKill), Counts: []Count{{AgentKill, 8}}},
	{Name: string(WorkerKill), Counts: []Count{{WorkerKill, 10}}},
	{Name: string(ColdRestart), Counts: []Count{{ColdRestart, 4}}},
	{Name: string(AgentRestart), Counts: []Count{{AgentRestart, 8}}},
	{Name: string(IsolateLeader), Counts: []Count{{IsolateLeader, 6}}},
	{Name: string(Split21), Counts: []Count{{Split21, 6}}},
	{Name: string(Split111), Counts: []Count{{Split111, 4}}},
	{Name: string(Bridge), Counts: []Count{{Bridge, 4}}},
	{Name: string(Loss), Counts: []Count{{Loss, 4}}},
	{Name: string(Latency), Counts: []Count{{Latency, 4}}},
	{Name: "mixed", Counts: []Count{{LeaderKill, 2}, {FollowerKill, 2}, {LeaderPause, 2}, {AgentKill, 2}, {WorkerKill, 2},
		{ColdRestart, 1}, {AgentRestart, 2}, {IsolateLeader, 1}, {Split21, 1}, {Split111, 1}, {Bridge, 1}, {Loss, 1}, {Latency, 1}}},
	{Name: string(RackLoss), Counts: []Count{{RackLoss, 4}, {RackPartition, 2}}, Racks: 3},
}

// Catalogue returns a copy of every scenario, in order.
func Catalogue() []Scenario {
	out := make([]Scenario, len(catalogue))
	for i, s := range catalogue {
		out[i] = Scenario{Name: s.Name, Counts: slices.Clone(s.Counts), Racks: s.Racks}
	}
	return out
}

// Names lists the scenario names, then All.
func Names() []string {
	var out []string
	for _, s := range catalogue {
		out = append(out, s.Name)
	}
	return append(out, All)
}

// Lookup returns the scenarios a name selects: one, or every one for All.
func Lookup(name string) ([]Scenario, error) {
	if name == All {
		return Catalogue(), nil
	}
	for _, s := range Catalogue() {
		if s.Name == name {
			return []Scenario{s}, nil
		}
	}
	return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownScenario, name, strings.Join(Names(), ", "))
}

// Generate returns the schedule of scenario sc under seed: its faults in
// a seeded random order, one after another, each beginning a random gap
// after the previous one ended, so that no two faults overlap. The
// random stream is PCG seeded with (seed, a hash of the scenario name):
// the same seed gives different scenarios independent schedules.
func Generate(seed uint64, sc Scenario, opts Options) ([]Fault, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var kinds []Kind
	for _, c := range sc.Counts {
		if c.N < 0 || !slices.Contains(Kinds, c.Kind) {
			return nil, fmt.Errorf("%w: scenario %q count %+v", ErrInvalid, sc.Name, c)
		}
		if c.N > 0 && c.Kind.Rack() && sc.Racks < 2 {
			return nil, fmt.Errorf("%w: scenario %q has %s faults but %d racks (at least 2)", ErrInvalid, sc.Name, c.Kind, sc.Racks)
		}
		for range c.N {
			kinds = append(kinds, c.Kind)
		}
	}
	h := fnv.New64a()
	h.Write([]byte(sc.Name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })

	// around returns a duration uniform in [d/2, 3d/2).
	around := func(d time.Duration) time.Duration {
		return d/2 + time.Duration(rng.Int64N(int64(d)))
	}
	faults := make([]Fault, len(kinds))
	var t time.Duration
	for i, k := range kinds {
		t += around(opts.Gap)
		f := Fault{Seq: i, Kind: k, At: t, Pick: rng.Uint32()}
		switch k {
		case LeaderKill, FollowerKill, ColdRestart:
			f.Down = around(opts.ServerDown)
		case LeaderPause:
			f.Down = 2*opts.ElectionTimeout + time.Duration(rng.Int64N(int64(opts.ElectionTimeout)))
		case AgentKill, RackLoss:
			f.Down = around(opts.AgentDown)
		case AgentRestart:
			f.Down = opts.AgentRestartDown
		case WorkerKill:
		default: // network faults
			f.Down = around(opts.NetDown)
		}
		faults[i] = f
		t = f.End()
	}
	return faults, nil
}
