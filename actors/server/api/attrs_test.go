package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"pollux/cluster"
	"pollux/consensus/state"
)

// typedTest is a cluster of two racks and two GPU types: n1 (r1, t4, 4
// GPUs), n5 (r1, a100, 8 GPUs), n2 and n3 (r2, a100, 4 GPUs each); n4
// left.
func typedTest() (*API, *fakeBackend) {
	a, fb := newTest()
	fb.st.Nodes = map[string]*state.Node{
		"n1": {ID: "n1", GPUs: 4, Health: state.Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "t4"},
		"n2": {ID: "n2", GPUs: 4, Health: state.Alive, Rack: "r2", Topology: []string{"r2"}, GPUType: "a100"},
		"n3": {ID: "n3", GPUs: 4, Health: state.Dead, Rack: "r2", Topology: []string{"r2"}, GPUType: "a100"},
		"n4": {ID: "n4", GPUs: 64, Health: state.Left, Rack: "r9", Topology: []string{"r9"}, GPUType: "h100"},
		"n5": {ID: "n5", GPUs: 8, Health: state.Alive, Rack: "r1", Topology: []string{"r1"}, GPUType: "a100"},
	}
	return a, fb
}

func TestSubmitConstraints(t *testing.T) {
	a, fb := typedTest()
	tests := []struct {
		name, extra, mention string
		code                 int
	}{
		{"type and rack that fit", "gpu_type: a100\nmin_replicas: 8\ntopology: {required: rack}\n", `"id"`, http.StatusCreated},
		{"unknown type", "gpu_type: v100\n", `gpu_type = \"v100\": no node of the cluster has GPUs of this type (types: a100, t4)`, http.StatusBadRequest},
		{"type of a node that left", "gpu_type: h100\n", "no node of the cluster has GPUs of this type", http.StatusBadRequest},
		{"too many of a type", "gpu_type: t4\nmin_replicas: 5\n", "the cluster has 4 GPUs of type t4", http.StatusBadRequest},
		{"no rack has 9 GPUs of one type (r1 has 12 of two)", "min_replicas: 9\ntopology: {required: rack}\n", "but the largest rack (r1, a100 GPUs) has 8 (a job runs on one GPU type at a time)", http.StatusBadRequest},
		{"rack of a type too small", "gpu_type: t4\nmin_replicas: 4\ntopology: {required: rack}\n", `"id"`, http.StatusCreated},
		{"unknown level", "topology: {preferred: zone}\n", "not one of the cluster's levels (rack)", http.StatusBadRequest},
		{"preferred rack", "topology: {preferred: rack}\nmin_replicas: 12\n", `"id"`, http.StatusCreated},
	}
	for i, tc := range tests {
		body := strings.Replace(good, "name: j1", "name: j"+string(rune('a'+i)), 1) + tc.extra
		code, out := do(a, "POST", PathJobs, body)
		if code != tc.code || !strings.Contains(out, tc.mention) {
			t.Errorf("%s: %d %s, want %d mentioning %q", tc.name, code, out, tc.code, tc.mention)
		}
	}
	if j := fb.st.Jobs["ja"]; j == nil || j.Spec.GPUType != "a100" || j.Spec.Topology.Required != "rack" {
		t.Errorf("stored job %+v", j)
	}
	// A cluster without nodes yet cannot tell: it accepts.
	fb.st.Nodes = map[string]*state.Node{}
	if code, out := do(a, "POST", PathJobs, strings.Replace(good, "j1", "late", 1)+"gpu_type: v100\n"); code != http.StatusCreated {
		t.Errorf("no nodes yet: %d %s", code, out)
	}
}

func TestReadsShowAttributes(t *testing.T) {
	a, fb := typedTest()
	fb.st.Config.Levels = []string{"rack", "zone"}
	fb.st.Nodes["n1"].Topology = []string{"r1", "z1"}
	fb.st.Nodes["n2"].Topology = []string{"r2", "z1"}
	fb.st.Nodes["n3"].Topology = nil
	fb.st.Nodes["n3"].Rack = ""
	do(a, "POST", PathJobs, good+"gpu_type: a100\ntopology: {preferred: zone}\n")
	fb.st.Allocation.Jobs["j1"] = []state.Slot{{Node: "n2", GPUs: 3}}
	_, body := do(a, "GET", PathNodes, "")
	var nodes []Node
	if err := json.Unmarshal([]byte(body), &nodes); err != nil {
		t.Fatal(err)
	}
	want := map[string][3]string{"n1": {"r1", "rack=r1,zone=z1", "t4"}, "n2": {"r2", "rack=r2,zone=z1", "a100"}, "n3": {"default", "", "a100"}}
	for _, n := range nodes {
		if w, ok := want[n.ID]; ok && [3]string{n.Rack, n.Topology, n.GPUType} != w {
			t.Errorf("node %s: %+v, want %v", n.ID, n, w)
		}
	}
	if !strings.Contains(body, `"gpu_type":"t4"`) || !strings.Contains(body, `"topology":"rack=r1,zone=z1"`) {
		t.Errorf("nodes JSON %s", body)
	}
	_, body = do(a, "GET", PathJobs+"/j1", "")
	var j Job
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		t.Fatal(err)
	}
	if j.GPUType != "a100" || j.Topology == nil || j.Topology.Preferred != "zone" ||
		!slices.Equal(j.Placement, []SlotJSON{{Node: "n2", GPUs: 3, Rack: "r2", GPUType: "a100"}}) {
		t.Errorf("job %s", body)
	}
}

func TestPeersShowRacks(t *testing.T) {
	_, fb := newTest() // its token table: the peers need an admin token
	fb.servers = []raft.Server{{ID: "s1", Suffrage: raft.Voter}, {ID: "s2", Suffrage: raft.Voter}, {ID: "s3", Suffrage: raft.Voter}}
	members := []cluster.Member{
		{Name: "s1", Meta: cluster.Meta{Role: cluster.RoleServer, Rack: "r1", Topology: "rack=r1"}},
		{Name: "s2", Meta: cluster.Meta{Role: cluster.RoleServer, Rack: "r1", Topology: "rack=r1"}},
		{Name: "s3", Meta: cluster.Meta{Role: cluster.RoleServer}},
	}
	a := New("s1", Config{Backend: fb, Members: func() []cluster.Member { return members }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	_, body := do(a, "GET", PathPeers, "")
	var peers []Peer
	if err := json.Unmarshal([]byte(body), &peers); err != nil {
		t.Fatal(err)
	}
	if len(peers) != 3 || peers[0].Rack != "r1" || peers[0].Topology != "rack=r1" || peers[2].Rack != "default" {
		t.Fatalf("peers %s", body)
	}
	if rack, ids := RackMajority(peers); rack != "r1" || !slices.Equal(ids, []string{"s1", "s2"}) {
		t.Errorf("majority %q %v", rack, ids)
	}
}

func TestRackMajority(t *testing.T) {
	p := func(id, rack string, voter bool) Peer { return Peer{ID: id, Rack: rack, Voter: voter} }
	tests := []struct {
		name  string
		peers []Peer
		rack  string
	}{
		{"three racks", []Peer{p("a", "r1", true), p("b", "r2", true), p("c", "r3", true)}, ""},
		{"two of three", []Peer{p("a", "r1", true), p("b", "r2", true), p("c", "r2", true)}, "r2"},
		{"all default", []Peer{p("a", "default", true), p("b", "default", true), p("c", "default", true)}, "default"},
		{"half is no majority", []Peer{p("a", "r1", true), p("b", "r1", true), p("c", "r2", true), p("d", "r3", true)}, ""},
		{"a rack unknown", []Peer{p("a", "r1", true), p("b", "r1", true), p("c", "", true), p("d", "", true)}, ""},
		{"non-voters do not count", []Peer{p("a", "r1", true), p("b", "r2", true), p("c", "r3", true), p("d", "r1", false), p("e", "r1", false)}, ""},
		{"one voter", []Peer{p("a", "r1", true)}, ""},
	}
	for _, tt := range tests {
		if rack, _ := RackMajority(tt.peers); rack != tt.rack {
			t.Errorf("%s: %q, want %q", tt.name, rack, tt.rack)
		}
	}
}
