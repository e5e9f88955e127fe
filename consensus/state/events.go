package state

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"pollux/cluster/federation"
)

// EventType is what an event records.
type EventType uint8

// Event types. Zero is not a type (it never appears on the wire); values
// are never reused.
const (
	// EventSubmitted: a job was submitted.
	EventSubmitted EventType = 1 + iota
	// EventPlaced: a job without GPUs was given some.
	EventPlaced
	// EventResized: a job's placement changed from one non-empty
	// placement to another (its workers restart).
	EventResized
	// EventRestarted: a job's failed workers restart on the same
	// placement.
	EventRestarted
	// EventPreempted: a job lost all its GPUs and waits again.
	EventPreempted
	// EventCompleted, EventFailed, EventCancelled: a job finished.
	EventCompleted
	EventFailed
	EventCancelled
	// EventNodeLost: a node was marked dead or left the cluster.
	EventNodeLost
	// EventNodeJoined: a node registered for the first time, or again
	// after it was lost (snapshots of version 13 on, as every type after
	// it).
	EventNodeJoined
	// EventNodeDrained: the autoscaler took a node out of placement to
	// give it back.
	EventNodeDrained
	// EventLeaderChanged: a new leader (a new Raft term) committed its
	// first round.
	EventLeaderChanged
	// EventLeaseGranted, EventLeaseReclaimed: a lease of the federation
	// was granted, or reclaimed by its lender.
	EventLeaseGranted
	EventLeaseReclaimed
	// EventCheckpointed: a job's workers saved a checkpoint later than
	// the last one the state records (at most one per job per round:
	// the latest of the round's measurement). Only the latest of each
	// incarnation is kept: a newer one of the same incarnation replaces
	// it, so that frequent checkpoints do not push a job's other events
	// out of its history (snapshots of version 15 on).
	EventCheckpointed
)

var eventTypeNames = [...]string{"", "submitted", "placed", "resized", "restarted", "preempted", "completed", "failed", "cancelled", "node_lost",
	"node_joined", "node_drained", "leader_changed", "lease_granted", "lease_reclaimed", "checkpointed"}

// lastV12Event is the last event type snapshots of versions 12 and 13
// hold, lastV14Event the last one snapshots of version 14 hold.
const (
	lastV12Event = EventNodeLost
	lastV14Event = EventLeaseReclaimed
)

func (t EventType) String() string {
	if t.valid() {
		return eventTypeNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

func (t EventType) valid() bool { return t >= EventSubmitted && t <= EventCheckpointed }

// eventKind is what an event of a type is about.
type eventKind uint8

const (
	aboutJob     eventKind = iota // a job: Job set, Node empty
	aboutNode                     // a node: Node set, Job empty
	aboutCluster                  // the cluster: neither
)

func (t EventType) kind() eventKind {
	switch t {
	case EventNodeLost, EventNodeJoined, EventNodeDrained:
		return aboutNode
	case EventLeaderChanged, EventLeaseGranted, EventLeaseReclaimed:
		return aboutCluster
	}
	return aboutJob
}

// EventTypeNames lists the names of every event type, in type order.
func EventTypeNames() []string { return slices.Clone(eventTypeNames[1:]) }

// ParseEventType is the type named name (EventType.String), or false.
func ParseEventType(name string) (EventType, bool) {
	i := slices.Index(eventTypeNames[:], name)
	if i <= 0 {
		return 0, false
	}
	return EventType(i), true
}

// Event is one entry of the cluster's history: a state change that
// matters to a user, written by the same command as the change.
type Event struct {
	// Seq numbers the events of the cluster from 1, in log order.
	Seq uint64
	// Time is the proposer's clock of the command that made the event
	// (seconds); a command without a clock takes the last round's.
	Time float64
	Type EventType
	// Job is the job the event is about ("" for a node's event) and
	// Node the node a node's event is about ("" otherwise).
	Job  string
	Node string
	// Reason says what happened and why, for a person.
	Reason string
}

// Retention of events: the state keeps the last MaxJobEvents of each job
// and the last MaxEvents of the cluster, in at most MaxEventBytes; older
// ones are dropped when newer ones are appended. The bound does not
// depend on the state budget they count against, so that lowering the
// budget never frees room by dropping events.
const (
	MaxJobEvents  = 64
	MaxEvents     = 8192
	MaxEventBytes = 2 << 20
	// maxEventReason bounds an event's reason (longer ones are cut).
	maxEventReason = 512
	// eventOverhead is what an event counts against the state budget
	// beyond its strings.
	eventOverhead = 24
)

// Events is the cluster's bounded history of events, in sequence order.
type Events struct {
	// last is the sequence number of the last event ever appended (0:
	// none); it outlives the events retention drops.
	last uint64
	// list holds the events from head on, in sequence order; an event
	// retention dropped after head is a hole (its Seq kept, Type 0)
	// until the list is compacted, so that dropping is O(1).
	list []Event
	head int
	// n counts the events held, perJob those of each job, and bytes
	// what they count against the state budget (all derived from list).
	n      int
	perJob map[string]int
	bytes  int64
	// lastCk is, per job, the sequence number of its latest
	// checkpointed event held (derived from list).
	lastCk map[string]uint64
}

// LastSeq is the sequence number of the last event appended (0: none).
func (e *Events) LastSeq() uint64 { return e.last }

// Bytes is what the events count against the state budget.
func (e *Events) Bytes() int64 { return e.bytes }

// Len is how many events the state holds.
func (e *Events) Len() int { return e.n }

// Since returns up to limit events (all when limit <= 0) after sequence
// number since, of job only unless job is "", oldest first.
func (e *Events) Since(job string, since uint64, limit int) []Event {
	live := e.list[e.head:]
	i, found := slices.BinarySearchFunc(live, since, func(ev Event, seq uint64) int { return cmp.Compare(ev.Seq, seq) })
	if found {
		i++
	}
	var out []Event
	for _, ev := range live[i:] {
		if limit > 0 && len(out) == limit {
			break
		}
		if ev.Type != 0 && (job == "" || ev.Job == job) {
			out = append(out, ev)
		}
	}
	return out
}

func eventSize(ev *Event) int64 {
	return eventOverhead + int64(len(ev.Job)+len(ev.Node)+len(ev.Reason))
}

// add appends ev with the next sequence number, then applies retention.
func (e *Events) add(ev Event) {
	ev.Reason = cutReason(ev.Reason)
	e.last++
	ev.Seq = e.last
	if e.perJob == nil {
		e.perJob = map[string]int{}
	}
	if ev.Job != "" && e.perJob[ev.Job] >= MaxJobEvents {
		for i := e.head; i < len(e.list); i++ {
			if e.list[i].Type != 0 && e.list[i].Job == ev.Job {
				e.drop(i)
				break
			}
		}
	}
	e.list = append(e.list, ev)
	e.n++
	e.bytes += eventSize(&ev)
	if ev.Job != "" {
		e.perJob[ev.Job]++
	}
	if ev.Type == EventCheckpointed {
		if e.lastCk == nil {
			e.lastCk = map[string]uint64{}
		}
		e.lastCk[ev.Job] = ev.Seq
	}
	for e.n > 1 && (e.n > MaxEvents || e.bytes > MaxEventBytes) {
		e.drop(e.head)
	}
	if holes := len(e.list) - e.n; holes >= 64 && holes > len(e.list)/2 {
		e.list, e.head = e.held(), 0
	}
}

// drop makes the i-th event a hole and moves head past the holes at the
// front.
func (e *Events) drop(i int) {
	ev := &e.list[i]
	e.n--
	e.bytes -= eventSize(ev)
	if ev.Job != "" {
		if e.perJob[ev.Job]--; e.perJob[ev.Job] == 0 {
			delete(e.perJob, ev.Job)
		}
	}
	if ev.Type == EventCheckpointed && e.lastCk[ev.Job] == ev.Seq {
		delete(e.lastCk, ev.Job)
	}
	e.list[i] = Event{Seq: ev.Seq}
	for e.head < len(e.list) && e.list[e.head].Type == 0 {
		e.list[e.head] = Event{}
		e.head++
	}
}

// dropCheckpointed drops job's latest checkpointed event, if held.
func (e *Events) dropCheckpointed(job string) {
	seq, ok := e.lastCk[job]
	if !ok {
		return
	}
	live := e.list[e.head:]
	if i, found := slices.BinarySearchFunc(live, seq, func(ev Event, seq uint64) int { return cmp.Compare(ev.Seq, seq) }); found {
		e.drop(e.head + i)
	}
}

// held is a new list of the events held, without holes.
func (e *Events) held() []Event {
	out := make([]Event, 0, e.n)
	for _, ev := range e.list[e.head:] {
		if ev.Type != 0 {
			out = append(out, ev)
		}
	}
	return out
}

// forget drops the events of the jobs in gone (pruned jobs).
func (e *Events) forget(gone map[string]bool) {
	if len(gone) == 0 {
		return
	}
	e.list = slices.DeleteFunc(e.held(), func(ev Event) bool { return gone[ev.Job] })
	e.head = 0
	e.recount()
}

// recount derives n, perJob, bytes and lastCk from list.
func (e *Events) recount() {
	e.n, e.perJob, e.bytes, e.lastCk = 0, map[string]int{}, 0, map[string]uint64{}
	for i := e.head; i < len(e.list); i++ {
		ev := &e.list[i]
		if ev.Type == 0 {
			continue
		}
		e.n++
		e.bytes += eventSize(ev)
		if ev.Job != "" {
			e.perJob[ev.Job]++
		}
		if ev.Type == EventCheckpointed {
			e.lastCk[ev.Job] = ev.Seq
		}
	}
}

func (e *Events) clone() Events {
	return Events{last: e.last, list: e.held(), n: e.n, perJob: maps.Clone(e.perJob), bytes: e.bytes, lastCk: maps.Clone(e.lastCk)}
}

// cutReason cuts a reason to maxEventReason bytes at a rune boundary.
func cutReason(s string) string {
	if len(s) <= maxEventReason {
		return s
	}
	n := maxEventReason - len("...")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// emit appends an event about job (or, with job "", node) to s.
func emit(s *State, t EventType, at float64, job, node, reason string) {
	s.Events.add(Event{Time: at, Type: t, Job: job, Node: node, Reason: reason})
}

// slotsText describes slots: "4 GPUs on n1 (2), n2 (2)".
func slotsText(slots []Slot) string {
	k := 0
	parts := make([]string, 0, len(slots))
	for _, sl := range slots {
		k += sl.GPUs
		parts = append(parts, fmt.Sprintf("%s (%d)", sl.Node, sl.GPUs))
	}
	unit := "GPUs"
	if k == 1 {
		unit = "GPU"
	}
	return fmt.Sprintf("%d %s on %s", k, unit, strings.Join(parts, ", "))
}

// batchText describes the batch configuration j's bid chooses on slots
// ("" without a bid for that shape).
func batchText(j *Job, slots []Slot) string {
	k := 0
	for _, sl := range slots {
		k += sl.GPUs
	}
	c, ok := j.Bid.Choice(len(slots), k)
	if !ok {
		return ""
	}
	return fmt.Sprintf("; local batch %d, %d accumulation steps, gain %.3g", c.LocalBatch, c.AccumSteps, c.Gain)
}

// lostNode is the first node of slots that is dead or gone from s ("" if
// none).
func lostNode(s *State, slots []Slot) string {
	for _, sl := range slots {
		if n, ok := s.Nodes[sl.Node]; (ok && (n.Health == Dead || n.Health == Left)) || (!ok && !borrowedID(sl.Node)) {
			return sl.Node
		}
	}
	return ""
}

// emitReallocation records what reallocate did to job j, whose slots go
// from old to cur, at generation gen; restart says its workers failed,
// note why the leader chose the allocation.
func emitReallocation(s *State, j *Job, old, cur []Slot, restart bool, gen uint64, at float64, note string) {
	why := fmt.Sprintf("the allocator's new allocation (generation %d)", gen)
	if note != "" {
		why = fmt.Sprintf("the allocator's new allocation (generation %d: %s)", gen, note)
	}
	if restart {
		why = fmt.Sprintf("its workers failed (%d in a row)", j.Crashes)
	} else if n := lostNode(s, old); n != "" {
		why = fmt.Sprintf("node %s was lost", n)
	}
	switch {
	case len(cur) == 0:
		emit(s, EventPreempted, at, j.ID, "", fmt.Sprintf("lost its %s: %s", slotsText(old), why))
	case len(old) == 0:
		emit(s, EventPlaced, at, j.ID, "", fmt.Sprintf("placed on %s (generation %d, incarnation %d)%s", slotsText(cur), gen, j.Incarnation, batchText(j, cur)))
	case slices.Equal(old, cur):
		emit(s, EventRestarted, at, j.ID, "", fmt.Sprintf("restarted on %s (incarnation %d): %s", slotsText(cur), j.Incarnation, why))
	default:
		emit(s, EventResized, at, j.ID, "", fmt.Sprintf("resized from %s to %s (incarnation %d): %s%s", slotsText(old), slotsText(cur), j.Incarnation, why, batchText(j, cur)))
	}
}

// finishEvent is the event type of a job finishing in state st.
func finishEvent(st JobState) EventType {
	switch st {
	case Failed:
		return EventFailed
	case Cancelled:
		return EventCancelled
	}
	return EventCompleted
}

// encodeEvents writes the events (snapshots of version 12 on).
func encodeEvents(w *writer, e *Events) {
	w.uvarint(e.last)
	w.uvarint(uint64(e.n))
	for i := e.head; i < len(e.list); i++ {
		if e.list[i].Type != 0 {
			encodeEvent(w, &e.list[i])
		}
	}
}

func encodeEvent(w *writer, ev *Event) {
	w.uvarint(ev.Seq)
	w.f64(ev.Time)
	w.byte(byte(ev.Type))
	w.str(ev.Job)
	w.str(ev.Node)
	w.str(ev.Reason)
}

// decodeEvents reads what encodeEvents wrote in a snapshot of version
// and checks it: sequence numbers increasing up to the last, types the
// version knows, retention kept.
func decodeEvents(r *reader, version byte) (Events, error) {
	var e Events
	e.last = r.uvarint()
	n := r.length(MaxEvents)
	if n > 0 {
		e.list = make([]Event, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		var ev Event
		ev.Seq = r.uvarint()
		ev.Time = r.f64()
		ev.Type = EventType(r.byte())
		ev.Job, ev.Node, ev.Reason = r.str(), r.str(), r.str()
		if r.err != nil {
			break
		}
		if err := ev.validate(); err != nil {
			return Events{}, err
		}
		if (version < 14 && ev.Type > lastV12Event) || (version < 15 && ev.Type > lastV14Event) {
			return Events{}, invalid("event %d of type %v in a snapshot of version %d", ev.Seq, ev.Type, version)
		}
		if ev.Seq > e.last || (i > 0 && ev.Seq <= e.list[i-1].Seq) {
			return Events{}, fmt.Errorf("%w: event %d out of order (last %d)", ErrMalformed, ev.Seq, e.last)
		}
		e.list = append(e.list, ev)
	}
	if r.err != nil {
		return Events{}, r.err
	}
	e.recount()
	for job, k := range e.perJob {
		if k > MaxJobEvents {
			return Events{}, invalid("job %q has %d events (limit %d)", job, k, MaxJobEvents)
		}
	}
	return e, nil
}

// validate checks an event read from a snapshot.
func (ev *Event) validate() error {
	switch {
	case ev.Seq == 0:
		return invalid("event of sequence number 0")
	case !ev.Type.valid():
		return invalid("event %d of type %d", ev.Seq, ev.Type)
	case (ev.Type.kind() == aboutJob) != (ev.Job != "") || (ev.Type.kind() == aboutNode) != (ev.Node != ""):
		return invalid("event %d (%v) of job %q and node %q", ev.Seq, ev.Type, ev.Job, ev.Node)
	case len(ev.Reason) > maxEventReason:
		return invalid("event %d reason of %d bytes (limit %d)", ev.Seq, len(ev.Reason), maxEventReason)
	}
	if ev.Job != "" {
		if err := checkID("event job", ev.Job); err != nil {
			return err
		}
	}
	if ev.Node != "" {
		if err := checkID("event node", ev.Node); err != nil {
			return err
		}
	}
	return checkNonNeg("event time", ev.Time)
}

// joinReason describes node n registering, after old (nil: never seen).
func joinReason(old, n *Node) string {
	what := fmt.Sprintf("node %s joined with %d GPUs", n.ID, n.GPUs)
	if n.GPUType != "" {
		what += " of type " + n.GPUType
	}
	if n.Rack != "" {
		what += " in rack " + n.Rack
	}
	if old != nil {
		what += fmt.Sprintf(" (again: it was %v)", old.Health)
	}
	return what
}

// emitLeader records that the round c, of a term newer than the last
// allocation's (prev), is the first its leader commits.
func emitLeader(s *State, c *Round, prev uint64) {
	who := "a new leader"
	if c.Leader != "" {
		who = "server " + c.Leader
	}
	why := fmt.Sprintf("%s leads in term %d and committed its first round (generation %d)", who, c.Term, c.Generation)
	if prev > 0 {
		why += fmt.Sprintf("; the last allocation was of term %d", prev)
	}
	emit(s, EventLeaderChanged, c.Time, "", "", why)
}

// emitLease records what the federation command c did to the leases
// (the ledger's answer, ls).
func emitLease(s *State, c *federation.Command, ls []federation.Lease) {
	for i := range ls {
		l := &ls[i]
		nodes := make([]string, 0, len(l.Nodes))
		for _, n := range l.Nodes {
			nodes = append(nodes, fmt.Sprintf("%s (%d)", n.Node, n.GPUs))
		}
		what := fmt.Sprintf("lease %s: %s lends %s %d GPUs on %s", l.ID, l.Lender, l.Borrower, l.GPUs(), strings.Join(nodes, ", "))
		switch c.Op {
		case federation.OpGrant:
			emit(s, EventLeaseGranted, c.At, "", "", fmt.Sprintf("%s, for %.0f s unless renewed", what, l.TTL))
		case federation.OpReclaim:
			why := "its own jobs need the GPUs"
			if c.Reason == federation.ReasonRebalance {
				why = "another peer gains clearly more from them"
			}
			emit(s, EventLeaseReclaimed, c.At, "", "", fmt.Sprintf("%s; reclaimed by %s: %s", what, l.Lender, why))
		}
	}
}
