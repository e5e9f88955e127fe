package state

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"pollux/optimizer/goodput"
)

// Round is one allocation round of the leader in a single Raft write: the
// new allocation, the attained service accrued since the last round, and
// per job what was gathered since (bids, measurements, failed
// incarnations). It is fenced as a whole like CommitAllocation, then
// applied partially in job id order: entries naming an unknown or
// finished job, a stale incarnation or session are dropped and named in
// the Result (docs/replicated-state.md).
type Round struct {
	Generation uint64
	Term       uint64
	// Time is the proposer's clock (seconds); it becomes State.LastRound.
	Time float64
	// Accrue is the service time (in the cluster's emulated seconds) each
	// GPU held under the allocation being replaced has earned since the
	// last round: attained service grows by GPUs * Accrue.
	Accrue float64
	// MaxFailures is how many failed incarnations in a row (without an
	// epoch finished) fail a job; 0 never does.
	MaxFailures int
	// Jobs is the new allocation: job id to slots.
	Jobs map[string][]Slot
	// Updates are per-job changes, sorted by job id, one per job.
	Updates []RoundJob
	// Note, if set, says why the leader chose this allocation (its
	// policy, its fitness against the last round's); the events of the
	// jobs it moves quote it. Added after the first encoding: encoded
	// last, only when set.
	Note string
	// Leader, if set, is the id of the server that proposed the round:
	// the leader_changed event of its term's first round names it.
	// Encoded after Note (then encoded even when empty), only when set.
	Leader string
}

// RoundJob is what one round changes about one job.
type RoundJob struct {
	ID string
	// Incarnation is the job's incarnation the leader decided on (0 for
	// a job never placed): the update is dropped unless it is the job's
	// current one.
	Incarnation uint64
	// Restart: the incarnation's workers failed. It counts a crash (the
	// job fails after MaxFailures in a row) and restarts the job under a
	// new incarnation, on the same placement if the round keeps it.
	Restart bool
	// Running: the incarnation's workers have reported (a Rescaling job
	// becomes Running).
	Running bool
	// HasBid: Bid replaces the job's bid if (Session, Version) is newer.
	HasBid bool
	Bid    Bid
	// HasMeas: Meas is merged if it continues the acknowledged sequence.
	HasMeas bool
	Meas    Measurement
}

// Measurement is what a job actor measured, aggregated: profile entries
// to merge (a weighted running mean per configuration) and the progress
// reported. It holds the session's measurements From+1..To and is merged
// only if it continues the job's acknowledged sequence (MeasSession,
// MeasSeq) or opens a newer session, so nothing is merged twice
// (docs/replicated-state.md). GPUType is the type of the nodes the
// measured incarnation ran on; the merged entries are recorded under it.
type Measurement struct {
	Session, From, To uint64
	Profile           []ProfileEntry
	Epoch             int
	Progress          float64
	GPUType           string
	// Checkpoint is the latest checkpoint the measured incarnation's
	// workers reported saving (zero: none); a measurement merged with
	// one later than the job's last records it (EventCheckpointed).
	// Added after the first encoding: a Round encodes it in its last
	// block, a FinishJob after the GPU type, only when set.
	Checkpoint Checkpoint
}

// Drop names an entry of a Round or Prune that was not applied, and why.
type Drop struct {
	Job  string
	Node string
	// Placement: the job's placement was dropped (not its update).
	Placement bool
	Err       error
}

// Limits of a bid.
const (
	// MaxBidReplicas bounds a bid's table (per allocation shape).
	MaxBidReplicas = 1024
	// maxBidTime bounds the fitted time parameters (seconds): a step of
	// an hour is not a measurement.
	maxBidTime = 3600
)

func (c *Round) kind() byte { return typeRound }

func (c *Round) encode(w *writer) {
	w.uvarint(c.Generation)
	w.uvarint(c.Term)
	w.f64(c.Time)
	w.f64(c.Accrue)
	w.int(c.MaxFailures)
	encodePlacements(w, c.Jobs)
	w.uvarint(uint64(len(c.Updates)))
	for i := range c.Updates {
		encodeRoundJob(w, &c.Updates[i])
	}
	cks := roundCheckpoints(c.Updates)
	if c.Note != "" || c.Leader != "" || len(cks) > 0 {
		w.str(c.Note)
	}
	if c.Leader != "" || len(cks) > 0 {
		w.str(c.Leader)
	}
	if len(cks) > 0 {
		encodeRoundCheckpoints(w, c.Updates, cks)
	}
}

func (c *Round) decode(r *reader) {
	c.Generation = r.uvarint()
	c.Term = r.uvarint()
	c.Time = r.f64()
	c.Accrue = r.f64()
	c.MaxFailures = r.int()
	c.Jobs = decodePlacements(r)
	n := r.length(maxList)
	if n > 0 {
		c.Updates = make([]RoundJob, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		var u RoundJob
		decodeRoundJob(r, &u)
		c.Updates = append(c.Updates, u)
	}
	if r.more() {
		c.Note = r.str()
		if r.more() {
			c.Leader = r.str()
			if r.more() {
				decodeRoundCheckpoints(r, c.Updates)
			} else if c.Leader == "" {
				r.fail("round leader encoded empty (it is left out instead)")
			}
		} else if c.Note == "" {
			r.fail("round note encoded empty (it is left out instead)")
		}
	}
}

func encodeRoundJob(w *writer, u *RoundJob) {
	w.str(u.ID)
	w.uvarint(u.Incarnation)
	var flags byte
	typedBid, typedMeas := u.HasBid && len(u.Bid.Types) > 0, u.HasMeas && u.Meas.GPUType != ""
	racks := roundHasRacks(u)
	delay := u.HasBid && u.Bid.RestartDelay != 0
	for i, b := range []bool{u.Restart, u.Running, u.HasBid, u.HasMeas, typedMeas, typedBid, racks, delay} {
		if b {
			flags |= 1 << i
		}
	}
	w.byte(flags)
	if u.HasBid {
		encodeBid(w, &u.Bid)
		if typedBid {
			encodeTypeBids(w, u.Bid.Types)
		}
	}
	if u.HasMeas {
		encodeMeasurement(w, &u.Meas)
		if typedMeas {
			w.str(u.Meas.GPUType)
		}
	}
	if racks {
		if u.HasBid {
			encodeBidRacks(w, &u.Bid)
		}
		if u.HasMeas {
			encodeProfileRacks(w, u.Meas.Profile)
		}
	}
	if delay {
		w.f64(u.Bid.RestartDelay)
	}
}

// encodeMeasurement encodes a measurement but its GPU type, which each
// command holding one encodes in its own way.
func encodeMeasurement(w *writer, m *Measurement) {
	w.uvarint(m.Session)
	w.uvarint(m.From)
	w.uvarint(m.To)
	encodeProfile(w, m.Profile)
	w.int(m.Epoch)
	w.f64(m.Progress)
}

func decodeMeasurement(r *reader, m *Measurement) {
	m.Session, m.From, m.To = r.uvarint(), r.uvarint(), r.uvarint()
	m.Profile = decodeProfile(r)
	m.Epoch = r.int()
	m.Progress = r.f64()
}

func decodeRoundJob(r *reader, u *RoundJob) {
	u.ID = r.str()
	u.Incarnation = r.uvarint()
	flags := r.byte()
	// Bits 16 (a typed measurement), 32 (a bid with per-type parts), 64
	// (racks: racks.go) and 128 (the bid's restart delay, encoded last)
	// came later: an update without them encodes as it always did.
	if (flags&0x10 != 0 && flags&8 == 0) || (flags&0x20 != 0 && flags&4 == 0) ||
		(flags&0x40 != 0 && flags&0xc == 0) || (flags&0x80 != 0 && flags&4 == 0) {
		r.fail("round update flags %#x", flags)
	}
	u.Restart, u.Running, u.HasBid, u.HasMeas = flags&1 != 0, flags&2 != 0, flags&4 != 0, flags&8 != 0
	if u.HasBid {
		decodeBid(r, &u.Bid)
		if flags&0x20 != 0 {
			if u.Bid.Types = decodeTypeBids(r); len(u.Bid.Types) == 0 {
				r.fail("bid per-type parts encoded empty (they are left out instead)")
			}
		}
	}
	if u.HasMeas {
		decodeMeasurement(r, &u.Meas)
		if flags&0x10 != 0 {
			if u.Meas.GPUType = r.str(); u.Meas.GPUType == "" {
				r.fail("measurement GPU type encoded empty (it is left out instead)")
			}
		}
	}
	if flags&0x40 != 0 {
		if u.HasBid {
			decodeBidRacks(r, &u.Bid)
		}
		if u.HasMeas {
			decodeProfileRacks(r, u.Meas.Profile)
		}
		if r.err == nil && !roundHasRacks(u) {
			r.fail("round update racks encoded empty (they are left out instead)")
		}
	}
	if flags&0x80 != 0 {
		if u.Bid.RestartDelay = r.f64(); u.Bid.RestartDelay == 0 {
			r.fail("bid restart delay encoded zero (it is left out instead)")
		}
	}
}

func encodeBid(w *writer, b *Bid) {
	w.uvarint(b.Session)
	w.uvarint(b.Version)
	w.bool(b.HasModel)
	for _, v := range b.Params.Slice() {
		w.f64(v)
	}
	w.bool(b.HasGrad)
	w.f64(b.Grad.GradSqr)
	w.f64(b.Grad.GradVar)
	w.int(b.MostProfiled)
	encodeTables(w, b.Single, b.Multi)
}

func encodeTables(w *writer, single, multi []BatchChoice) {
	for _, t := range [][]BatchChoice{single, multi} {
		w.uvarint(uint64(len(t)))
		for _, c := range t {
			w.int(c.LocalBatch)
			w.int(c.AccumSteps)
			w.f64(c.Gain)
		}
	}
}

func decodeBid(r *reader, b *Bid) {
	b.Session = r.uvarint()
	b.Version = r.uvarint()
	b.HasModel = r.bool()
	b.Params = decodeParams(r)
	b.HasGrad = r.bool()
	b.Grad.GradSqr = r.f64()
	b.Grad.GradVar = r.f64()
	b.MostProfiled = r.int()
	b.Single, b.Multi = decodeTables(r)
}

func decodeParams(r *reader) goodput.Params {
	var v [7]float64
	for i := range v {
		v[i] = r.f64()
	}
	return goodput.ParamsFrom(v)
}

func decodeTables(r *reader) (single, multi []BatchChoice) {
	for _, t := range []*[]BatchChoice{&single, &multi} {
		n := r.length(MaxBidReplicas)
		if n == 0 {
			continue
		}
		*t = make([]BatchChoice, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			*t = append(*t, BatchChoice{LocalBatch: r.int(), AccumSteps: r.int(), Gain: r.f64()})
		}
	}
	return single, multi
}

func (c *Round) validate() error {
	if c.Generation == 0 || c.Term == 0 {
		return invalid("round generation %d, term %d (want both > 0)", c.Generation, c.Term)
	}
	if err := checkNonNeg("round time", c.Time); err != nil {
		return err
	}
	if err := checkNonNeg("accrued service", c.Accrue); err != nil {
		return err
	}
	if c.MaxFailures < 0 {
		return invalid("max failures %d", c.MaxFailures)
	}
	if len(c.Note) > maxEventReason {
		return invalid("round note of %d bytes (limit %d)", len(c.Note), maxEventReason)
	}
	if c.Leader != "" {
		if err := checkID("round leader", c.Leader); err != nil {
			return err
		}
	}
	if err := (&CommitAllocation{Generation: c.Generation, Term: c.Term, Jobs: c.Jobs}).validate(); err != nil {
		return err
	}
	if len(c.Updates) > maxList {
		return invalid("round of %d updates", len(c.Updates))
	}
	for i := range c.Updates {
		u := &c.Updates[i]
		if i > 0 && u.ID <= c.Updates[i-1].ID {
			return invalid("round updates not sorted by unique job id at %q", u.ID)
		}
		if err := u.validate(); err != nil {
			return err
		}
	}
	return nil
}

func (u *RoundJob) validate() error {
	if err := checkID("job", u.ID); err != nil {
		return err
	}
	if !u.Restart && !u.Running && !u.HasBid && !u.HasMeas {
		return invalid("round update of job %q changes nothing", u.ID)
	}
	if u.HasBid {
		if err := u.Bid.Validate(); err != nil {
			return fmt.Errorf("job %q: %w", u.ID, err)
		}
	} else if u.Bid.Version != 0 || u.Bid.Single != nil || u.Bid.Multi != nil || u.Bid.Types != nil {
		return invalid("job %q: a bid without HasBid", u.ID)
	}
	if u.HasMeas {
		if err := u.Meas.validate(u.ID); err != nil {
			return err
		}
	} else if m := u.Meas; m.Session != 0 || m.From != 0 || m.To != 0 || m.Profile != nil || m.Epoch != 0 || m.Progress != 0 || m.GPUType != "" || !m.Checkpoint.IsZero() {
		return invalid("job %q: a measurement without HasMeas", u.ID)
	}
	return nil
}

// validate checks a measurement of job.
func (m *Measurement) validate(job string) error {
	if m.Session == 0 || m.To <= m.From {
		return invalid("job %q measurement of session %d numbered %d..%d", job, m.Session, m.From+1, m.To)
	}
	if len(m.Profile) > maxProfile {
		return invalid("%d profile entries (limit %d)", len(m.Profile), maxProfile)
	}
	if err := checkGPUType(m.GPUType); err != nil {
		return invalid("job %q measurement: %v", job, err)
	}
	for i := range m.Profile {
		if err := m.Profile[i].validate(); err != nil {
			return err
		}
		if m.Profile[i].GPUType != "" {
			return invalid("job %q measurement entry of GPU type %q (the measurement's type applies)", job, m.Profile[i].GPUType)
		}
		if i > 0 && compareKey(m.Profile[i-1].key(), m.Profile[i].key()) >= 0 {
			return invalid("job %q measurement profile not sorted by configuration", job)
		}
	}
	if m.Epoch < 0 {
		return invalid("job %q epoch %d", job, m.Epoch)
	}
	if err := m.Checkpoint.validate(job); err != nil {
		return err
	}
	return checkNonNeg("progress", m.Progress)
}

// Validate checks what can be checked of a bid without its job: numbers
// finite and in range, the model evaluable, the tables consistent. A bid
// failing it is refused whole (the allocator counts it as dropped).
func (b *Bid) Validate() error {
	if b.Session == 0 || b.Version == 0 {
		return invalid("bid session %d, version %d (want both > 0)", b.Session, b.Version)
	}
	if b.HasModel {
		if err := checkParams(b.Params); err != nil {
			return err
		}
	} else if b.Params != (goodput.Params{}) {
		return invalid("bid parameters without HasModel")
	}
	if b.HasGrad {
		if err := checkNonNeg("bid grad_sqr", b.Grad.GradSqr); err != nil {
			return err
		}
		if err := checkNonNeg("bid grad_var", b.Grad.GradVar); err != nil {
			return err
		}
	} else if b.Grad != (goodput.GradStats{}) {
		return invalid("bid gradient statistics without HasGrad")
	}
	if err := checkNonNeg("bid restart delay", b.RestartDelay); err != nil {
		return err
	}
	if b.RestartDelay > maxBidTime {
		return invalid("bid restart delay %v s", b.RestartDelay)
	}
	if b.MostProfiled < 0 || b.MostProfiled > MaxBidReplicas {
		return invalid("bid profiled at %d replicas", b.MostProfiled)
	}
	if len(b.Single) == 0 || len(b.Single) > MaxBidReplicas || len(b.Multi) > len(b.Single) {
		return invalid("bid tables of %d single-node and %d multi-node shapes", len(b.Single), len(b.Multi))
	}
	if err := checkTables(b.Single, b.Multi); err != nil {
		return err
	}
	return b.validateTypes()
}

// checkTables checks the choices of a bid's tables.
func checkTables(single, multi []BatchChoice) error {
	for _, t := range [][]BatchChoice{single, multi} {
		for i, c := range t {
			if c.LocalBatch < 1 || c.AccumSteps < 0 || !finite(c.Gain) || c.Gain <= 0 {
				return invalid("bid choice for %d replicas: local batch %d, %d accumulation steps, gain %v", i+1, c.LocalBatch, c.AccumSteps, c.Gain)
			}
			total := float64(i+1) * float64(c.LocalBatch) * float64(c.AccumSteps+1)
			if c.Gain > max(total, 1)+1e-9 {
				return invalid("bid choice for %d replicas: gain %v above the total batch %v", i+1, c.Gain, total)
			}
		}
	}
	return nil
}

// checkParams checks fitted throughput parameters.
func checkParams(p goodput.Params) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: bid model: %w", ErrInvalid, err)
	}
	v := p.Slice()
	for i, x := range v[:6] {
		if x > maxBidTime {
			return invalid("bid model parameter %d is %v s", i, x)
		}
	}
	if p.AlphaX > maxBidTime {
		return invalid("bid cross-rack term is %v s", p.AlphaX)
	}
	return nil
}

// checkLimits checks a bid's choices against the job's batch limits: the
// allocator must not tell workers to run what the job does not allow.
func (b *Bid) checkLimits(l goodput.Limits) error {
	tabs := [][]BatchChoice{b.Single, b.Multi}
	for _, tb := range b.Types {
		tabs = append(tabs, tb.Single, tb.Multi)
	}
	for _, t := range tabs {
		for i, c := range t {
			k := i + 1
			total := k * c.LocalBatch * (c.AccumSteps + 1)
			switch {
			case c.LocalBatch < l.MinLocal || c.LocalBatch > l.MaxLocal:
				return invalid("bid choice for %d replicas: local batch %d outside [%d, %d]", k, c.LocalBatch, l.MinLocal, l.MaxLocal)
			case c.AccumSteps > 0 && !l.Accumulation:
				return invalid("bid choice for %d replicas: %d accumulation steps for a job without accumulation", k, c.AccumSteps)
			case total > max(l.MaxBatch, k*l.MinLocal)+k*(c.AccumSteps+1):
				// (the batch search splits a total batch by rounding each
				// micro-batch up, so it may pass the maximum by that much)
				return invalid("bid choice for %d replicas: total batch %d above %d", k, total, l.MaxBatch)
			case c.Gain > math.Max(float64(total)/float64(l.InitBatch), 1)+1e-9:
				return invalid("bid choice for %d replicas: gain %v above %d/%d", k, c.Gain, total, l.InitBatch)
			}
		}
	}
	return nil
}

// CheckBid checks a bid for job j as a Round would apply it: valid, within
// the job's batch limits, of a session not older than the job's.
func CheckBid(j *Job, b *Bid) error {
	if err := b.Validate(); err != nil {
		return err
	}
	if err := b.checkLimits(j.Spec.Limits); err != nil {
		return err
	}
	if b.Session < j.MeasSession || b.Session < j.Bid.Session {
		return fmtErr(ErrStaleSession, "job %q bid of session %d, the state has %d", j.ID, b.Session, max(j.MeasSession, j.Bid.Session))
	}
	return nil
}

// applyRound applies r, appended to the log in term, and returns what it
// dropped.
func applyRound(s *State, c *Round, term uint64) ([]Drop, error) {
	if err := fence(s, "round", c.Generation, c.Term, term); err != nil {
		return nil, err
	}
	var drops []Drop
	// Service under the allocation being replaced.
	for _, id := range slices.Sorted(maps.Keys(s.Allocation.Jobs)) {
		if j := s.Jobs[id]; j != nil && !j.State.Terminal() {
			k := 0
			for _, sl := range s.Allocation.Jobs[id] {
				k += sl.GPUs
			}
			j.Attained += float64(k) * c.Accrue
		}
	}
	restart := map[string]bool{}
	for i := range c.Updates {
		u := &c.Updates[i]
		j, err := liveJob(s, u.ID, 0)
		if err == nil && j.Incarnation != u.Incarnation {
			err = fmtErr(ErrStaleIncarnation, "job %q update for incarnation %d, current is %d", u.ID, u.Incarnation, j.Incarnation)
		}
		if err != nil {
			drops = append(drops, Drop{Job: u.ID, Err: err})
			continue
		}
		if err := applyRoundJob(s, j, u, c.MaxFailures, c.Time); err != nil {
			drops = append(drops, Drop{Job: u.ID, Err: err})
		}
		if u.Restart && !j.State.Terminal() {
			restart[u.ID] = true
		}
	}
	next, pdrops := admitPlacements(s, c.Jobs, c.Time)
	drops = append(drops, pdrops...)
	if prev := s.Allocation.Term; c.Term > prev {
		emitLeader(s, c, prev)
	}
	reallocate(s, c.Generation, c.Term, next, restart, c.Time, c.Note)
	s.LastRound = c.Time
	return drops, nil
}

// applyRoundJob applies one update to a live job at its incarnation. A
// part that cannot be applied (a stale bid or measurement) is skipped and
// returned as the error; the other parts are applied.
func applyRoundJob(s *State, j *Job, u *RoundJob, maxFailures int, now float64) error {
	var errs []string
	var first error
	note := func(err error) {
		if first == nil {
			first = err
		}
		errs = append(errs, err.Error())
	}
	if u.HasMeas {
		if err := mergeMeasurement(j, &u.Meas); err != nil {
			note(err)
		} else {
			noteCheckpoint(s, j, &u.Meas.Checkpoint, now)
		}
	}
	if u.HasBid {
		switch {
		case u.Bid.Session < j.MeasSession || u.Bid.Session < j.Bid.Session ||
			(u.Bid.Session == j.Bid.Session && u.Bid.Version <= j.Bid.Version):
			note(fmtErr(ErrStaleSession, "job %q bid %d.%d, the state has %d.%d (measurements of session %d)",
				j.ID, u.Bid.Session, u.Bid.Version, j.Bid.Session, j.Bid.Version, j.MeasSession))
		default:
			if err := u.Bid.checkLimits(j.Spec.Limits); err != nil {
				note(err)
			} else {
				j.Bid = u.Bid.clone()
			}
		}
	}
	if u.Running && j.State == Rescaling {
		j.State = Running
	}
	if u.Restart {
		if j.Epoch > j.CrashEpoch {
			j.Crashes = 0
		}
		j.Crashes++
		j.CrashEpoch = j.Epoch
		if maxFailures > 0 && j.Crashes >= maxFailures {
			j.State, j.FinishTime = Failed, now
			j.Reason = fmt.Sprintf("workers failed in %d incarnations in a row without finishing an epoch", j.Crashes)
			delete(s.Allocation.Jobs, j.ID)
			emit(s, EventFailed, now, j.ID, "", j.Reason)
		}
	}
	if first != nil {
		return fmt.Errorf("%w (%s)", first, strings.Join(errs, "; "))
	}
	return nil
}

// mergeMeasurement merges m into j if it continues j's acknowledged
// sequence.
func mergeMeasurement(j *Job, m *Measurement) error {
	switch {
	case m.Session < j.MeasSession:
		return fmtErr(ErrStaleSession, "job %q measurement of session %d, the state has %d", j.ID, m.Session, j.MeasSession)
	case m.Session == j.MeasSession && m.From != j.MeasSeq:
		return fmtErr(ErrStaleSession, "job %q measurements %d..%d of session %d, the state acknowledges %d", j.ID, m.From+1, m.To, m.Session, j.MeasSeq)
	case m.Session > j.MeasSession && m.From != 0:
		return fmtErr(ErrStaleSession, "job %q opens session %d at measurement %d", j.ID, m.Session, m.From+1)
	}
	entries := m.Profile
	if m.GPUType != "" {
		entries = slices.Clone(entries)
		for i := range entries {
			entries[i].GPUType = m.GPUType
		}
	}
	prof, err := mergeProfile(j, entries)
	if err != nil {
		return err
	}
	j.Profile = prof
	j.Epoch, j.Progress = max(j.Epoch, m.Epoch), max(j.Progress, m.Progress)
	j.MeasSession, j.MeasSeq = m.Session, m.To
	return nil
}

// admitPlacements returns the placements of want that can be applied, in
// job id order: a job unknown or finished, outside its replica bounds, on
// an unknown, dead or departed node, or beyond a node's capacity (after
// the jobs before it) is dropped. A node the state does not hold may be
// a peer lab's node the lab borrows GPUs of (federation.BorrowedID): its
// capacity is what the ledger's leases in force at now lend.
func admitPlacements(s *State, want map[string][]Slot, now float64) (map[string][]Slot, []Drop) {
	next := make(map[string][]Slot, len(want))
	var drops []Drop
	used := map[string]int{}
	var borrowed map[string]int
	if s.Fed != nil {
		borrowed = s.Fed.Ledger.BorrowedNodes(now)
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		slots := slices.Clone(want[id])
		sortSlots(slots)
		if err := admit(s, id, slots, used, borrowed); err != nil {
			drops = append(drops, Drop{Job: id, Placement: true, Err: err})
			continue
		}
		for _, sl := range slots {
			used[sl.Node] += sl.GPUs
		}
		next[id] = slots
	}
	return next, drops
}

func admit(s *State, id string, slots []Slot, used, borrowed map[string]int) error {
	j, err := liveJob(s, id, 0)
	if err != nil {
		return err
	}
	k := 0
	for _, sl := range slots {
		n, ok := s.Nodes[sl.Node]
		if g, lent := borrowed[sl.Node]; !ok && lent {
			if used[sl.Node]+sl.GPUs > g {
				return invalid("job %q would bring borrowed node %q to %d GPUs, the lab leases %d", id, sl.Node, used[sl.Node]+sl.GPUs, g)
			}
			k += sl.GPUs
			continue
		}
		switch {
		case !ok:
			return fmtErr(ErrUnknownNode, "job %q placed on %q", id, sl.Node)
		case n.Health == Dead || n.Health == Left:
			return invalid("job %q placed on node %q, which is %v", id, sl.Node, n.Health)
		case used[sl.Node]+sl.GPUs > n.GPUs:
			return invalid("job %q would bring node %q to %d GPUs, it has %d", id, sl.Node, used[sl.Node]+sl.GPUs, n.GPUs)
		}
		k += sl.GPUs
	}
	if k < j.Spec.MinReplicas || k > j.Spec.MaxReplicas {
		return invalid("job %q given %d GPUs (bounds [%d, %d])", id, k, j.Spec.MinReplicas, j.Spec.MaxReplicas)
	}
	return checkConstraints(s, j, slots)
}

func fmtErr(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}
