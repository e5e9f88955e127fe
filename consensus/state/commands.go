package state

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode"

	"pollux/optimizer/goodput"
)

// CommandVersion is the encoding version this binary writes and the only
// one it applies.
const CommandVersion byte = 1

// Command types on the wire (second byte of an encoded command). Values
// are never reused.
const (
	typeSubmitJob        byte = 1
	typeUpdateJob        byte = 2
	typeCompleteJob      byte = 3
	typeRecordProfile    byte = 4
	typeCommitAllocation byte = 5
	typeRegisterNode     byte = 6
	typeMarkNode         byte = 7
	typeInitCluster      byte = 8
	typeFinishJob        byte = 9
	typeRound            byte = 10
	typePrune            byte = 11
	// 16..23: API tokens (acl.go).
	typeBootstrapACL byte = 16
	typeCreateToken  byte = 17
	typeRevokeToken  byte = 18
	typeCancelJob    byte = 19
	typeSetQuota     byte = 20
	// 28..31: autoscaling (scale.go).
	// 36..39: federation (federation.go).
)

// Command is one state change. The concrete types are the exported
// structs below; Encode and Decode convert to and from the wire.
type Command interface {
	kind() byte
	encode(w *writer)
	decode(r *reader)
	// validate checks what can be checked without the state.
	validate() error
}

// SubmitJob adds a Pending job. A non-empty Submitter is the accessor of
// the API token that submits it: it must be a live token of role submit
// or admin, and the job records it (and its name) as its submitter. It is
// encoded last, and only when non-empty, so that entries written before
// it existed still decode.
//
// An Owned submission (every one a server of this version writes) also
// follows the rules of tenancy.go: the job checkpoints in ROOT/<its id>
// or, with Spec.ResumeFrom, in the directory of a finished job of the
// same submitter, never in one a live job holds; and it counts against
// its submitter's quota and the cluster's state budget (quota.go).
// Entries written before these rules apply as they did (Owned false).
//
// A non-empty Key (only with Owned) is the submission's idempotency key,
// which the job records: a SubmitJob of the same key and submitter as an
// existing job's is a retry of the submission that made it and applies
// as a no-op instead of failing with ErrJobExists.
type SubmitJob struct {
	ID         string
	Spec       JobSpec
	SubmitTime float64
	Submitter  string
	Owned      bool
	Key        string
}

// Fields of UpdateJob that are set.
const (
	UpdateState uint8 = 1 << iota
	UpdateAttained
	UpdateEpoch
	UpdateProgress
)

// UpdateJob changes what a job reports about itself. Only the fields named
// in Set are applied. A non-zero Incarnation must match the job's current
// incarnation (a report from an older set of workers is rejected).
// Attained and Epoch may not decrease; State may only be Pending, Running
// or Rescaling (use CompleteJob to finish a job).
type UpdateJob struct {
	ID          string
	Incarnation uint64
	Set         uint8
	State       JobState
	Attained    float64
	Epoch       int
	Progress    float64
}

// CompleteJob finishes a job exactly once, as Completed or (Failed true)
// Failed, and frees its GPUs in the committed allocation (the generation
// does not change). A non-zero Incarnation must match the job's current
// incarnation: a completion reported by a superseded incarnation's
// workers is refused (the current incarnation's workers report their
// own). It is encoded last, and only when non-zero, so that entries
// written before it existed still decode.
type CompleteJob struct {
	ID          string
	Failed      bool
	Reason      string
	FinishTime  float64
	Incarnation uint64
}

// RecordProfile merges profile entries into a job's profile (a weighted
// running mean per configuration) and, if HasGrad, replaces its gradient
// statistics. A non-zero Incarnation must match the job's.
type RecordProfile struct {
	ID          string
	Incarnation uint64
	Entries     []ProfileEntry
	Grad        goodput.GradStats
	HasGrad     bool
}

// CommitAllocation replaces the committed allocation. Generation must be
// above the committed one; Term must be the term of the Raft entry that
// carries it and not below the committed allocation's term, so that an
// allocation decided by a deposed leader (even one forwarded to the new
// leader) is rejected. Every job must exist and not be finished, every
// node must exist and not be dead or gone, and no node may be given more
// GPUs than it has.
type CommitAllocation struct {
	Generation uint64
	Term       uint64
	// Jobs maps job id to slots; jobs not present hold no GPUs.
	Jobs map[string][]Slot
}

// RegisterNode adds a node or replaces what is known about it.
type RegisterNode struct{ Node Node }

// MarkNode sets a node's health.
type MarkNode struct {
	ID     string
	Health Health
}

// Encode returns the wire form of c: the version byte, the type byte, then
// the fields in the binary encoding of wire.go. It validates c first.
func Encode(c Command) ([]byte, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil command", ErrInvalid)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	w := &writer{b: make([]byte, 0, 64)}
	w.byte(CommandVersion)
	w.byte(c.kind())
	c.encode(w)
	return w.b, nil
}

// IsSubmission reports whether b, an encoded command, is a SubmitJob
// (without decoding it).
func IsSubmission(b []byte) bool {
	return len(b) >= 2 && b[0] == CommandVersion && b[1] == typeSubmitJob
}

// Decode parses and validates one encoded command. An unknown version or
// type, a malformed body, or invalid content is an error wrapping
// ErrUnknownVersion, ErrUnknownCommand, ErrMalformed or ErrInvalid.
func Decode(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: command of %d bytes", ErrMalformed, len(b))
	}
	if b[0] != CommandVersion {
		return nil, fmt.Errorf("%w: command version %d (this binary knows %d)", ErrUnknownVersion, b[0], CommandVersion)
	}
	var c Command
	switch b[1] {
	case typeSubmitJob:
		c = &SubmitJob{}
	case typeUpdateJob:
		c = &UpdateJob{}
	case typeCompleteJob:
		c = &CompleteJob{}
	case typeRecordProfile:
		c = &RecordProfile{}
	case typeCommitAllocation:
		c = &CommitAllocation{}
	case typeRegisterNode:
		c = &RegisterNode{}
	case typeMarkNode:
		c = &MarkNode{}
	case typeInitCluster:
		c = &InitCluster{}
	case typeFinishJob:
		c = &FinishJob{}
	case typeRound:
		c = &Round{}
	case typePrune:
		c = &Prune{}
	case typeBootstrapACL:
		c = &BootstrapACL{}
	case typeCreateToken:
		c = &CreateToken{}
	case typeRevokeToken:
		c = &RevokeToken{}
	case typeCancelJob:
		c = &CancelJob{}
	case typeSetQuota:
		c = &SetQuota{}
	case typeScaleDecision:
		c = &ScaleDecision{}
	case typeScaleUpdate:
		c = &ScaleUpdate{}
	case typeLease:
		c = &Lease{}
	case typeSetLab:
		c = &SetLab{}
	default:
		return nil, fmt.Errorf("%w: type %d", ErrUnknownCommand, b[1])
	}
	r := &reader{b: b[2:]}
	c.decode(r)
	if err := r.done(); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// --- encodings -----------------------------------------------------------

func (c *SubmitJob) kind() byte { return typeSubmitJob }
func (c *SubmitJob) encode(w *writer) {
	w.str(c.ID)
	encodeSpec(w, &c.Spec)
	w.f64(c.SubmitTime)
	// Optional trailing blocks, in the order they were added: the
	// submitter, the placement constraints, the declared epochs, then
	// the tenancy block (present exactly when Owned: the resumed job).
	// Each is left out when it and every later block are empty; an
	// empty one is encoded only when a later one follows.
	epochs := c.Spec.Epochs != 0 || c.Owned
	attrs := specAttrsSet(&c.Spec) || epochs
	if c.Submitter != "" || attrs {
		w.str(c.Submitter)
	}
	if attrs {
		encodeSpecAttrs(w, &c.Spec)
	}
	if epochs {
		w.int(c.Spec.Epochs)
	}
	if c.Owned {
		w.str(c.Spec.ResumeFrom)
	}
	if c.Key != "" {
		w.str(c.Key)
	}
}
func (c *SubmitJob) decode(r *reader) {
	c.ID = r.str()
	decodeSpec(r, &c.Spec)
	c.SubmitTime = r.f64()
	if !r.more() {
		return
	}
	c.Submitter = r.str()
	if !r.more() {
		if r.err == nil && c.Submitter == "" {
			r.fail("submission with an encoded empty submitter (it is left out instead)")
		}
		return
	}
	decodeSpecAttrs(r, &c.Spec)
	if !r.more() {
		if r.err == nil && !specAttrsSet(&c.Spec) {
			r.fail("job placement constraints encoded empty (they are left out instead)")
		}
		return
	}
	c.Spec.Epochs = r.int()
	if !r.more() {
		if r.err == nil && c.Spec.Epochs == 0 {
			r.fail("job epochs encoded as 0 (they are left out instead)")
		}
		return
	}
	c.Owned = true
	c.Spec.ResumeFrom = r.str()
	if !r.more() {
		return
	}
	c.Key = r.str()
	if r.err == nil && c.Key == "" {
		r.fail("submission with an encoded empty key (it is left out instead)")
	}
}

func encodeSpec(w *writer, s *JobSpec) {
	w.str(s.Name)
	w.strs(s.Command)
	w.str(s.App)
	w.int(s.MinReplicas)
	w.int(s.MaxReplicas)
	w.int(s.Limits.InitBatch)
	w.int(s.Limits.MaxBatch)
	w.int(s.Limits.MinLocal)
	w.int(s.Limits.MaxLocal)
	w.bool(s.Limits.Accumulation)
	w.str(s.CheckpointDir)
}

func decodeSpec(r *reader, s *JobSpec) {
	s.Name = r.str()
	s.Command = r.strs(maxArgs)
	s.App = r.str()
	s.MinReplicas = r.int()
	s.MaxReplicas = r.int()
	s.Limits.InitBatch = r.int()
	s.Limits.MaxBatch = r.int()
	s.Limits.MinLocal = r.int()
	s.Limits.MaxLocal = r.int()
	s.Limits.Accumulation = r.bool()
	s.CheckpointDir = r.str()
}

func (c *UpdateJob) kind() byte { return typeUpdateJob }
func (c *UpdateJob) encode(w *writer) {
	w.str(c.ID)
	w.uvarint(c.Incarnation)
	w.byte(c.Set)
	w.byte(byte(c.State))
	w.f64(c.Attained)
	w.int(c.Epoch)
	w.f64(c.Progress)
}
func (c *UpdateJob) decode(r *reader) {
	c.ID = r.str()
	c.Incarnation = r.uvarint()
	c.Set = r.byte()
	c.State = JobState(r.byte())
	c.Attained = r.f64()
	c.Epoch = r.int()
	c.Progress = r.f64()
}

func (c *CompleteJob) kind() byte { return typeCompleteJob }
func (c *CompleteJob) encode(w *writer) {
	w.str(c.ID)
	w.bool(c.Failed)
	w.str(c.Reason)
	w.f64(c.FinishTime)
	if c.Incarnation != 0 {
		w.uvarint(c.Incarnation)
	}
}
func (c *CompleteJob) decode(r *reader) {
	c.ID = r.str()
	c.Failed = r.bool()
	c.Reason = r.str()
	c.FinishTime = r.f64()
	if len(r.b) > 0 && r.err == nil {
		if c.Incarnation = r.uvarint(); c.Incarnation == 0 {
			r.fail("completion with an encoded incarnation 0 (it is left out instead)")
		}
	}
}

func (c *RecordProfile) kind() byte { return typeRecordProfile }
func (c *RecordProfile) encode(w *writer) {
	w.str(c.ID)
	w.uvarint(c.Incarnation)
	encodeProfile(w, c.Entries)
	w.bool(c.HasGrad)
	w.f64(c.Grad.GradSqr)
	w.f64(c.Grad.GradVar)
}
func (c *RecordProfile) decode(r *reader) {
	c.ID = r.str()
	c.Incarnation = r.uvarint()
	c.Entries = decodeProfile(r)
	c.HasGrad = r.bool()
	c.Grad.GradSqr = r.f64()
	c.Grad.GradVar = r.f64()
}

func encodeProfile(w *writer, es []ProfileEntry) {
	w.uvarint(uint64(len(es)))
	for _, e := range es {
		w.int(e.Nodes)
		w.int(e.Replicas)
		w.int(e.LocalBatch)
		w.f64(e.AccumTime)
		w.f64(e.StepTime)
		w.uvarint(e.Count)
	}
}

func decodeProfile(r *reader) []ProfileEntry {
	n := r.length(maxProfile)
	if n == 0 {
		return nil
	}
	es := make([]ProfileEntry, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		var e ProfileEntry
		e.Nodes, e.Replicas, e.LocalBatch = r.int(), r.int(), r.int()
		e.AccumTime, e.StepTime, e.Count = r.f64(), r.f64(), r.uvarint()
		es = append(es, e)
	}
	return es
}

func (c *CommitAllocation) kind() byte { return typeCommitAllocation }
func (c *CommitAllocation) encode(w *writer) {
	w.uvarint(c.Generation)
	w.uvarint(c.Term)
	encodePlacements(w, c.Jobs)
}
func (c *CommitAllocation) decode(r *reader) {
	c.Generation = r.uvarint()
	c.Term = r.uvarint()
	c.Jobs = decodePlacements(r)
}

// encodePlacements writes jobs in id order and each job's slots in node
// order, so that equal allocations have equal encodings.
func encodePlacements(w *writer, jobs map[string][]Slot) {
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	w.uvarint(uint64(len(ids)))
	for _, id := range ids {
		w.str(id)
		slots := slices.Clone(jobs[id])
		sortSlots(slots)
		w.uvarint(uint64(len(slots)))
		for _, s := range slots {
			w.str(s.Node)
			w.int(s.GPUs)
		}
	}
}

// decodePlacements insists on the order encodePlacements writes, so that
// an encoding decodes only if it is the canonical one.
func decodePlacements(r *reader) map[string][]Slot {
	n := r.length(maxList)
	jobs := make(map[string][]Slot, n)
	prev := ""
	for i := 0; i < n && r.err == nil; i++ {
		id := r.str()
		if i > 0 && id <= prev {
			r.fail("job %q out of order", id)
		}
		prev = id
		m := r.length(maxList)
		slots := make([]Slot, 0, m)
		for j := 0; j < m && r.err == nil; j++ {
			s := Slot{Node: r.str(), GPUs: r.int()}
			if j > 0 && s.Node <= slots[j-1].Node {
				r.fail("job %q: node %q out of order", id, s.Node)
			}
			slots = append(slots, s)
		}
		jobs[id] = slots
	}
	return jobs
}

func (c *RegisterNode) kind() byte { return typeRegisterNode }
func (c *RegisterNode) encode(w *writer) {
	encodeNode(w, &c.Node)
	if nodeAttrsSet(&c.Node) {
		encodeNodeAttrs(w, &c.Node)
	}
}
func (c *RegisterNode) decode(r *reader) {
	decodeNode(r, &c.Node)
	if r.more() {
		if decodeNodeAttrs(r, &c.Node); !nodeAttrsSet(&c.Node) {
			r.fail("node attributes encoded empty (they are left out instead)")
		}
	}
}

func encodeNode(w *writer, n *Node) {
	w.str(n.ID)
	w.strs(n.Addresses)
	w.str(n.Rack)
	w.int(n.GPUs)
	w.byte(byte(n.Health))
}

func decodeNode(r *reader, n *Node) {
	n.ID = r.str()
	n.Addresses = r.strs(maxAddresses)
	n.Rack = r.str()
	n.GPUs = r.int()
	n.Health = Health(r.byte())
}

func (c *MarkNode) kind() byte { return typeMarkNode }
func (c *MarkNode) encode(w *writer) {
	w.str(c.ID)
	w.byte(byte(c.Health))
}
func (c *MarkNode) decode(r *reader) {
	c.ID = r.str()
	c.Health = Health(r.byte())
}

// --- validation ----------------------------------------------------------

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// checkID accepts non-empty ids of printable, non-space characters.
func checkID(what, id string) error {
	if id == "" || len(id) > maxID {
		return invalid("%s id of %d bytes (want 1..%d)", what, len(id), maxID)
	}
	if strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
		return invalid("%s id %q has a space or control character", what, id)
	}
	return nil
}

// checkKey checks an idempotency key ("": none).
func checkKey(key string) error {
	if key == "" {
		return nil
	}
	return checkID("idempotency key", key)
}

func checkText(what, s string) error {
	if len(s) > maxString {
		return invalid("%s of %d bytes (limit %d)", what, len(s), maxString)
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func checkNonNeg(what string, v float64) error {
	if !finite(v) || v < 0 {
		return invalid("%s is %v (want finite, >= 0)", what, v)
	}
	return nil
}

func (s *JobSpec) validate() error {
	if err := checkText("name", s.Name); err != nil {
		return err
	}
	if err := checkText("app", s.App); err != nil {
		return err
	}
	if err := checkText("checkpoint dir", s.CheckpointDir); err != nil {
		return err
	}
	if s.ResumeFrom != "" {
		if err := checkID("resumed job", s.ResumeFrom); err != nil {
			return err
		}
	}
	if len(s.Command) == 0 && s.App == "" {
		return invalid("job has neither a command nor an emulated app")
	}
	if len(s.Command) > maxArgs {
		return invalid("command of %d arguments (limit %d)", len(s.Command), maxArgs)
	}
	for _, a := range s.Command {
		if err := checkText("command argument", a); err != nil {
			return err
		}
	}
	if s.MinReplicas < 1 || s.MaxReplicas < s.MinReplicas {
		return invalid("replicas [%d, %d] (want 1 <= min <= max)", s.MinReplicas, s.MaxReplicas)
	}
	if err := s.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return checkSpecAttrs(s)
}

func (c *SubmitJob) validate() error {
	if err := checkID("job", c.ID); err != nil {
		return err
	}
	switch r := c.Spec.ResumeFrom; {
	case r != "" && !c.Owned:
		return invalid("job %q resumes from %q in a submission without the tenancy rules", c.ID, r)
	case r == c.ID:
		return invalid("job %q resumes from itself", c.ID)
	}
	if err := checkBy(c.Submitter); err != nil {
		return err
	}
	if err := checkKey(c.Key); err != nil {
		return err
	}
	if c.Key != "" && !c.Owned {
		return invalid("job %q: an idempotency key in a submission without the tenancy rules", c.ID)
	}
	if err := checkNonNeg("submit time", c.SubmitTime); err != nil {
		return err
	}
	return c.Spec.validate()
}

func (c *UpdateJob) validate() error {
	if err := checkID("job", c.ID); err != nil {
		return err
	}
	if c.Set == 0 || c.Set&^(UpdateState|UpdateAttained|UpdateEpoch|UpdateProgress) != 0 {
		return invalid("update field set %#x", c.Set)
	}
	if c.Set&UpdateState != 0 && (!c.State.valid() || c.State.Terminal()) {
		return invalid("update to state %v (finish a job with CompleteJob)", c.State)
	}
	if err := checkNonNeg("attained", c.Attained); err != nil {
		return err
	}
	if c.Epoch < 0 {
		return invalid("epoch %d", c.Epoch)
	}
	return checkNonNeg("progress", c.Progress)
}

func (c *CompleteJob) validate() error {
	if err := checkID("job", c.ID); err != nil {
		return err
	}
	if err := checkText("reason", c.Reason); err != nil {
		return err
	}
	return checkNonNeg("finish time", c.FinishTime)
}

func (e *ProfileEntry) validate() error {
	if err := e.ProfilePoint.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if e.Count == 0 || e.Count > 1<<40 {
		return invalid("profile count %d", e.Count)
	}
	if e.Racks == 1 {
		return invalid("profile entry of 1 rack (one rack is 0)")
	}
	return nil
}

func (c *RecordProfile) validate() error {
	if err := checkID("job", c.ID); err != nil {
		return err
	}
	if len(c.Entries) == 0 && !c.HasGrad {
		return invalid("profile record with neither entries nor gradient statistics")
	}
	if len(c.Entries) > maxProfile {
		return invalid("%d profile entries (limit %d)", len(c.Entries), maxProfile)
	}
	for i := range c.Entries {
		if err := c.Entries[i].validate(); err != nil {
			return err
		}
		if c.Entries[i].GPUType != "" {
			return invalid("profile record entry of GPU type %q (typed measurements go through a Round)", c.Entries[i].GPUType)
		}
		if c.Entries[i].Racks != 0 {
			return invalid("profile record entry across %d racks (measurements across racks go through a Round)", c.Entries[i].Racks)
		}
	}
	if c.HasGrad {
		if err := checkNonNeg("grad_sqr", c.Grad.GradSqr); err != nil {
			return err
		}
		if err := checkNonNeg("grad_var", c.Grad.GradVar); err != nil {
			return err
		}
	} else if c.Grad != (goodput.GradStats{}) {
		return invalid("gradient statistics given without HasGrad")
	}
	return nil
}

func (c *CommitAllocation) validate() error {
	if c.Generation == 0 || c.Term == 0 {
		return invalid("allocation generation %d, term %d (want both > 0)", c.Generation, c.Term)
	}
	if len(c.Jobs) > maxList {
		return invalid("allocation of %d jobs", len(c.Jobs))
	}
	for _, id := range slices.Sorted(maps.Keys(c.Jobs)) {
		slots := c.Jobs[id]
		if err := checkID("job", id); err != nil {
			return err
		}
		if len(slots) == 0 {
			return invalid("job %q with an empty placement (omit it instead)", id)
		}
		seen := make(map[string]bool, len(slots))
		for _, s := range slots {
			if err := checkID("node", s.Node); err != nil {
				return err
			}
			if s.GPUs < 1 {
				return invalid("job %q given %d GPUs on node %q", id, s.GPUs, s.Node)
			}
			if seen[s.Node] {
				return invalid("job %q placed twice on node %q", id, s.Node)
			}
			seen[s.Node] = true
		}
	}
	return nil
}

func (c *RegisterNode) validate() error {
	n := &c.Node
	if err := checkID("node", n.ID); err != nil {
		return err
	}
	if err := checkText("rack", n.Rack); err != nil {
		return err
	}
	if len(n.Addresses) > maxAddresses {
		return invalid("node %q has %d addresses (limit %d)", n.ID, len(n.Addresses), maxAddresses)
	}
	for _, a := range n.Addresses {
		if err := checkText("address", a); err != nil {
			return err
		}
	}
	if n.GPUs < 0 || n.GPUs > 1024 {
		return invalid("node %q with %d GPUs", n.ID, n.GPUs)
	}
	if !n.Health.valid() {
		return invalid("node health %d", n.Health)
	}
	return checkNodeAttrs(n)
}

func (c *MarkNode) validate() error {
	if err := checkID("node", c.ID); err != nil {
		return err
	}
	if !c.Health.valid() {
		return invalid("node health %d", c.Health)
	}
	return nil
}
