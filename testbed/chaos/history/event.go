package history

import "fmt"

// EvKind says what a harness event records.
type EvKind string

// The event kinds. Times follow the action: a start is stamped before the
// process is started, an exit or a worker gone after the harness saw it,
// a signal before it is sent, a fault's begin before its first action and
// its end after its last.
const (
	// RunBegin opens the history: Scenario, Seed and Planned, the faults
	// scheduled (each must be injected: a fault_begin and a fault_end).
	RunBegin EvKind = "run_begin"
	// RunEnd closes it; a history without it is truncated.
	RunEnd EvKind = "run_end"
	// ProcStart: the harness started a server or agent (Role, ID, PID,
	// Inc: the n-th start of that member, from 1; Fault and Seq when the
	// start is part of a fault).
	ProcStart EvKind = "proc_start"
	// ProcExit: the harness reaped a server or agent (Role, ID, PID, Inc;
	// Sig if a signal ended it, else Exit).
	ProcExit EvKind = "proc_exit"
	// Signal: the harness sends Sig to a process (Role, ID, PID, Inc; for
	// a worker Role is worker, ID its job, with Node and Rank; Fault and
	// Seq when part of a fault).
	Signal EvKind = "signal"
	// WorkerGone: the harness saw a worker's process gone, or a zombie
	// (Node, Job, Inc, Rank, PID). Workers write their own records
	// (package record); this closes the life of one that wrote no exit.
	// Alive is the last time the harness saw it alive (0: unknown): it
	// ended between Alive and the event's time.
	WorkerGone EvKind = "worker_gone"
	// FaultBegin: the harness begins injecting fault Seq of kind Fault on
	// Targets (member ids); Leader is the leader it saw before, Deposes
	// says the fault takes that leader away (kill, pause, isolation from
	// the majority), which is when a failover is measured.
	FaultBegin EvKind = "fault_begin"
	// FaultEnd: the fault's victims are back (restarted, resumed, healed).
	FaultEnd EvKind = "fault_end"
	// Net: the harness changed the network (Detail says how; Fault, Seq).
	Net EvKind = "net"
	// Disk: the harness filled or freed a server's disk (Detail, Targets;
	// Fault, Seq).
	Disk EvKind = "disk"
)

// Role is the part a process plays.
type Role string

// The roles.
const (
	Server Role = "server"
	Agent  Role = "agent"
	Worker Role = "worker"
)

// Planned is one scheduled fault, as the run announces it.
type Planned struct {
	Seq   int    `json:"seq"`
	Fault string `json:"fault"`
}

// Event is one thing the harness did or saw. Fields a kind does not use
// stay zero.
type Event struct {
	Kind EvKind `json:"kind"`
	// Role, ID, PID and Inc identify a process (for a worker: ID is its
	// job, Node its node, Rank its rank, Inc the job's incarnation).
	Role Role   `json:"role,omitempty"`
	ID   string `json:"id,omitempty"`
	PID  int    `json:"pid,omitempty"`
	Inc  uint64 `json:"inc,omitempty"`
	// Exit is an exit status; Sig a signal name without "SIG".
	Exit int    `json:"exit,omitempty"`
	Sig  string `json:"sig,omitempty"`
	Node string `json:"node,omitempty"`
	Job  string `json:"job,omitempty"`
	Rank int    `json:"rank,omitempty"`
	// Alive is when the harness last saw a gone worker alive (its clock,
	// as the event's time).
	Alive int64 `json:"alive,omitempty"`
	// Fault is the kind of the fault an event is part of and Seq its
	// position in the schedule (meaningful when Fault is set).
	Fault   string   `json:"fault,omitempty"`
	Seq     int      `json:"seq,omitempty"`
	Targets []string `json:"targets,omitempty"`
	Leader  string   `json:"leader,omitempty"`
	Deposes bool     `json:"deposes,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	// Scenario, Seed and Planned describe the run (run_begin).
	Scenario string    `json:"scenario,omitempty"`
	Seed     uint64    `json:"seed,omitempty"`
	Planned  []Planned `json:"planned,omitempty"`
}

// signals are the signal names an event may carry.
var signals = map[string]bool{"KILL": true, "STOP": true, "CONT": true, "TERM": true, "INT": true, "HUP": true,
	"QUIT": true, "ABRT": true, "SEGV": true, "PIPE": true, "BUS": true, "ILL": true, "FPE": true, "TRAP": true, "SYS": true}

// Validate reports whether e is a well-formed event of its kind.
func (e *Event) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s event: %s", ErrMalformed, e.Kind, fmt.Sprintf(format, a...))
	}
	proc := e.Kind == ProcStart || e.Kind == ProcExit || e.Kind == Signal
	worker := e.Kind == WorkerGone || (e.Kind == Signal && e.Role == Worker)
	faulty := e.Kind == FaultBegin || e.Kind == FaultEnd || e.Kind == Net || e.Kind == Disk
	switch e.Kind {
	case RunBegin, RunEnd, ProcStart, ProcExit, Signal, WorkerGone, FaultBegin, FaultEnd, Net, Disk:
	default:
		return fmt.Errorf("%w: unknown event kind %q", ErrMalformed, e.Kind)
	}
	for _, s := range []struct {
		what, v string
	}{{"id", e.ID}, {"node", e.Node}, {"job", e.Job}, {"fault", e.Fault}, {"leader", e.Leader}, {"scenario", e.Scenario}} {
		if err := checkName(s.what, s.v, false); err != nil {
			return bad("%v", err)
		}
	}
	for _, t := range e.Targets {
		if err := checkName("target", t, true); err != nil {
			return bad("%v", err)
		}
	}
	switch {
	case e.Kind != WorkerGone && e.Alive != 0:
		return bad("alive belongs to worker_gone")
	case e.PID < 0 || e.Rank < 0 || e.Seq < 0 || e.Alive < 0 || len(e.Detail) > 4096 || len(e.Targets) > 1024 || len(e.Planned) > 1<<16:
		return bad("negative pid, rank or seq, or an over-long detail or list")
	case proc && (e.Role == "" || e.PID == 0 || e.Inc == 0 || e.ID == ""):
		return bad("a process event needs role, id, pid and inc")
	case proc && e.Role != Server && e.Role != Agent && !(e.Kind == Signal && e.Role == Worker):
		return bad("role %q", e.Role)
	case !proc && (e.Role != "" || e.ID != ""):
		return bad("role and id belong to process events")
	case e.Kind == WorkerGone && (e.PID == 0 || e.Inc == 0 || e.Node == "" || e.Job == ""):
		return bad("a worker event needs node, job, inc and pid")
	case !worker && (e.Node != "" || e.Job != "" || e.Rank != 0):
		return bad("node, job and rank belong to worker events")
	case worker && e.Kind == Signal && (e.Node == "" || e.Job != ""):
		return bad("a worker signal names the job as id, with node and rank")
	case !proc && !worker && (e.PID != 0 || e.Inc != 0):
		return bad("pid and inc belong to process events")
	case e.Kind != Signal && e.Kind != ProcExit && e.Sig != "":
		return bad("sig belongs to signals and exits")
	case e.Kind == Signal && e.Sig == "":
		return bad("a signal without sig")
	case e.Sig != "" && !signals[e.Sig]:
		return bad("unknown signal %q", e.Sig)
	case e.Kind != ProcExit && e.Exit != 0:
		return bad("exit belongs to exits")
	case faulty && e.Fault == "":
		return bad("no fault")
	case !faulty && e.Kind != ProcStart && e.Kind != Signal && (e.Fault != "" || e.Seq != 0):
		return bad("fault and seq belong to fault events, starts and signals")
	case e.Fault == "" && e.Seq != 0:
		return bad("seq without fault")
	case e.Kind != FaultBegin && e.Kind != Disk && len(e.Targets) != 0:
		return bad("targets belong to fault begins and disk events")
	case e.Kind != FaultBegin && (e.Leader != "" || e.Deposes):
		return bad("leader and deposes belong to fault begins")
	case e.Kind != Net && e.Kind != Disk && e.Detail != "":
		return bad("detail belongs to net and disk events")
	case (e.Kind == Net || e.Kind == Disk) && e.Detail == "":
		return bad("no detail")
	case e.Kind != RunBegin && (e.Scenario != "" || e.Seed != 0 || e.Planned != nil):
		return bad("scenario, seed and planned belong to run_begin")
	case e.Kind == RunBegin && e.Scenario == "":
		return bad("no scenario")
	}
	seqs := map[int]bool{}
	for _, p := range e.Planned {
		if err := checkName("planned fault", p.Fault, true); err != nil || p.Seq < 0 || seqs[p.Seq] {
			return bad("planned fault %+v", p)
		}
		seqs[p.Seq] = true
	}
	return nil
}
