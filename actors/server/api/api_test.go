package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/fedlink"
	"pollux/cluster/federation"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

// fakeBackend is a leader (unless follower) holding a state in memory.
// Writes and the reads of the event stream hold mu (a stream reads while
// a test writes); the other methods are called from the test alone.
type fakeBackend struct {
	mu       sync.Mutex
	st       *state.State
	follower bool
	// full refuses writes as a leader whose disk is full; refuse, if
	// set, is every write's answer (a leader's refusal).
	full    bool
	refuse  error
	servers []raft.Server
	// applied counts the writes that reached the backend.
	applied int
	// onRead runs at each linearizable read (a leader catching up);
	// readErr is its answer.
	onRead  func()
	readErr error
}

func (f *fakeBackend) Leadership() (uint64, bool) { return 3, !f.follower }

// ApplyCommand applies c to the state as the state machine does.
func (f *fakeBackend) ApplyCommand(_ context.Context, c state.Command) error {
	if f.full {
		return consensus.ErrNoSpace
	}
	if f.refuse != nil {
		return f.refuse
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied++
	_, err := state.ApplyTo(f.st, c, 3)
	return err
}
func (f *fakeBackend) Authenticate(secret string) (state.Token, bool, error) {
	t, err := f.st.ACL.Authenticate(secret)
	return t, f.st.ACL.Bootstrapped(), err
}
func (f *fakeBackend) Servers() ([]raft.Server, error)          { return f.servers, nil }
func (f *fakeBackend) Unreachable() map[raft.ServerID]time.Time { return nil }
func (f *fakeBackend) SaveSnapshot(context.Context) ([]byte, error) {
	return state.EncodeState(f.st), nil
}
func (f *fakeBackend) RestoreSnapshot(_ context.Context, b []byte) error {
	st, err := state.DecodeState(b)
	if err == nil {
		f.st, f.applied = st, f.applied+1
	}
	return err
}
func (f *fakeBackend) AddVoter(_ context.Context, id raft.ServerID, addr raft.ServerAddress) error {
	f.servers = append(f.servers, raft.Server{ID: id, Address: addr, Suffrage: raft.Voter})
	return nil
}
func (f *fakeBackend) RemoveServer(_ context.Context, id raft.ServerID) error {
	f.servers = slices.DeleteFunc(f.servers, func(s raft.Server) bool { return s.ID == id })
	return nil
}
func (f *fakeBackend) Leader() (raft.ServerID, raft.ServerAddress) {
	return "s1", "127.0.0.1:1"
}
func (f *fakeBackend) Read(context.Context) (*state.State, error) {
	if f.onRead != nil {
		f.onRead()
	}
	return f.st, f.readErr
}
func (f *fakeBackend) LocalState() *state.State { return f.st }
func (f *fakeBackend) LocalJob(id string) (*state.Job, state.ClusterConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := f.st.Jobs[id]; j != nil {
		return j.Clone(), f.st.Config
	}
	return nil, f.st.Config
}
func (f *fakeBackend) LocalEvents(job string, since uint64, limit int) ([]state.Event, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Events.Since(job, since, limit), f.st.Events.LastSeq()
}

// Secrets of the tokens newTest makes.
const (
	adminSecret  = "plx_admin-secret-of-the-api-tests-0123456789"
	submitSecret = "plx_submit-secret-of-the-api-tests-012345678"
	otherSecret  = "plx_other-submit-secret-of-the-api-tests-0123"
	readSecret   = "plx_read-secret-of-the-api-tests-0123456789a"
)

func newTest() (*API, *fakeBackend) {
	fb := &fakeBackend{st: &state.State{Jobs: map[string]*state.Job{}, Nodes: map[string]*state.Node{
		"n1": {ID: "n1", GPUs: 4, Health: state.Alive, Rack: "r1", Addresses: []string{"127.0.0.1:9"}},
	}, Allocation: state.Allocation{Generation: 2, Jobs: map[string][]state.Slot{}}}}
	for _, c := range []state.Command{
		&state.InitCluster{ID: "c1", CheckpointRoot: "/ckpt"},
		&state.BootstrapACL{Token: state.Token{Accessor: "acc-admin", Name: BootstrapName, Role: state.RoleAdmin, Hash: state.HashSecret(adminSecret), CreateTime: 1}},
		&state.CreateToken{Token: state.Token{Accessor: "acc-submit", Name: "alice", Role: state.RoleSubmit, Hash: state.HashSecret(submitSecret), CreateTime: 2}},
		&state.CreateToken{Token: state.Token{Accessor: "acc-other", Name: "bob", Role: state.RoleSubmit, Hash: state.HashSecret(otherSecret), CreateTime: 3}},
		&state.CreateToken{Token: state.Token{Accessor: "acc-read", Name: "grafana", Role: state.RoleRead, Hash: state.HashSecret(readSecret), CreateTime: 4}},
	} {
		if _, err := state.ApplyTo(fb.st, c, 1); err != nil {
			panic(err)
		}
	}
	limits := func(app string) (goodput.Limits, bool) {
		return goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 32, MaxLocal: 512}, app == "cifar10"
	}
	return New("s1", Config{Backend: fb, Apps: []string{"cifar10"}, AppLimits: limits, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), fb
}

// TestSubmitTakesTheApplicationsLimits: a spec with only a name, a
// built-in application and replica limits is accepted with the
// application's batch limits.
func TestSubmitTakesTheApplicationsLimits(t *testing.T) {
	a, fb := newTest()
	code, body := do(a, "POST", PathJobs, "name: short\napplication: cifar10\nmin_replicas: 1\nmax_replicas: 4\n")
	if code != http.StatusCreated {
		t.Fatalf("%d %s", code, body)
	}
	if lim := fb.st.Jobs["short"].Spec.Limits; lim.InitBatch != 128 || lim.MaxBatch != 4096 || lim.MaxLocal != 512 {
		t.Errorf("limits %+v, want the application's", lim)
	}
}

// do sends a request with the admin token.
func do(a *API, method, path, body string) (int, string) {
	return doAs(a, adminSecret, method, path, body)
}

// doAs sends a request with the token secret (none if empty).
func doAs(a *API, secret, method, path, body string) (int, string) {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if secret != "" {
		r.Header.Set("Authorization", "Bearer "+secret)
	}
	a.ServeHTTP(rec, r)
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
		{"epochs", strings.Replace(good, "j1", "j2", 1) + "epochs: 90\n", `"id":"j2"`, http.StatusCreated},
	}
	for _, tc := range tests {
		code, body := do(a, "POST", PathJobs, tc.body)
		if code != tc.code || !strings.Contains(body, tc.mention) {
			t.Errorf("%s: %d %s, want %d mentioning %q", tc.name, code, body, tc.code, tc.mention)
		}
	}
	j := fb.st.Jobs["j1"]
	if j == nil || j.Spec.Limits.MaxBatch != 1024 || j.Spec.App != "cifar10" || j.Spec.MaxReplicas != 64 || j.Spec.Epochs != 0 {
		t.Errorf("stored job %+v", j)
	}
	if j := fb.st.Jobs["j2"]; j == nil || j.Spec.Epochs != 90 {
		t.Errorf("stored job %+v, want 90 epochs", j)
	}
	if code, out := do(a, "GET", PathJobs+"/j2", ""); code != http.StatusOK || !strings.Contains(out, `"epochs":90`) {
		t.Errorf("job j2: %d %s", code, out)
	}
}

// TestSubmitChecksTheCheckpointDirectory: once the server knows the
// cluster's checkpoint root, a job whose checkpoint directory is not
// below it is refused with a 400 naming the field and the root; nothing
// is stored.
func TestSubmitChecksTheCheckpointDirectory(t *testing.T) {
	a, fb := newTest()
	// Before the root is known, the state machine refuses: jobs
	// checkpoint only below the root.
	fb.st.Config.CheckpointRoot = ""
	if code, body := do(a, "POST", PathJobs, good+"checkpoint_dir: /etc/x\n"); code != http.StatusBadRequest || !strings.Contains(body, "--checkpoint-root") {
		t.Fatalf("without a root: %d %s", code, body)
	}
	fb.st.Config.CheckpointRoot = "/ck"
	for _, tc := range []struct{ dir, mention string }{
		{"/etc/cron.d", "outside the cluster's checkpoint root /ck"},
		{"/ck", "outside the cluster's checkpoint root /ck"},
		{"/ck/../etc", `has a \"..\"`},
		{"/ck/./j", "not a clean path"},
		{"/ckpt/j", "outside"},
	} {
		body := strings.Replace(good, "j1", "j2", 1) + "checkpoint_dir: " + tc.dir + "\n"
		code, out := do(a, "POST", PathJobs, body)
		if code != http.StatusBadRequest || !strings.Contains(out, tc.mention) || !strings.Contains(out, "checkpoint_dir") {
			t.Errorf("%s: %d %s, want 400 mentioning %s", tc.dir, code, out, tc.mention)
		}
	}
	if fb.st.Jobs["j2"] != nil {
		t.Error("a refused job was stored")
	}
	if code, body := do(a, "POST", PathJobs, strings.Replace(good, "j1", "j3", 1)+"checkpoint_dir: /ck/j3\n"); code != http.StatusCreated {
		t.Errorf("below the root: %d %s", code, body)
	}
}

func TestReads(t *testing.T) {
	a, fb := newTest()
	do(a, "POST", PathJobs, good)
	fb.st.Allocation.Jobs["j1"] = []state.Slot{{Node: "n1", GPUs: 3}}
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
	for _, want := range []string{`pollux_jobs{state="pending"} 1`, "pollux_gpus_allocated 3", "pollux_allocation_generation 2",
		"pollux_raft_leader 1", "pollux_jobs_crash_looping 0"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, j := range fb.st.Jobs {
		j.Crashes = CrashLoop
	}
	fb.follower = true
	_, body = do(a, "GET", "/metrics", "")
	for _, want := range []string{"pollux_raft_leader 0", "pollux_jobs_crash_looping 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics of a follower with a crash-looping job lack %q", want)
		}
	}
}

// TestStatusShowsTheAutoscalersBill: /v1/status shows the autoscaler's
// machines and the node-hours they were paid for, each from its request
// to its removal or now, and their cost at the server's price; a server
// that does not autoscale, on a cluster that never did, shows nothing.
func TestStatusShowsTheAutoscalersBill(t *testing.T) {
	a, fb := newTest()
	status := func() Status {
		t.Helper()
		code, body := do(a, "GET", PathStatus, "")
		var st Status
		if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
			t.Fatalf("status: %d %s", code, body)
		}
		return st
	}
	if st := status(); st.Autoscale != nil {
		t.Errorf("a cluster that never autoscaled: %+v", st.Autoscale)
	}
	// At 1000 two machines are asked for; one never joins and is removed
	// at 1900 (0.25 h); the other joins at 1100.
	for _, c := range []state.Command{
		&state.ScaleDecision{Term: 3, Time: 1000, Desired: 3, Add: []string{"auto-1", "auto-2"}},
		&state.ScaleUpdate{Term: 3, Time: 1100, Name: "auto-1", Outcome: state.ScaleJoined},
		&state.ScaleUpdate{Term: 3, Time: 1900, Name: "auto-2", Outcome: state.ScaleRemoved, Reason: "never joined"},
	} {
		if err := fb.ApplyCommand(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	a.cfg.Now = func() time.Time { return time.Unix(1000+2*3600, 0) } // auto-1 up for 2 h since its request
	st := status()
	as := st.Autoscale
	if as == nil || as.Desired != 3 || as.Asked != 2 || len(as.Machines) != 1 || as.Cost != nil {
		t.Fatalf("autoscale on a server without --autoscale: %+v", as)
	}
	if m := as.Machines[0]; m != (MachineJSON{Name: "auto-1", Phase: "up", Since: 1100, Asked: 1000}) {
		t.Errorf("machine %+v", m)
	}
	if math.Abs(as.NodeHours-2.25) > 1e-9 {
		t.Errorf("node-hours %v, want 2.25", as.NodeHours)
	}
	a.cfg.Autoscaling, a.cfg.NodeCost = true, 4
	if as := status().Autoscale; as == nil || as.Cost == nil || math.Abs(*as.Cost-9) > 1e-9 {
		t.Errorf("cost at 4 per node-hour: %+v", as)
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

func TestJobAndCancel(t *testing.T) {
	a, fb := newTest()
	do(a, "POST", PathJobs, good)
	fb.st.Jobs["j1"].Bid = state.Bid{Session: 1, Version: 2, Single: []state.BatchChoice{{LocalBatch: 128, Gain: 1}}}
	fb.st.Jobs["j1"].Incarnation = 3
	code, body := do(a, "GET", PathJobs+"/j1", "")
	var j Job
	if err := json.Unmarshal([]byte(body), &j); err != nil || code != 200 || j.ID != "j1" || j.Bid == nil || j.Bid.Version != 2 || j.Bid.Single[0].LocalBatch != 128 {
		t.Errorf("job: %d %s", code, body)
	}
	tests := []struct {
		name, method, path, mention string
		code                        int
	}{
		{"unknown job", "GET", PathJobs + "/nope", "no job", http.StatusNotFound},
		{"cancel", "POST", PathJobs + "/j1/cancel", "cancelled", http.StatusOK},
		{"cancel again", "POST", PathJobs + "/j1/cancel", "already finished", http.StatusConflict},
		{"cancel unknown", "POST", PathJobs + "/nope/cancel", "no job", http.StatusNotFound},
	}
	for _, tc := range tests {
		code, body := do(a, tc.method, tc.path, "")
		if code != tc.code || !strings.Contains(body, tc.mention) {
			t.Errorf("%s: %d %s, want %d mentioning %q", tc.name, code, body, tc.code, tc.mention)
		}
	}
	if fb.st.Jobs["j1"].State != state.Cancelled {
		t.Errorf("state %v", fb.st.Jobs["j1"].State)
	}
	// The answer names the incarnation the cancel took effect in.
	do(a, "POST", PathJobs, strings.Replace(good, "j1", "j2", 1))
	fb.st.Jobs["j2"].Incarnation = 5
	code, body = do(a, "POST", PathJobs+"/j2/cancel", "")
	var c CancelResult
	if err := json.Unmarshal([]byte(body), &c); err != nil || code != 200 || c.Incarnation == nil || *c.Incarnation != 5 {
		t.Errorf("cancel j2: %d %s, want the incarnation 5", code, body)
	}
}

// TestJobReadsSayStale: GET PathJobs/{id} says, like the other reads,
// whether the answer is the leader's linearizable read or a follower's
// local copy, found or not (the chaos harness's linearizability check
// relies on it).
func TestJobReadsSayStale(t *testing.T) {
	a, fb := newTest()
	do(a, "POST", PathJobs, good)
	for _, follower := range []bool{false, true} {
		fb.follower = follower
		for _, path := range []string{PathJobs + "/j1", PathJobs + "/nope", PathJobs} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", path, nil)
			req.Header.Set("Authorization", "Bearer "+adminSecret)
			a.ServeHTTP(rec, req)
			if got, want := rec.Header().Get(HeaderStale), strconv.FormatBool(follower); got != want {
				t.Errorf("GET %s (follower %v): %s %q, want %q", path, follower, HeaderStale, got, want)
			}
		}
	}
}

// TestCancelRefusals: a full disk is 507 (definitely not applied), a
// body beyond MaxBody is refused before anything is applied, like every
// endpoint but the submission.
func TestCancelRefusals(t *testing.T) {
	a, fb := newTest()
	do(a, "POST", PathJobs, good)
	fb.full = true
	if code, body := do(a, "POST", PathJobs+"/j1/cancel", ""); code != http.StatusInsufficientStorage {
		t.Errorf("cancel on a full disk: %d %s, want 507", code, body)
	}
	fb.full = false
	big := `{"id":"s3","address":"127.0.0.1:3","x":"` + strings.Repeat("x", MaxBody) + `"}`
	if code, body := do(a, "POST", PathPeers, big); code != http.StatusBadRequest && code != http.StatusRequestEntityTooLarge {
		t.Errorf("add-server with a %d-byte body: %d %s", len(big), code, body)
	}
	if len(fb.servers) != 0 {
		t.Errorf("servers after an oversized add-server: %v", fb.servers)
	}
	if fb.st.Jobs["j1"].State != state.Pending {
		t.Errorf("j1 %v after refused cancels", fb.st.Jobs["j1"].State)
	}
}

func TestOperatorPeers(t *testing.T) {
	a, fb := newTest()
	fb.servers = []raft.Server{{ID: "s1", Address: "127.0.0.1:1", Suffrage: raft.Voter}, {ID: "s2", Address: "127.0.0.1:2", Suffrage: raft.Voter}}
	code, body := do(a, "GET", PathPeers, "")
	var peers []Peer
	if err := json.Unmarshal([]byte(body), &peers); err != nil || code != 200 || len(peers) != 2 || !peers[0].Leader || !peers[0].Alive || peers[1].Alive {
		t.Errorf("peers: %d %s", code, body)
	}
	// s2 is not alive (no gossip): removing s1, the live one, would
	// leave a dead voter alone.
	if code, body := do(a, "DELETE", PathPeers+"/s1", ""); code != http.StatusConflict || !strings.Contains(body, "below a quorum") {
		t.Errorf("remove the live one: %d %s", code, body)
	}
	if code, body := do(a, "POST", PathPeers, `{"id":"s3","address":"127.0.0.1:3"}`); code != 200 {
		t.Errorf("add: %d %s", code, body)
	}
	if code, body := do(a, "POST", PathPeers, `{"id":"s4","address":"nowhere"}`); code != http.StatusBadRequest {
		t.Errorf("bad address: %d %s", code, body)
	}
	if code, body := do(a, "DELETE", PathPeers+"/s9", ""); code != http.StatusNotFound {
		t.Errorf("unknown: %d %s", code, body)
	}
	fb.follower = true
	if code, _ := do(a, "DELETE", PathPeers+"/s2", ""); code != http.StatusServiceUnavailable {
		t.Errorf("follower without a known leader API: %d", code)
	}
}

func TestCheckRemoval(t *testing.T) {
	v := func(ids ...string) []raft.Server {
		var out []raft.Server
		for _, id := range ids {
			out = append(out, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
		}
		return out
	}
	alive := func(ids ...string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	tests := []struct {
		name    string
		servers []raft.Server
		remove  string
		alive   map[string]bool
		mention string
	}{
		{"dead one of three", v("a", "b", "c"), "c", alive("a", "b"), ""},
		{"the last voter", v("a"), "a", alive("a"), "last voter"},
		{"live one while another is dead", v("a", "b", "c"), "a", alive("a", "b"), "below a quorum"},
		{"one of five with two dead", v("a", "b", "c", "d", "e"), "e", alive("a", "b", "c"), ""},
		{"a majority gone", v("a", "b", "c", "d", "e"), "a", alive("a", "b"), "below a quorum"},
		{"not a member", v("a", "b"), "z", alive("a", "b"), "not in the Raft"},
	}
	for _, tc := range tests {
		err := checkRemoval(tc.servers, tc.remove, tc.alive)
		if (tc.mention == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.mention)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.mention)
		}
	}
}

// The status of a lab of a federation shows its name, what it lends and
// borrows, its leases and, on the leader, its peers.
func TestStatusFederation(t *testing.T) {
	a, fb := newTest()
	if _, body := do(a, "GET", PathStatus, ""); strings.Contains(body, "federation") {
		t.Errorf("a cluster in no federation: %s", body)
	}
	for _, c := range []state.Command{
		&state.SetLab{Name: "lab-a", CA: "fp", Quota: federation.Quota{Nominal: 4, LendingLimit: 4},
			Peers: []federation.Peer{{Name: "lab-b", CAs: []string{"fq"}}}},
		&state.Lease{Cmd: federation.Command{Op: federation.OpGrant, From: "lab-a", Lease: "l1", Lender: "lab-a", Borrower: "lab-b",
			Nodes: []federation.NodeGPUs{{Node: "n1", GPUs: 4}}, At: 10, TTL: 300}},
	} {
		if err := fb.ApplyCommand(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	a.cfg.FederationPeers = func() []fedlink.PeerStatus { return []fedlink.PeerStatus{{Name: "lab-b", Up: true}} }
	code, body := do(a, "GET", PathStatus, "")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
		t.Fatalf("status: %d %s", code, body)
	}
	f := st.Federation
	if f == nil || f.Cluster != "lab-a" || f.Lent != 4 || f.Borrowed != 0 || len(f.Leases) != 1 || f.Leases[0].Expires != 310 || len(f.Peers) != 1 || !f.Peers[0].Up {
		t.Fatalf("federation status %s", body)
	}
	fb.follower = true
	if _, body := do(a, "GET", PathStatus, ""); strings.Contains(body, `"peers"`) {
		t.Errorf("a follower shows peers it does not exchange bids with: %s", body)
	}
}

// TestJobShowsPerTypeModels: a job measured on two GPU types shows them
// (profiled_types, each profiled configuration's gpu_type) and its bid's
// model per type, under the JSON names other tools read.
func TestJobShowsPerTypeModels(t *testing.T) {
	a, fb := newTest()
	do(a, "POST", PathJobs, good)
	j := fb.st.Jobs["j1"]
	pt := func(typ string, k int, step float64) state.ProfileEntry {
		return state.ProfileEntry{ProfilePoint: goodput.ProfilePoint{Nodes: 1, Replicas: k, LocalBatch: 64, AccumTime: step, StepTime: step},
			Count: 3, GPUType: typ}
	}
	j.Profile = []state.ProfileEntry{pt("", 1, 0.3), pt("a100", 1, 0.1), pt("a100", 2, 0.12), pt("t4", 1, 0.25)}
	fast := goodput.Params{AlphaC: 0.01, BetaC: 0.001, AlphaN: 0.1, BetaN: 0.01, AlphaR: 0.05, BetaR: 0.005, Gamma: 1.5}
	slow := fast
	slow.AlphaC, slow.BetaC = 0.025, 0.0025
	tab := []state.BatchChoice{{LocalBatch: 64, Gain: 1}, {LocalBatch: 64, Gain: 1.5}}
	j.Bid = state.Bid{Session: 1, Version: 3, HasModel: true, Params: fast, MostProfiled: 2, Single: tab, Multi: tab,
		Types: []state.TypeBid{{GPUType: "a100", Params: fast, MostProfiled: 2, Single: tab, Multi: tab},
			{GPUType: "t4", Params: slow, MostProfiled: 1, Single: tab, Multi: tab}}}
	if err := j.Bid.Validate(); err != nil {
		t.Fatal(err)
	}
	code, body := do(a, "GET", PathJobs+"/j1", "")
	var got struct {
		ProfiledTypes []string `json:"profiled_types"`
		Profiled      []struct {
			Replicas int    `json:"replicas"`
			GPUType  string `json:"gpu_type"`
		} `json:"profiled"`
		Bid struct {
			Types []struct {
				GPUType string             `json:"gpu_type"`
				Model   map[string]float64 `json:"model"`
				Single  []map[string]any   `json:"single_node"`
			} `json:"types"`
		} `json:"bid"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != 200 {
		t.Fatalf("job: %d %s", code, body)
	}
	if !slices.Equal(got.ProfiledTypes, []string{"a100", "t4"}) || len(got.Profiled) != 4 || got.Profiled[3].GPUType != "t4" || got.Profiled[0].GPUType != "" {
		t.Errorf("profiled types %q, profiled %+v", got.ProfiledTypes, got.Profiled)
	}
	if ts := got.Bid.Types; len(ts) != 2 || ts[0].GPUType != "a100" || ts[1].GPUType != "t4" ||
		ts[1].Model["alpha_c"] != 0.025 || ts[0].Model["alpha_c"] != 0.01 || len(ts[1].Single) != 2 {
		t.Errorf("bid types %+v", ts)
	}
	// The list shows the types too.
	if _, body := do(a, "GET", PathJobs, ""); !strings.Contains(body, `"profiled_types":["a100","t4"]`) {
		t.Errorf("list: %s", body)
	}
}
