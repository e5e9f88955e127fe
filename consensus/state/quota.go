package state

import (
	"fmt"
	"maps"
	"slices"
)

// Quota bounds what one submitter (an API token) may hold or do. A zero
// field is not a bound of zero: it takes the cluster's default for that
// field (Quotas.Default), and a zero default the built-in one
// (DefaultQuota).
type Quota struct {
	// Jobs bounds the submitter's running plus pending jobs.
	Jobs int
	// SpecBytes bounds the bytes of the specs of the submitter's jobs
	// the state holds, finished ones included until they are pruned
	// (SpecSize of each).
	SpecBytes int64
	// Rate and Burst are the submitter's token bucket: Rate submissions
	// per second on average, Burst at once, over the whole cluster. The
	// leader keeps the buckets, where every submission passes (they are
	// not replicated: a new leader starts them full); a retry of a
	// submission that committed (State.Replays) takes no token.
	Rate  float64
	Burst int
}

// DefaultQuota is the built-in quota of every submitter: what a lab's
// users can live with (a sweep of a few hundred jobs, specs of a few KiB
// each, a submission script) and what keeps one token from filling the
// state (a few specs of the largest size).
var DefaultQuota = Quota{Jobs: 256, SpecBytes: 16 << 20, Rate: 5, Burst: 50}

// DefaultStateBudget is the built-in budget of the state: the bytes of
// job specs it holds, all submitters together.
const DefaultStateBudget = 256 << 20

// Upper bounds of quotas and of the state budget (what a snapshot can
// hold, and rates no server reaches).
const (
	MaxQuotaRate   = 10000
	MaxQuotaBurst  = 100000
	MaxStateBudget = MaxSnapshot / 2
)

func (q Quota) validate() error {
	switch {
	case q.Jobs < 0 || q.Jobs > MaxJobs:
		return invalid("quota of %d jobs (want 0 for the default, or 1..%d)", q.Jobs, MaxJobs)
	case q.SpecBytes < 0 || q.SpecBytes > MaxStateBudget:
		return invalid("quota of %d spec bytes (want 0 for the default, or 1..%d)", q.SpecBytes, MaxStateBudget)
	case !finite(q.Rate) || q.Rate < 0 || q.Rate > MaxQuotaRate:
		return invalid("quota of %v submissions per second (want 0 for the default, or up to %d)", q.Rate, MaxQuotaRate)
	case q.Burst < 0 || q.Burst > MaxQuotaBurst:
		return invalid("quota burst of %d submissions (want 0 for the default, or 1..%d)", q.Burst, MaxQuotaBurst)
	}
	return nil
}

// or fills q's zero fields from d.
func (q Quota) or(d Quota) Quota {
	if q.Jobs == 0 {
		q.Jobs = d.Jobs
	}
	if q.SpecBytes == 0 {
		q.SpecBytes = d.SpecBytes
	}
	if q.Rate == 0 {
		q.Rate = d.Rate
	}
	if q.Burst == 0 {
		q.Burst = d.Burst
	}
	return q
}

// Quotas are the cluster's quotas: its defaults, its state budget and
// the quotas admins set for single submitters. The zero value has the
// built-in defaults and no submitter's quota.
type Quotas struct {
	// Default overrides DefaultQuota field by field (zero: built in).
	Default Quota
	// Budget is the state budget in bytes of job specs (0:
	// DefaultStateBudget).
	Budget int64
	// tokens are the quotas set per submitter (token accessor), each
	// overriding the defaults field by field.
	tokens map[string]Quota
}

// Of is the quota of the submitter with accessor: its own, else the
// cluster's defaults, else the built-in ones, field by field.
func (q *Quotas) Of(accessor string) Quota {
	return q.tokens[accessor].or(q.Default).or(DefaultQuota)
}

// Set is the quota an admin set for accessor, if any.
func (q *Quotas) Set(accessor string) (Quota, bool) {
	v, ok := q.tokens[accessor]
	return v, ok
}

// Accessors are the submitters with a quota of their own, sorted.
func (q *Quotas) Accessors() []string { return slices.Sorted(maps.Keys(q.tokens)) }

// StateBudget is the cluster's state budget in bytes of job specs.
func (q *Quotas) StateBudget() int64 {
	if q.Budget == 0 {
		return DefaultStateBudget
	}
	return q.Budget
}

func (q *Quotas) clone() Quotas {
	c := *q
	c.tokens = maps.Clone(q.tokens)
	return c
}

// Usage is what one submitter holds: its running plus pending jobs and
// the bytes of the specs of all its jobs in the state.
type Usage struct {
	Jobs      int
	SpecBytes int64
}

// UsageOf is what the submitter with accessor holds.
func (s *State) UsageOf(accessor string) Usage { return survey(s, accessor, "").usage }

// SpecBytes is the bytes of the specs of every job the state holds, what
// the state budget bounds.
func (s *State) SpecBytes() int64 { return survey(s, "", "").total }

// SpecSize is what a job's spec counts against its submitter's quota and
// the state budget: the bytes of its encoding in the state.
func SpecSize(sp *JobSpec) int64 {
	w := &writer{}
	encodeJobSpec(w, sp)
	return int64(len(w.b))
}

// encodeJobSpec writes a spec as a snapshot holds it (version 9).
func encodeJobSpec(w *writer, sp *JobSpec) {
	encodeSpec(w, sp)
	encodeSpecAttrs(w, sp)
	w.int(sp.Epochs)
	w.str(sp.ResumeFrom)
}

// checkQuota refuses a submission of spec bytes by accessor (its token
// named name) beyond its quota (ErrQuota) or beyond the state budget
// (ErrStateFull), given what survey found; an empty accessor (a server's
// own submission, a cluster run --insecure) has no quota but counts
// against the budget.
func checkQuota(s *State, accessor, name string, bytes int64, sv surveyed) error {
	if accessor != "" {
		q, u := s.Quotas.Of(accessor), sv.usage
		if u.Jobs+1 > q.Jobs {
			return fmtErr(ErrQuota, "token %s (%s) holds %d running or pending jobs, its quota (pollux acl quota)", accessor, name, u.Jobs)
		}
		if u.SpecBytes+bytes > q.SpecBytes {
			return fmtErr(ErrQuota, "token %s (%s) holds %d bytes of job specs; this one of %d would pass its quota of %d (pollux acl quota; finished jobs count until they are pruned)",
				accessor, name, u.SpecBytes, bytes, q.SpecBytes)
		}
	}
	if budget, ev := s.Quotas.StateBudget(), s.Events.Bytes(); sv.total+ev+bytes > budget {
		return fmtErr(ErrStateFull, "the cluster's state holds %d bytes of job specs and %d of events; this one of %d would pass its budget of %d (pollux acl quota set default --state-budget; finished jobs count until they are pruned)",
			sv.total, ev, bytes, budget)
	}
	return nil
}

// SetQuota sets the quota of one submitter (Accessor, a token's) or, with
// an empty Accessor, the cluster's defaults and its state budget. The
// quota replaces what was set before; a zero Quota for a submitter
// removes its own (it has the defaults again). By is the accessor of the
// admin token that asks (empty: a server itself).
type SetQuota struct {
	Accessor string
	Quota    Quota
	// Budget is the state budget in bytes (0: the built-in one); only
	// with an empty Accessor.
	Budget int64
	By     string
}

func (c *SetQuota) kind() byte { return typeSetQuota }
func (c *SetQuota) encode(w *writer) {
	w.str(c.Accessor)
	encodeSubmitterQuota(w, c.Quota)
	w.uvarint(uint64(c.Budget))
	w.str(c.By)
}
func (c *SetQuota) decode(r *reader) {
	c.Accessor = r.str()
	c.Quota = decodeSubmitterQuota(r)
	c.Budget = decodeBytes(r)
	c.By = r.str()
}

func (c *SetQuota) validate() error {
	if c.Accessor != "" {
		if err := checkID("token accessor", c.Accessor); err != nil {
			return err
		}
		if c.Budget != 0 {
			return invalid("a state budget is the cluster's, not token %s's", c.Accessor)
		}
	}
	if c.Budget < 0 || c.Budget > MaxStateBudget {
		return invalid("state budget of %d bytes (want 0 for the default, or 1..%d)", c.Budget, MaxStateBudget)
	}
	if err := checkBy(c.By); err != nil {
		return err
	}
	return c.Quota.validate()
}

func applySetQuota(s *State, c *SetQuota) error {
	if _, err := s.ACL.authorize(c.By, RoleAdmin, "setting a quota"); err != nil {
		return err
	}
	q := &s.Quotas
	if c.Accessor == "" {
		q.Default, q.Budget = c.Quota, c.Budget
		return nil
	}
	if _, ok := s.ACL.Token(c.Accessor); !ok {
		return fmt.Errorf("%w: accessor %q", ErrUnknownToken, c.Accessor)
	}
	if c.Quota == (Quota{}) {
		delete(q.tokens, c.Accessor)
		return nil
	}
	if q.tokens == nil {
		q.tokens = map[string]Quota{}
	}
	q.tokens[c.Accessor] = c.Quota
	return nil
}

func encodeSubmitterQuota(w *writer, q Quota) {
	w.uvarint(uint64(q.Jobs))
	w.uvarint(uint64(q.SpecBytes))
	w.f64(q.Rate)
	w.uvarint(uint64(q.Burst))
}

func decodeSubmitterQuota(r *reader) Quota {
	return Quota{Jobs: decodeCount(r, MaxJobs), SpecBytes: decodeBytes(r), Rate: r.f64(), Burst: decodeCount(r, MaxQuotaBurst)}
}

// decodeCount reads a uvarint of at most limit.
func decodeCount(r *reader, limit int) int {
	v := r.uvarint()
	if v > uint64(limit) {
		r.fail("count %d over %d", v, limit)
		return 0
	}
	return int(v)
}

// decodeBytes reads a byte count of at most MaxStateBudget.
func decodeBytes(r *reader) int64 {
	v := r.uvarint()
	if v > MaxStateBudget {
		r.fail("byte count %d over %d", v, MaxStateBudget)
		return 0
	}
	return int64(v)
}

// encodeQuotas writes the quotas (snapshots of version 9): the defaults,
// the budget, then the submitters' quotas in accessor order.
func encodeQuotas(w *writer, q *Quotas) {
	encodeSubmitterQuota(w, q.Default)
	w.uvarint(uint64(q.Budget))
	ids := q.Accessors()
	w.uvarint(uint64(len(ids)))
	for _, id := range ids {
		w.str(id)
		encodeSubmitterQuota(w, q.tokens[id])
	}
}

// decodeQuotas reads what encodeQuotas wrote and validates it against
// the token table acl: every quota of a known token, in accessor order,
// none zero.
func decodeQuotas(r *reader, acl *ACL) (Quotas, error) {
	var q Quotas
	q.Default = decodeSubmitterQuota(r)
	q.Budget = decodeBytes(r)
	n := r.length(MaxTokens)
	prev := ""
	for i := 0; i < n && r.err == nil; i++ {
		id := r.str()
		v := decodeSubmitterQuota(r)
		if r.err != nil {
			break
		}
		if id <= prev {
			return q, fmt.Errorf("%w: quota of token %q out of order", ErrMalformed, id)
		}
		prev = id
		if _, ok := acl.Token(id); !ok || v == (Quota{}) {
			return q, invalid("quota of token %q: unknown token or empty quota", id)
		}
		if err := v.validate(); err != nil {
			return q, err
		}
		if q.tokens == nil {
			q.tokens = map[string]Quota{}
		}
		q.tokens[id] = v
	}
	if r.err != nil {
		return q, r.err
	}
	if err := q.Default.validate(); err != nil {
		return q, err
	}
	return q, nil
}
