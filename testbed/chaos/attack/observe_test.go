package attack

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/actors/server/api"
)

func baseView() *view {
	return &view{leader: "s0", term: 3, peers: []string{"s0=a voter=true"}, nodes: map[string]string{"a0": "alive/2 GPUs"},
		jobs:    map[string]api.Job{"victim": {ID: "victim", State: "running", Incarnation: 1, Progress: 10}},
		workers: map[string]int{"victim": 2}}
}

func clone(v *view) *view {
	c := *v
	c.peers, c.files, c.down, c.tokens = slices.Clone(v.peers), slices.Clone(v.files), slices.Clone(v.down), slices.Clone(v.tokens)
	c.nodes, c.jobs, c.workers = maps.Clone(v.nodes), maps.Clone(v.jobs), maps.Clone(v.workers)
	return &c
}

// TestChanges: the observer reports every change of the state, but not
// what the cluster does by itself (progress, an election: a note), nor a
// job an attack submitted on purpose that ended as expected.
func TestChanges(t *testing.T) {
	tests := []struct {
		name         string
		edit         func(*view)
		expect       map[string]string
		change, note string
	}{
		{"nothing", func(*view) {}, nil, "", ""},
		{"progress", func(v *view) {
			v.jobs["victim"] = api.Job{ID: "victim", State: "running", Incarnation: 1, Progress: 99}
		}, nil, "", ""},
		{"election", func(v *view) { v.leader, v.term = "s1", 4 }, nil, "", "became s1 term 4"},
		{"completed", func(v *view) { v.jobs["victim"] = api.Job{ID: "victim", State: "completed", Incarnation: 1} }, nil, "to completed", ""},
		{"restarted", func(v *view) { v.jobs["victim"] = api.Job{ID: "victim", State: "running", Incarnation: 2} }, nil, "incarnation 2", ""},
		{"vanished", func(v *view) { delete(v.jobs, "victim") }, nil, "vanished", ""},
		{"new job", func(v *view) { v.jobs["x"] = api.Job{ID: "x", State: "pending"} }, nil, "job x appeared", ""},
		{"node", func(v *view) { v.nodes["a9"] = "alive/512 GPUs" }, nil, "a9", ""},
		{"peer", func(v *view) { v.peers = append(v.peers, "evil=b voter=true") }, nil, "evil", ""},
		{"token", func(v *view) { v.tokens = append(v.tokens, "abc evil role=admin revoked=false") }, nil, "API tokens", ""},
		{"crash", func(v *view) { v.down = []string{"agent/a0"} }, nil, "agent/a0", ""},
		{"file", func(v *view) { v.files = []string{"shell"} }, nil, "files [shell]", ""},
		{"denied as expected", func(v *view) {
			v.jobs["x"] = api.Job{ID: "x", State: "failed", Reason: "node a0 refuses to run it: no"}
		},
			map[string]string{"x": "refuses to run it"}, "", ""},
		{"expected, but it ran", func(v *view) { v.jobs["x"] = api.Job{ID: "x", State: "running"}; v.workers["x"] = 1 },
			map[string]string{"x": "refuses to run it"}, "job x is running", ""},
		{"expected, failed otherwise", func(v *view) { v.jobs["x"] = api.Job{ID: "x", State: "failed", Reason: "crashed"} },
			map[string]string{"x": "refuses to run it"}, "want failed", ""},
		{"a worker of no job", func(v *view) { v.workers["ghost"] = 1 }, nil, "worker processes of ghost", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := &target{expect: tc.expect, marker: "/m"}
			if tg.expect == nil {
				tg.expect = map[string]string{}
			}
			before := baseView()
			after := clone(before)
			tc.edit(after)
			changes, notes := tg.changes(before, after)
			if got := strings.Join(changes, "; "); (tc.change == "") != (got == "") || !strings.Contains(got, tc.change) {
				t.Errorf("changes %q, want one mentioning %q", got, tc.change)
			}
			if got := strings.Join(notes, "; "); (tc.note == "") != (got == "") || !strings.Contains(got, tc.note) {
				t.Errorf("notes %q, want one mentioning %q", got, tc.note)
			}
		})
	}
}

// TestLeaderChange: an election during a case fails it, unless the case
// is about availability and the cluster served again within its bound.
func TestLeaderChange(t *testing.T) {
	same := baseView()
	moved := clone(same)
	moved.leader, moved.term = "s1", 4
	tests := []struct {
		name   string
		bound  time.Duration
		after  *view
		served time.Duration
		fails  bool
	}{
		{"no election", 0, same, time.Minute, false},
		{"election in a case without a bound", 0, moved, time.Millisecond, true},
		{"election within the bound", 5 * time.Second, moved, 2 * time.Second, false},
		{"election past the bound", 5 * time.Second, moved, 6 * time.Second, true},
	}
	for _, tc := range tests {
		why := leaderChange(attack{name: tc.name, bound: tc.bound}, same, tc.after, tc.served)
		if (why != "") != tc.fails {
			t.Errorf("%s: %q, want failing %v", tc.name, why, tc.fails)
		}
	}
}

// TestNames: every case has a name of its own.
func TestNames(t *testing.T) {
	names := Names()
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] {
			t.Errorf("case name %q empty or repeated", n)
		}
		seen[n] = true
	}
	if len(names) < 54 { // the 45 of issue 12 and those of issue 26
		t.Errorf("%d cases", len(names))
	}
}
