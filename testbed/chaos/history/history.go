package history

import (
	"errors"
	"fmt"
	"math"
)

// Sentinel errors; every error of this package wraps one of them.
var (
	// ErrMalformed is a line that is not a valid history line.
	ErrMalformed = errors.New("history: malformed")
	// ErrIO is a history that could not be written or read.
	ErrIO = errors.New("history: i/o")
)

// MaxLine bounds one encoded line (a list of jobs can be long).
const MaxLine = 1 << 20

// Line is one line of the history: exactly one of Op and Ev is set.
type Line struct {
	// T is CLOCK_MONOTONIC in nanoseconds.
	T  int64  `json:"t"`
	Op *Op    `json:"op,omitempty"`
	Ev *Event `json:"ev,omitempty"`
}

// Type is an operation line's place in its operation's life.
type Type string

// The types: an invoke, then exactly one of the others.
const (
	Invoke Type = "invoke"
	// OK: the operation happened, with the answer recorded.
	OK Type = "ok"
	// Fail: the operation definitely did not happen (a 4xx refusal, or
	// 507: the leader's disk is full and it refused the write before
	// logging it).
	Fail Type = "fail"
	// Info: unknown whether it happened (timeout, broken connection, a
	// 5xx that may follow a commit).
	Info Type = "info"
)

// F is what an operation does.
type F string

// The operations.
const (
	// Submit posts a job spec (Job). OK is 201 (created, or a retry with
	// the idempotency key of the submission that created it); 409
	// (exists) is OK only in histories of clients that sent no key.
	Submit F = "submit"
	// Cancel cancels a job (Job).
	Cancel F = "cancel"
	// Jobs lists every job (OK: Jobs, Stale).
	Jobs F = "jobs"
	// GetJob reads one job (Job): OK is 200 (Jobs holds it) or 404 (Jobs
	// is empty: no such job), with Stale.
	GetJob F = "job"
	// Status reads the cluster status (OK: Status, Stale).
	Status F = "status"
)

// Op is one step of an operation.
type Op struct {
	Type Type `json:"type"`
	// ID pairs an invoke with its completion (> 0); Client is the
	// logical client that issued it (>= 0; one operation at a time each).
	ID     uint64 `json:"id"`
	Client int    `json:"client"`
	F      F      `json:"f"`
	// Server is the server the request went to (invoke).
	Server string `json:"server,omitempty"`
	// Job is the job of a submit or cancel (invoke and completion).
	Job string `json:"job,omitempty"`
	// Key is the idempotency key of a submit or cancel (invoke; "":
	// none): its retries carry the same.
	Key string `json:"key,omitempty"`
	// Code is the HTTP status of an answer; Error its error text, or the
	// transport error (completions).
	Code  int    `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	// Stale says the answer of a read came from a follower's local copy,
	// which is not linearizable.
	Stale bool `json:"stale,omitempty"`
	// Jobs is the answer of a jobs read; Status of a status read.
	Jobs   []Job       `json:"jobs,omitempty"`
	Status *StatusView `json:"status,omitempty"`
	// Inc is, for an ok cancel, the incarnation the API says the cancel
	// took effect in (absent if it did not say).
	Inc *uint64 `json:"inc,omitempty"`
}

// Job is one job as an API read showed it.
type Job struct {
	ID       string  `json:"id"`
	State    string  `json:"state"`
	Inc      uint64  `json:"inc"`
	Epoch    int     `json:"epoch"`
	Progress float64 `json:"progress"`
	Reason   string  `json:"reason,omitempty"`
	// GPUs the job holds (0 when it waits or has finished).
	GPUs int `json:"gpus,omitempty"`
}

// The job states an API read may show.
var jobStates = map[string]bool{"pending": true, "running": true, "rescaling": true, "completed": true, "failed": true, "cancelled": true}

// StatusView is a status read's answer.
type StatusView struct {
	Leader     string `json:"leader,omitempty"`
	Serving    string `json:"serving"`
	Term       uint64 `json:"term"`
	Generation uint64 `json:"generation"`
}

// Validate reports whether l is a well-formed line.
func (l *Line) Validate() error {
	if l.T <= 0 {
		return fmt.Errorf("%w: time %d is not positive", ErrMalformed, l.T)
	}
	switch {
	case (l.Op == nil) == (l.Ev == nil):
		return fmt.Errorf("%w: a line holds exactly one of op and ev", ErrMalformed)
	case l.Op != nil:
		return l.Op.Validate()
	default:
		return l.Ev.Validate()
	}
}

// Validate reports whether o is a well-formed operation step.
func (o *Op) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s %s: %s", ErrMalformed, o.F, o.Type, fmt.Sprintf(format, a...))
	}
	switch o.F {
	case Submit, Cancel, Jobs, GetJob, Status:
	default:
		return fmt.Errorf("%w: unknown operation %q", ErrMalformed, o.F)
	}
	switch o.Type {
	case Invoke, OK, Fail, Info:
	default:
		return fmt.Errorf("%w: unknown type %q", ErrMalformed, o.Type)
	}
	if o.ID == 0 || o.Client < 0 || o.Client > 1<<20 {
		return bad("id %d, client %d", o.ID, o.Client)
	}
	if err := checkName("server", o.Server, o.Type == Invoke); err != nil {
		return bad("%v", err)
	}
	if o.Type != Invoke && o.Server != "" {
		return bad("server belongs to the invoke")
	}
	hasJob := o.F == Submit || o.F == Cancel || o.F == GetJob
	if err := checkName("job", o.Job, hasJob); err != nil {
		return bad("%v", err)
	}
	if !hasJob && o.Job != "" {
		return bad("a %s names no job", o.F)
	}
	if o.Type == Invoke && (o.Code != 0 || o.Error != "") {
		return bad("an invoke has no answer")
	}
	if o.Code < 0 || o.Code > 999 || len(o.Error) > 4096 {
		return bad("code %d, error of %d bytes", o.Code, len(o.Error))
	}
	if o.Type == OK && (o.Code < 200 || o.Code >= 300) && !(o.F == Submit && o.Code == 409) && !(o.F == GetJob && o.Code == 404) {
		return bad("ok with status %d", o.Code)
	}
	if o.Type == Fail && (o.Code < 400 || o.Code >= 500) && o.Code != 507 {
		return bad("a definite failure is a 4xx or 507 answer, not %d", o.Code)
	}
	read := o.Type == OK && (o.F == Jobs || o.F == GetJob || o.F == Status)
	if !read && (o.Stale || o.Jobs != nil || o.Status != nil) {
		return bad("only an ok read carries an answer")
	}
	if read && o.F == Status && o.Status == nil {
		return bad("no status")
	}
	if o.F != Status && o.Status != nil || o.F != Jobs && o.F != GetJob && o.Jobs != nil {
		return bad("answer of another operation")
	}
	if o.Inc != nil && !(o.Type == OK && o.F == Cancel) {
		return bad("only an ok cancel carries an incarnation")
	}
	if read && o.F == GetJob {
		found := o.Code != 404
		if found != (len(o.Jobs) == 1) || found && o.Jobs[0].ID != o.Job {
			return bad("a job read answered %d shows %d jobs (want exactly job %s when found, none when not)", o.Code, len(o.Jobs), o.Job)
		}
	}
	if s := o.Status; s != nil {
		if err := checkName("serving", s.Serving, true); err != nil {
			return bad("%v", err)
		}
		if err := checkName("leader", s.Leader, false); err != nil {
			return bad("%v", err)
		}
	}
	seen := map[string]bool{}
	for _, j := range o.Jobs {
		if err := checkName("job", j.ID, true); err != nil {
			return bad("%v", err)
		}
		if seen[j.ID] {
			return bad("job %s listed twice", j.ID)
		}
		seen[j.ID] = true
		if !jobStates[j.State] {
			return bad("job %s in unknown state %q", j.ID, j.State)
		}
		if j.Epoch < 0 || j.GPUs < 0 || !(j.Progress >= 0) || math.IsInf(j.Progress, 0) || len(j.Reason) > 4096 {
			return bad("job %s: epoch %d, progress %v, %d GPUs, reason of %d bytes", j.ID, j.Epoch, j.Progress, j.GPUs, len(j.Reason))
		}
	}
	return nil
}

// checkName accepts printable ASCII without spaces, at most MaxName bytes.
func checkName(what, s string, required bool) error {
	if s == "" {
		if required {
			return fmt.Errorf("empty %s", what)
		}
		return nil
	}
	if len(s) > MaxName {
		return fmt.Errorf("%s longer than %d bytes", what, MaxName)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%s %q has a byte outside printable ASCII", what, s)
		}
	}
	return nil
}

// MaxName bounds ids, jobs, nodes and fault names.
const MaxName = 128
