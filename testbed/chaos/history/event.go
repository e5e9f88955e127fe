package history

import (
	"fmt"
	"time"
)

// Kind says what an event records.
type Kind string

// The event kinds. The table in docs/reliability.md says who records each
// one and when; Validate enforces which fields each carries.
const (
	// ProcStart: the harness started a server or agent process (Role, ID,
	// PID, Inc; Fault and FSeq when the start is part of a fault, such as
	// a restart). T is read before the process is started.
	ProcStart Kind = "proc_start"
	// ProcExit: the harness reaped a server or agent process (Role, ID,
	// PID, Inc; Exit, or Sig when a signal ended it).
	ProcExit Kind = "proc_exit"
	// Signal: the harness is about to send Sig to a process (Role, ID,
	// PID, Inc; Fault and FSeq name the fault it belongs to, if any).
	Signal Kind = "signal"
	// WorkerStart: an agent started a worker (Node, PID, Job, Inc, Rank,
	// GPUs). T must be read before the process is started.
	WorkerStart Kind = "worker_start"
	// WorkerStop: a recorder observed a worker gone (Node, PID, Job, Inc;
	// Exit or Sig if known). T must be read after the process is gone
	// (reaped by its agent, or no longer present for the harness).
	WorkerStop Kind = "worker_stop"
	// Commit: a server applied a committed allocation (Gen, Term, Index,
	// Alloc, Leader if known).
	Commit Kind = "commit"
	// Submit: the API acknowledged a job submission (Job); recorded by
	// the client after the acknowledgement arrived.
	Submit Kind = "submit"
	// Complete: a server applied the job's completion (Job, Index, Inc).
	Complete Kind = "complete"
	// Report: a job's owner accepted a worker report (Job; Inc, the
	// worker's incarnation; Into, the job's incarnation the owner
	// accepted it into; Rank).
	Report Kind = "report"
)

// Role is the part a process plays in the cluster.
type Role string

// The roles.
const (
	Server Role = "server"
	Agent  Role = "agent"
	Worker Role = "worker"
)

// Event is one line of the history. Fields a kind does not use stay zero
// (and are omitted from the encoding).
type Event struct {
	// T is the time since the shared epoch on CLOCK_MONOTONIC.
	T time.Duration `json:"t"`
	// Kind is what happened.
	Kind Kind `json:"kind"`
	// Src names the recorder: "harness", "server/<id>", "agent/<id>".
	Src string `json:"src"`

	// Role, ID, PID and Inc identify a process: its role, its cluster id
	// (server or agent id; the job id for a worker), its OS pid, and its
	// incarnation (the n-th start of that role and id, from 1; for a
	// worker, the job's incarnation).
	Role Role   `json:"role,omitempty"`
	ID   string `json:"id,omitempty"`
	PID  int    `json:"pid,omitempty"`
	Inc  uint64 `json:"inc,omitempty"`
	// Exit is an exit status; Sig a signal name without "SIG" (KILL,
	// STOP, CONT, TERM).
	Exit int    `json:"exit,omitempty"`
	Sig  string `json:"sig,omitempty"`

	// Job, Node, Rank and GPUs describe a worker or the job an event is
	// about; GPUs are indexes on Node.
	Job  string `json:"job,omitempty"`
	Node string `json:"node,omitempty"`
	Rank int    `json:"rank,omitempty"`
	GPUs []int  `json:"gpus,omitempty"`
	// Into is the job incarnation a report was accepted into.
	Into uint64 `json:"into,omitempty"`

	// Gen, Term and Index are an allocation's generation, the Raft term
	// it was decided in and the Raft log index it was committed at (for a
	// completion, the index of the completion). Alloc is a digest of the
	// allocation's content (see Digest); Leader the leader's id if known.
	Gen    uint64 `json:"gen,omitempty"`
	Term   uint64 `json:"term,omitempty"`
	Index  uint64 `json:"index,omitempty"`
	Alloc  string `json:"alloc,omitempty"`
	Leader string `json:"leader,omitempty"`

	// Fault is the kind of the scheduled fault this event is part of and
	// FSeq its position in the schedule.
	Fault string `json:"fault,omitempty"`
	FSeq  int    `json:"fseq,omitempty"`
}

// field bits, for the per-kind required and allowed sets.
type field uint32

const (
	fRole field = 1 << iota
	fID
	fPID
	fInc
	fExit
	fSig
	fJob
	fNode
	fRank
	fGPUs
	fInto
	fGen
	fTerm
	fIndex
	fAlloc
	fLeader
	fFault
	fFSeq
)

var fieldNames = []string{"role", "id", "pid", "inc", "exit", "sig", "job", "node", "rank", "gpus", "into", "gen", "term", "index", "alloc", "leader", "fault", "fseq"}

// set returns the fields of e that are not zero.
func (e *Event) set() field {
	var f field
	flag := func(b field, nonzero bool) {
		if nonzero {
			f |= b
		}
	}
	flag(fRole, e.Role != "")
	flag(fID, e.ID != "")
	flag(fPID, e.PID != 0)
	flag(fInc, e.Inc != 0)
	flag(fExit, e.Exit != 0)
	flag(fSig, e.Sig != "")
	flag(fJob, e.Job != "")
	flag(fNode, e.Node != "")
	flag(fRank, e.Rank != 0)
	flag(fGPUs, len(e.GPUs) != 0)
	flag(fInto, e.Into != 0)
	flag(fGen, e.Gen != 0)
	flag(fTerm, e.Term != 0)
	flag(fIndex, e.Index != 0)
	flag(fAlloc, e.Alloc != "")
	flag(fLeader, e.Leader != "")
	flag(fFault, e.Fault != "")
	flag(fFSeq, e.FSeq != 0)
	return f
}

// shape is what a kind requires and what it may carry besides.
type shape struct{ required, optional field }

var shapes = map[Kind]shape{
	ProcStart:   {fRole | fID | fPID | fInc, fFault | fFSeq},
	ProcExit:    {fRole | fID | fPID | fInc, fExit | fSig | fFault | fFSeq},
	Signal:      {fRole | fID | fPID | fInc | fSig, fFault | fFSeq},
	WorkerStart: {fNode | fPID | fJob | fInc | fGPUs, fRank},
	WorkerStop:  {fNode | fPID | fJob | fInc, fRank | fExit | fSig},
	Commit:      {fGen | fTerm | fIndex | fAlloc, fLeader},
	Submit:      {fJob, 0},
	Complete:    {fJob | fIndex, fInc},
	Report:      {fJob | fInc | fInto, fRank},
}

// signals are the signal names an event may carry.
var signals = map[string]bool{"KILL": true, "STOP": true, "CONT": true, "TERM": true, "INT": true, "HUP": true, "QUIT": true, "ABRT": true, "SEGV": true, "PIPE": true}

// MaxName is the longest id, job, node, source, digest or fault name.
const MaxName = 128

// MaxGPUs bounds a worker's GPU list and its GPU indexes.
const MaxGPUs = 1024

// Validate reports whether e is a well-formed event of its kind: every
// field the kind requires is set, no field it does not use is, and every
// value is in range.
func (e *Event) Validate() error {
	sh, ok := shapes[e.Kind]
	if !ok {
		return fmt.Errorf("%w: unknown kind %q", ErrMalformed, e.Kind)
	}
	if e.T < 0 {
		return fmt.Errorf("%w: negative time %d", ErrMalformed, e.T)
	}
	if err := checkName("src", e.Src, true); err != nil {
		return err
	}
	got := e.set()
	if missing := sh.required &^ got; missing != 0 {
		return fmt.Errorf("%w: %s event without %s", ErrMalformed, e.Kind, names(missing))
	}
	if extra := got &^ (sh.required | sh.optional); extra != 0 {
		return fmt.Errorf("%w: %s event with %s", ErrMalformed, e.Kind, names(extra))
	}
	if e.Role != "" && e.Role != Server && e.Role != Agent && e.Role != Worker {
		return fmt.Errorf("%w: unknown role %q", ErrMalformed, e.Role)
	}
	if (e.Kind == ProcStart || e.Kind == ProcExit) && e.Role == Worker {
		return fmt.Errorf("%w: %s of a worker (use %s/%s)", ErrMalformed, e.Kind, WorkerStart, WorkerStop)
	}
	if e.PID < 0 || e.Rank < 0 || e.FSeq < 0 {
		return fmt.Errorf("%w: negative pid, rank or fseq", ErrMalformed)
	}
	if e.Sig != "" && !signals[e.Sig] {
		return fmt.Errorf("%w: unknown signal %q", ErrMalformed, e.Sig)
	}
	if e.FSeq != 0 && e.Fault == "" {
		return fmt.Errorf("%w: fseq without fault", ErrMalformed)
	}
	for _, s := range []struct{ name, v string }{{"id", e.ID}, {"job", e.Job}, {"node", e.Node}, {"alloc", e.Alloc}, {"leader", e.Leader}, {"fault", e.Fault}} {
		if err := checkName(s.name, s.v, false); err != nil {
			return err
		}
	}
	if len(e.GPUs) > MaxGPUs {
		return fmt.Errorf("%w: %d gpus (at most %d)", ErrMalformed, len(e.GPUs), MaxGPUs)
	}
	for i, g := range e.GPUs {
		if g < 0 || g >= MaxGPUs {
			return fmt.Errorf("%w: gpu index %d out of [0, %d)", ErrMalformed, g, MaxGPUs)
		}
		for _, h := range e.GPUs[:i] {
			if g == h {
				return fmt.Errorf("%w: gpu %d listed twice", ErrMalformed, g)
			}
		}
	}
	return nil
}

// checkName accepts printable ASCII without spaces, at most MaxName bytes.
func checkName(what, s string, required bool) error {
	if s == "" {
		if required {
			return fmt.Errorf("%w: empty %s", ErrMalformed, what)
		}
		return nil
	}
	if len(s) > MaxName {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrMalformed, what, MaxName)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: %s %q has a byte outside printable ASCII", ErrMalformed, what, s)
		}
	}
	return nil
}

func names(f field) string {
	out := ""
	for i, n := range fieldNames {
		if f&(1<<i) != 0 {
			if out != "" {
				out += ", "
			}
			out += n
		}
	}
	return out
}
