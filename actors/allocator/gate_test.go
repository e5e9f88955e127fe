package allocator

import (
	"slices"
	"testing"
	"time"

	"pollux/actors/pb"
)

func TestGateWaitsUntilNoOlderIncarnationCanRun(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const wait = 3 * time.Second // a lease of 2 s and its margin
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// ack is node n's answer at term 7 and generation gen, running runs.
	ack := func(term, gen uint64, runs ...*pb.RunStatus) *pb.AssignAck {
		return &pb.AssignAck{Ok: true, Term: term, Generation: gen, Runs: runs}
	}
	run := func(inc uint64, alive uint32) *pb.RunStatus {
		return &pb.RunStatus{Job: "j", Incarnation: inc, Alive: alive}
	}
	k := incKey{"j", 3}
	// This leader's assignments listed job j to a and b up to generation
	// 20 (unless a case says otherwise).
	both := map[string]map[string]uint64{"a": {"j": 20}, "b": {"j": 20}}
	for _, c := range []struct {
		name    string
		key     incKey
		now     time.Time
		acks    map[string]*pb.AssignAck
		at      map[string]time.Time
		listed  map[string]map[string]uint64
		open    bool
		until   time.Time
		waiting []string
	}{
		{name: "a first incarnation: nothing older ever ran", key: incKey{"j", 1}, now: ms(0), open: true},
		{name: "no ack from a or b in this leadership: wait from its start", now: ms(2999), open: false,
			until: ms(3000), waiting: []string{"a", "b"}},
		{name: "... until the lease and margin have passed since it began", now: ms(3000), open: true},
		{name: "both answered at the generation, nothing older alive", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20, run(2, 0)), "b": ack(7, 21)}, open: true},
		{name: "a still runs incarnation 2 (being stopped): wait for a's lease from its last ack", now: ms(4000),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20, run(2, 1)), "b": ack(7, 20)}, at: map[string]time.Time{"a": ms(1500)},
			open: false, until: ms(4500), waiting: []string{"a"}},
		{name: "... which has ended", now: ms(4500),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20, run(2, 1)), "b": ack(7, 20)}, at: map[string]time.Time{"a": ms(1500)}, open: true},
		{name: "a pending older run could still start", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20, &pb.RunStatus{Job: "j", Incarnation: 2, Pending: true}), "b": ack(7, 20)},
			at:   map[string]time.Time{"a": ms(5)}, open: false, until: ms(3005), waiting: []string{"a"}},
		{name: "a refused run never ran", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20, &pb.RunStatus{Job: "j", Incarnation: 2, Refused: "ran"}), "b": ack(7, 20)}, open: true},
		{name: "b answered an older generation: it may not have stopped incarnation 2", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20), "b": ack(7, 19)}, at: map[string]time.Time{"b": ms(8)},
			open: false, until: ms(3008), waiting: []string{"b"}},
		{name: "b answered in another term", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20), "b": ack(6, 25)}, open: false, until: ms(3000), waiting: []string{"b"}},
		{name: "b, never assigned j by this leader, answered in this term without it", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20), "b": ack(7, 12)}, listed: map[string]map[string]uint64{"a": {"j": 20}}, open: true},
		{name: "... but an older incarnation it runs from an earlier leader's assignment counts", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20), "b": ack(7, 12, run(1, 1))}, listed: map[string]map[string]uint64{"a": {"j": 20}},
			open: false, until: ms(3000), waiting: []string{"b"}},
		{name: "a node already runs incarnation 3: a leader let it start", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(6, 19, run(3, 1)), "b": ack(6, 19, run(2, 1))}, open: true},
		{name: "a was sent j at a generation it has not answered yet", now: ms(10),
			acks: map[string]*pb.AssignAck{"a": ack(7, 20), "b": ack(7, 25)}, listed: map[string]map[string]uint64{"a": {"j": 21}, "b": {"j": 25}},
			open: false, until: ms(3000), waiting: []string{"a"}},
	} {
		key := c.key
		if key == (incKey{}) {
			key = k
		}
		listed := c.listed
		if listed == nil {
			listed = both
		}
		v := &gateView{now: c.now, start: t0, wait: wait, term: 7, acks: c.acks, at: c.at, listed: listed, nodes: []string{"a", "b"}}
		open, until, waiting := v.open(key)
		if open != c.open || !until.Equal(c.until) || !slices.Equal(waiting, c.waiting) {
			t.Errorf("%s: open %v until %v waiting %v, want %v until %v waiting %v", c.name, open, until.Sub(t0), waiting,
				c.open, c.until.Sub(t0), c.waiting)
		}
	}
}
