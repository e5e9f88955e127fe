package state

import (
	"fmt"
	"maps"
	"slices"
)

// Autoscaling: the leader commits each size decision, naming the
// machines, before any provider is asked to act on it; a ScaleDecision is
// fenced by its term like a Round. Only the leader of the term that
// committed a request asks the provider, once (docs/autoscaling.md,
// "Failover: decided once, acted on once").

// Command types 28..31 are autoscaling's.
const (
	typeScaleDecision byte = 28
	typeScaleUpdate   byte = 29
)

// ScalePhase is where a machine the autoscaler manages is in its life.
type ScalePhase uint8

// The phases. Zero is not a phase.
const (
	// ScaleBooting: asked for, not registered yet.
	ScaleBooting ScalePhase = 1 + iota
	// ScaleUp: registered and placeable.
	ScaleUp
	// ScaleDraining: excluded from placement; removed by the provider
	// once it holds nothing.
	ScaleDraining
)

var scalePhaseNames = [...]string{"", "booting", "up", "draining"}

func (p ScalePhase) String() string {
	if p >= ScaleBooting && p <= ScaleDraining {
		return scalePhaseNames[p]
	}
	return fmt.Sprintf("ScalePhase(%d)", uint8(p))
}

func (p ScalePhase) valid() bool { return p >= ScaleBooting && p <= ScaleDraining }

// maxScaleNodes bounds the machines the autoscaler manages at once.
const maxScaleNodes = 4096

// ScaleNode is one machine the autoscaler asked for.
type ScaleNode struct {
	Name  string
	Phase ScalePhase
	// Term is the Raft term of the decision that put it in its phase:
	// only that term's leader asks the provider to add a booting node.
	Term uint64
	// Since is the proposer's clock (seconds) when it entered its phase.
	Since float64
	// Asked is the proposer's clock (seconds) when the machine was asked
	// for: it is paid for from then until it is removed. (A snapshot of
	// version 4 did not keep it: there it is Since, when the machine
	// entered its present phase.)
	Asked float64
}

// Scale is the autoscaler's replicated state.
type Scale struct {
	// Desired is the last committed desired cluster size (0: none yet).
	Desired int
	// Seq counts the machines ever asked for: the next is named
	// ScaleNodeName(prefix, Seq+1).
	Seq uint64
	// Nodes are the machines being added, up, or being drained, by name.
	Nodes map[string]*ScaleNode
	// Billed is the machine-seconds of the machines already removed,
	// each from its request to its removal (on the proposers' clocks).
	Billed float64
}

func (s Scale) clone() Scale {
	c := Scale{Desired: s.Desired, Seq: s.Seq, Billed: s.Billed}
	if len(s.Nodes) > 0 {
		c.Nodes = make(map[string]*ScaleNode, len(s.Nodes))
		for id, n := range s.Nodes {
			cn := *n
			c.Nodes[id] = &cn
		}
	}
	return c
}

// Names returns the managed machines' names, sorted.
func (s Scale) Names() []string { return slices.Sorted(maps.Keys(s.Nodes)) }

// NodeSeconds is the machine-seconds the autoscaler's machines were paid
// for up to now (seconds on the proposers' clocks): the removed ones
// (Billed) and those still managed, each from its request.
func (s Scale) NodeSeconds(now float64) float64 {
	total := s.Billed
	for _, m := range s.Nodes {
		total += max(0, now-m.Asked)
	}
	return total
}

// ScaleDecision commits an autoscaling decision: the desired size, the
// machines to ask the provider for (Add, new names, booting) and the
// machines to drain (Drain, managed machines that are up). Term must be
// the term of the log entry that carries it, so a deposed leader's
// decision is refused (ErrStaleTerm).
type ScaleDecision struct {
	Term    uint64
	Time    float64
	Desired int
	Add     []string
	Drain   []string
}

// Outcomes of a ScaleUpdate.
const (
	// ScaleJoined: a booting machine registered; it is up.
	ScaleJoined uint8 = 1
	// ScaleRemoved: the provider removed the machine (drained, or given
	// up after it never joined); it is forgotten.
	ScaleRemoved uint8 = 2
)

// ScaleUpdate records what became of a managed machine. Term must be the
// term of its log entry.
type ScaleUpdate struct {
	Term    uint64
	Time    float64
	Name    string
	Outcome uint8
	Reason  string
}

func (c *ScaleDecision) kind() byte { return typeScaleDecision }
func (c *ScaleDecision) encode(w *writer) {
	w.uvarint(c.Term)
	w.f64(c.Time)
	w.int(c.Desired)
	w.strs(c.Add)
	w.strs(c.Drain)
}
func (c *ScaleDecision) decode(r *reader) {
	c.Term = r.uvarint()
	c.Time = r.f64()
	c.Desired = r.int()
	c.Add = r.strs(maxScaleNodes)
	c.Drain = r.strs(maxScaleNodes)
}

// checkStamp checks the term and time every scale command carries.
func checkStamp(what string, term uint64, t float64) error {
	if term == 0 {
		return invalid("%s of term 0", what)
	}
	return checkNonNeg(what+" time", t)
}

func (c *ScaleDecision) validate() error {
	if err := checkStamp("scale decision", c.Term, c.Time); err != nil {
		return err
	}
	if c.Desired < 0 || c.Desired > MaxNodes {
		return invalid("desired size %d (want 0..%d)", c.Desired, MaxNodes)
	}
	if len(c.Add) > maxScaleNodes || len(c.Drain) > maxScaleNodes {
		return invalid("scale decision adding %d and draining %d machines (limit %d)", len(c.Add), len(c.Drain), maxScaleNodes)
	}
	seen := map[string]bool{}
	for _, n := range append(slices.Clone(c.Add), c.Drain...) {
		if err := checkID("node", n); err != nil {
			return err
		}
		if seen[n] {
			return invalid("scale decision names %q twice", n)
		}
		seen[n] = true
	}
	return nil
}

func (c *ScaleUpdate) kind() byte { return typeScaleUpdate }
func (c *ScaleUpdate) encode(w *writer) {
	w.uvarint(c.Term)
	w.f64(c.Time)
	w.str(c.Name)
	w.byte(c.Outcome)
	w.str(c.Reason)
}
func (c *ScaleUpdate) decode(r *reader) {
	c.Term = r.uvarint()
	c.Time = r.f64()
	c.Name = r.str()
	c.Outcome = r.byte()
	c.Reason = r.str()
}

func (c *ScaleUpdate) validate() error {
	if err := checkStamp("scale update", c.Term, c.Time); err != nil {
		return err
	}
	if err := checkID("node", c.Name); err != nil {
		return err
	}
	if c.Outcome != ScaleJoined && c.Outcome != ScaleRemoved {
		return invalid("scale update outcome %d", c.Outcome)
	}
	return checkText("reason", c.Reason)
}

func applyScaleDecision(s *State, c *ScaleDecision, term uint64) error {
	if c.Term != term {
		return fmtErr(ErrStaleTerm, "scale decision of term %d, appended in term %d", c.Term, term)
	}
	if len(s.Scale.Nodes)+len(c.Add) > maxScaleNodes {
		return fmtErr(ErrLimit, "the autoscaler manages %d machines; %d more would pass %d", len(s.Scale.Nodes), len(c.Add), maxScaleNodes)
	}
	for _, n := range c.Add {
		if s.Scale.Nodes[n] != nil {
			return invalid("machine %q is already managed (%v)", n, s.Scale.Nodes[n].Phase)
		}
		if nd := s.Nodes[n]; nd != nil && nd.Health != Left && nd.Health != Dead {
			return invalid("machine %q to add is a registered node", n)
		}
	}
	for _, n := range c.Drain {
		if m := s.Scale.Nodes[n]; m == nil || m.Phase != ScaleUp {
			return invalid("machine %q to drain is not a managed machine that is up", n)
		}
	}
	if s.Scale.Nodes == nil && len(c.Add) > 0 {
		s.Scale.Nodes = map[string]*ScaleNode{}
	}
	for _, n := range c.Add {
		s.Scale.Nodes[n] = &ScaleNode{Name: n, Phase: ScaleBooting, Term: c.Term, Since: c.Time, Asked: c.Time}
	}
	for _, n := range c.Drain {
		m := s.Scale.Nodes[n]
		m.Phase, m.Term, m.Since = ScaleDraining, c.Term, c.Time
		gpus := 0
		if nd := s.Nodes[n]; nd != nil {
			gpus = nd.GPUs
		}
		emit(s, EventNodeDrained, c.Time, "", n, fmt.Sprintf("node %s (%d GPUs) drained by the autoscaler: the cluster wants %d nodes (term %d)", n, gpus, c.Desired, c.Term))
	}
	s.Scale.Seq += uint64(len(c.Add))
	s.Scale.Desired = c.Desired
	return nil
}

func applyScaleUpdate(s *State, c *ScaleUpdate, term uint64) error {
	if c.Term != term {
		return fmtErr(ErrStaleTerm, "scale update of term %d, appended in term %d", c.Term, term)
	}
	m := s.Scale.Nodes[c.Name]
	if m == nil {
		return fmtErr(ErrUnknownNode, "%q is not a managed machine", c.Name)
	}
	switch c.Outcome {
	case ScaleJoined:
		if m.Phase != ScaleBooting {
			return invalid("machine %q joined while %v", c.Name, m.Phase)
		}
		m.Phase, m.Since = ScaleUp, c.Time
	case ScaleRemoved:
		s.Scale.Billed += max(0, c.Time-m.Asked)
		delete(s.Scale.Nodes, c.Name)
		if len(s.Scale.Nodes) == 0 {
			s.Scale.Nodes = nil
		}
	}
	return nil
}

// encodeScale writes the autoscaler's state (snapshots of version 4;
// version 5 adds every machine's request time and the billed seconds).
func encodeScale(w *writer, s *Scale) {
	w.int(s.Desired)
	w.uvarint(s.Seq)
	names := s.Names()
	w.uvarint(uint64(len(names)))
	for _, n := range names {
		m := s.Nodes[n]
		w.str(m.Name)
		w.byte(byte(m.Phase))
		w.uvarint(m.Term)
		w.f64(m.Since)
		w.f64(m.Asked)
	}
	w.f64(s.Billed)
}

func decodeScale(r *reader, version byte) (Scale, error) {
	s := Scale{Desired: r.int(), Seq: r.uvarint()}
	n := r.length(maxScaleNodes)
	prev := ""
	for i := 0; i < n && r.err == nil; i++ {
		m := &ScaleNode{Name: r.str(), Phase: ScalePhase(r.byte()), Term: r.uvarint(), Since: r.f64()}
		m.Asked = m.Since
		if version >= 5 {
			m.Asked = r.f64()
		}
		if r.err != nil {
			break
		}
		if err := checkID("node", m.Name); err != nil {
			return Scale{}, err
		}
		if !m.Phase.valid() || m.Term == 0 {
			return Scale{}, invalid("managed machine %q in phase %d of term %d", m.Name, m.Phase, m.Term)
		}
		if err := checkNonNeg("managed machine time", m.Since); err != nil {
			return Scale{}, err
		}
		if err := checkNonNeg("managed machine request time", m.Asked); err != nil {
			return Scale{}, err
		}
		if i > 0 && m.Name <= prev {
			r.fail("managed machine %q out of order", m.Name)
			break
		}
		prev = m.Name
		if s.Nodes == nil {
			s.Nodes = map[string]*ScaleNode{}
		}
		s.Nodes[m.Name] = m
	}
	if version >= 5 {
		s.Billed = r.f64()
	}
	if r.err == nil && (s.Desired < 0 || s.Desired > MaxNodes || s.Seq < uint64(len(s.Nodes))) {
		return Scale{}, invalid("autoscaler state: desired %d, %d machines asked for, %d managed", s.Desired, s.Seq, len(s.Nodes))
	}
	if r.err == nil {
		if err := checkNonNeg("billed machine-seconds", s.Billed); err != nil {
			return Scale{}, err
		}
	}
	return s, nil
}
