package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"pollux/consensus"
)

// fakeBackend is a leader holding a state in memory.
type fakeBackend struct {
	st *consensus.State
}

func (f *fakeBackend) Leadership() (uint64, bool) { return 3, true }
func (f *fakeBackend) Leader() (raft.ServerID, raft.ServerAddress) {
	return "s1", "127.0.0.1:1"
}
func (f *fakeBackend) Read(context.Context) (*consensus.State, error) { return f.st, nil }
func (f *fakeBackend) LocalState() *consensus.State                   { return f.st }
func (f *fakeBackend) SubmitJob(_ context.Context, id string, spec consensus.JobSpec, t float64) error {
	if f.st.Jobs[id] != nil {
		return consensus.ErrJobExists
	}
	f.st.Jobs[id] = &consensus.Job{ID: id, Spec: spec, State: consensus.Pending, SubmitTime: t}
	return nil
}

func newTest() (*API, *fakeBackend) {
	fb := &fakeBackend{st: &consensus.State{Jobs: map[string]*consensus.Job{}, Nodes: map[string]*consensus.Node{
		"n1": {ID: "n1", GPUs: 4, Health: consensus.Alive, Rack: "r1", Addresses: []string{"127.0.0.1:9"}},
	}, Allocation: consensus.Allocation{Generation: 2, Jobs: map[string][]consensus.Slot{}}}}
	return New("s1", Config{Backend: fb, Apps: []string{"cifar10"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), fb
}

func do(a *API, method, path, body string) (int, string) {
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

const good = "name: j1\napplication: cifar10\ninit_batch_size: 128\nmax_batch_size: 1024\nmax_local_batch_size: 256\n"

func TestSubmit(t *testing.T) {
	a, fb := newTest()
	tests := []struct {
		name, body, mention string
		code                int
	}{
		{"good", good, `"id":"j1"`, http.StatusCreated},
		{"again", good, "already exists", http.StatusConflict},
		{"unknown field", good + "gpus: 3\n", "gpus", http.StatusBadRequest},
		{"unknown app", strings.Replace(good, "cifar10", "mnist", 1), "not a built-in application", http.StatusBadRequest},
		{"garbage", "\x00\xff{{{", "jobspec", http.StatusBadRequest},
		{"too large", good + "#" + strings.Repeat("x", 1<<20) + "\n", "too large", http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		code, body := do(a, "POST", PathJobs, tc.body)
		if code != tc.code || !strings.Contains(body, tc.mention) {
			t.Errorf("%s: %d %s, want %d mentioning %q", tc.name, code, body, tc.code, tc.mention)
		}
	}
	j := fb.st.Jobs["j1"]
	if j == nil || j.Spec.Limits.MaxBatch != 1024 || j.Spec.App != "cifar10" || j.Spec.MaxReplicas != 64 {
		t.Errorf("stored job %+v", j)
	}
}

func TestReads(t *testing.T) {
	a, fb := newTest()
	do(a, "POST", PathJobs, good)
	fb.st.Allocation.Jobs["j1"] = []consensus.Slot{{Node: "n1", GPUs: 3}}
	code, body := do(a, "GET", PathJobs, "")
	var jobs []Job
	if err := json.Unmarshal([]byte(body), &jobs); err != nil || code != 200 || len(jobs) != 1 || jobs[0].GPUs != 3 || jobs[0].State != "pending" {
		t.Errorf("jobs: %d %s", code, body)
	}
	code, body = do(a, "GET", PathNodes, "")
	var nodes []Node
	if err := json.Unmarshal([]byte(body), &nodes); err != nil || code != 200 || len(nodes) != 1 || nodes[0].Used != 3 || nodes[0].Rack != "r1" {
		t.Errorf("nodes: %d %s", code, body)
	}
	code, body = do(a, "GET", PathStatus, "")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || st.Leader != "s1" || st.GPUs != 4 || st.GPUsUsed != 3 || st.Generation != 2 || st.Jobs["pending"] != 1 {
		t.Errorf("status: %d %s", code, body)
	}
	code, body = do(a, "GET", "/metrics", "")
	for _, want := range []string{`pollux_jobs{state="pending"} 1`, "pollux_gpus_allocated 3", "pollux_allocation_generation 2"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestNoForwardingOnThePublicAPI: the followers' write forwarding is on
// the Raft port (servers' certificates only), never on the API.
func TestNoForwardingOnThePublicAPI(t *testing.T) {
	a, fb := newTest()
	for _, path := range []string{"/consensus/v1/apply", "/consensus/v1/apply/"} {
		if code, _ := do(a, http.MethodPost, path, "\x01\x01\x05hello"); code != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", path, code)
		}
	}
	if code, body := do(a, http.MethodPost, PathJobs, good+"#"+strings.Repeat("x", 2<<20)+"\n"); code != http.StatusRequestEntityTooLarge {
		t.Errorf("2 MiB spec: %d %s, want 413", code, body)
	}
	if len(fb.st.Jobs) != 0 {
		t.Errorf("jobs %v", fb.st.Jobs)
	}
}
