package dashboard

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/allocator"
	"pollux/actors/server/api"
	"pollux/cluster"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

// fakeBackend is a consensus server holding a state in memory: the
// leader, or a follower (leader names the leader it knows).
type fakeBackend struct {
	mu       sync.Mutex
	st       *state.State
	follower bool
	leader   raft.ServerID
	readErr  error
	servers  []raft.Server
}

func (f *fakeBackend) Leadership() (uint64, bool) { return 7, !f.follower }
func (f *fakeBackend) Leader() (raft.ServerID, raft.ServerAddress) {
	return f.leader, ""
}
func (f *fakeBackend) Read(context.Context) (*state.State, error) {
	if f.readErr != nil {
		return nil, f.readErr
	}
	return f.LocalState(), nil
}
func (f *fakeBackend) SaveSnapshot(ctx context.Context) ([]byte, error) {
	st, err := f.Read(ctx)
	if err != nil {
		return nil, err
	}
	return state.EncodeState(st), nil
}
func (f *fakeBackend) RestoreSnapshot(_ context.Context, b []byte) error {
	st, err := state.DecodeState(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
	return nil
}
func (f *fakeBackend) LocalState() *state.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Clone()
}
func (f *fakeBackend) LocalEvents(job string, since uint64, limit int) ([]state.Event, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Events.Since(job, since, limit), f.st.Events.LastSeq()
}
func (f *fakeBackend) LocalJob(id string) (*state.Job, state.ClusterConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Jobs[id], f.st.Config
}
func (f *fakeBackend) ApplyCommand(_ context.Context, c state.Command) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := state.ApplyTo(f.st, c, 3)
	return err
}
func (f *fakeBackend) Authenticate(secret string) (state.Token, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.st.ACL.Authenticate(secret)
	return t, f.st.ACL.Bootstrapped(), err
}
func (f *fakeBackend) Servers() ([]raft.Server, error) { return f.servers, nil }
func (f *fakeBackend) Unreachable() map[raft.ServerID]time.Time {
	return map[raft.ServerID]time.Time{"s3": {}}
}
func (f *fakeBackend) AddVoter(context.Context, raft.ServerID, raft.ServerAddress) error {
	return errors.New("not here")
}
func (f *fakeBackend) RemoveServer(context.Context, raft.ServerID) error {
	return errors.New("not here")
}

// Secrets of the test tokens.
const (
	adminSecret  = "plx_admin-secret-of-the-dashboard-tests-0123"
	submitSecret = "plx_submit-secret-of-the-dashboard-tests-012"
	readSecret   = "plx_read-secret-of-the-dashboard-tests-01234"
	revokedRead  = "plx_revoked-secret-of-the-dashboard-tests-01"
)

var model = goodput.Params{AlphaC: 0.01, BetaC: 0.0005, AlphaN: 0.02, BetaN: 0.0001, AlphaR: 0.05, BetaR: 0.0002, Gamma: 1.5}

// testState is a cluster of two racks: n1 (4 GPUs, r1) and n2 (4, r1)
// alive, n3 (2, r2) dead; job a runs on 3 GPUs of n1 and 2 of n2 with a
// bid, b on 1 of n1, c pending, d cancelled. alice (submit) submitted a.
func testState() *state.State {
	st := &state.State{Jobs: map[string]*state.Job{}, Nodes: map[string]*state.Node{
		"n1": {ID: "n1", GPUs: 4, Health: state.Alive, Rack: "r1", GPUType: "v100"},
		"n2": {ID: "n2", GPUs: 4, Health: state.Alive, Rack: "r1"},
		"n3": {ID: "n3", GPUs: 2, Health: state.Dead, Rack: "r2"},
	}, Allocation: state.Allocation{Generation: 12, Jobs: map[string][]state.Slot{
		"a": {{Node: "n1", GPUs: 3}, {Node: "n2", GPUs: 2}},
		"b": {{Node: "n1", GPUs: 1}},
	}}}
	for _, c := range []state.Command{
		&state.InitCluster{ID: "c1", CheckpointRoot: "/ckpt"},
		&state.BootstrapACL{Token: state.Token{Accessor: "acc-admin", Name: api.BootstrapName, Role: state.RoleAdmin, Hash: state.HashSecret(adminSecret), CreateTime: 1}},
		&state.CreateToken{Token: state.Token{Accessor: "acc-alice", Name: "alice", Role: state.RoleSubmit, Hash: state.HashSecret(submitSecret), CreateTime: 2}},
		&state.CreateToken{Token: state.Token{Accessor: "acc-read", Name: "grafana", Role: state.RoleRead, Hash: state.HashSecret(readSecret), CreateTime: 3}},
		&state.CreateToken{Token: state.Token{Accessor: "acc-gone", Name: "gone", Role: state.RoleRead, Hash: state.HashSecret(revokedRead), CreateTime: 4}},
		&state.RevokeToken{Accessor: "acc-gone", Time: 5},
	} {
		if _, err := state.ApplyTo(st, c, 1); err != nil {
			panic(err)
		}
	}
	limits := goodput.Limits{InitBatch: 64, MaxBatch: 4096, MinLocal: 16, MaxLocal: 256, Accumulation: true}
	var single, multi []state.BatchChoice
	for k := 1; k <= 8; k++ {
		single = append(single, state.BatchChoice{LocalBatch: 64, AccumSteps: 0, Gain: 1 + 0.1*float64(k-1)})
		multi = append(multi, state.BatchChoice{LocalBatch: 128, AccumSteps: 1, Gain: 1 + 0.2*float64(k-1)})
	}
	st.Jobs["a"] = &state.Job{ID: "a", State: state.Running, SubmitTime: 1, Submitter: "acc-alice", SubmitterName: "alice",
		Spec: state.JobSpec{Name: "a", App: "cifar10", MaxReplicas: 8, Limits: limits}, Epoch: 3, Restarts: 2,
		Grad: goodput.GradStats{GradSqr: 2, GradVar: 6}, HasGrad: true,
		Profile: []state.ProfileEntry{
			{ProfilePoint: goodput.ProfilePoint{Nodes: 1, Replicas: 1, LocalBatch: 64, AccumTime: 0.04, StepTime: 0.05}, Count: 3},
			{ProfilePoint: goodput.ProfilePoint{Nodes: 1, Replicas: 2, LocalBatch: 128, AccumTime: 0.07, StepTime: 0.09}, Count: 1},
		},
		Bid: state.Bid{Session: 1, Version: 4, HasModel: true, Params: model, HasGrad: true, Grad: goodput.GradStats{GradSqr: 2, GradVar: 6},
			MostProfiled: 2, Single: single, Multi: multi}}
	st.Jobs["b"] = &state.Job{ID: "b", State: state.Running, SubmitTime: 2, Spec: state.JobSpec{Name: "b", App: "bert", MaxReplicas: 4, Limits: limits}}
	st.Jobs["c"] = &state.Job{ID: "c", State: state.Pending, SubmitTime: 3, Spec: state.JobSpec{Name: "c", App: "bert", Limits: limits}}
	st.Jobs["d"] = &state.Job{ID: "d", State: state.Cancelled, SubmitTime: 4, FinishTime: 9, Spec: state.JobSpec{Name: "d", App: "bert", Limits: limits}}
	return st
}

type fixture struct {
	fb    *fakeBackend
	dash  *Dashboard
	h     http.Handler
	clock *time.Time
	mu    *sync.Mutex
}

func newFixture(t *testing.T, insecure bool) *fixture {
	t.Helper()
	fb := &fakeBackend{st: testState(), leader: "s1", servers: []raft.Server{
		{ID: "s1", Suffrage: raft.Voter}, {ID: "s2", Suffrage: raft.Voter}, {ID: "s3", Suffrage: raft.Voter}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := api.New("s1", api.Config{Backend: fb, Apps: []string{"cifar10"}, Insecure: insecure, Logger: log})
	clock := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	members := func() []cluster.Member {
		return []cluster.Member{{Name: "s1", Meta: cluster.Meta{Role: cluster.RoleServer, Rack: "r1"}},
			{Name: "s2", Meta: cluster.Meta{Role: cluster.RoleServer}}, {Name: "s3", Meta: cluster.Meta{Role: cluster.RoleServer, Rack: "r2"}}}
	}
	d, err := New(Config{ID: "s1", Backend: fb, API: a, Members: members, Logger: log, SampleEvery: time.Second, Retention: 10 * time.Second,
		GradHistory: 3, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{fb: fb, dash: d, h: d.Handler(a), clock: &clock, mu: &mu}
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.clock = f.clock.Add(d)
}

type req struct {
	method, path string
	cookie       string // token in the cookie
	bearer       string // token in the Authorization header
	header       map[string]string
	form         url.Values // a form body
	tls          bool
}

func (f *fixture) do(r req) *httptest.ResponseRecorder {
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	}
	hr := httptest.NewRequest(cmpOr(r.method, "GET"), r.path, body)
	if r.form != nil {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if r.tls {
		hr.TLS = &tls.ConnectionState{}
	}
	if r.cookie != "" {
		hr.AddCookie(&http.Cookie{Name: CookieName(hr), Value: r.cookie})
	}
	if r.bearer != "" {
		hr.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, hr)
	return rec
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestSignIn signs in by the POST form: a known token becomes a cookie
// (one per port, __Host- over HTTPS) and the browser goes on to the
// form's next page on this server; the sign-in page itself answers any
// GET and sets nothing.
func TestSignIn(t *testing.T) {
	f := newFixture(t, false)
	tests := []struct {
		next, location string
		tls            bool
		name, path     string
	}{
		{"", "/ui/", true, "__Host-pollux_token_443", "/"},
		{"/ui/jobs?x=1", "/ui/jobs?x=1", false, "pollux_token_80", "/ui/"},
		{"/ui/jobs/a", "/ui/jobs/a", true, "__Host-pollux_token_443", "/"},
		{"https://evil.example/ui/", "/ui/", false, "pollux_token_80", "/ui/"},
		{"//evil.example/ui/", "/ui/", false, "pollux_token_80", "/ui/"},
	}
	for _, tc := range tests {
		// A browser posts the form of a no-referrer page with Origin: null.
		rec := f.do(req{method: "POST", path: PathLogin, form: url.Values{FormToken: {readSecret}, FormNext: {tc.next}}, tls: tc.tls,
			header: map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}})
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != tc.location {
			t.Errorf("next %q: %d to %q, want 303 to %q", tc.next, rec.Code, rec.Header().Get("Location"), tc.location)
			continue
		}
		cs := rec.Result().Cookies()
		if len(cs) != 1 {
			t.Fatalf("next %q: cookies %v", tc.next, cs)
		}
		c := cs[0]
		if c.Name != tc.name || c.Value != readSecret || !c.HttpOnly || c.Path != tc.path || c.SameSite != http.SameSiteLaxMode || c.Secure != tc.tls {
			t.Errorf("next %q: cookie %+v", tc.next, c)
		}
		if strings.Contains(rec.Body.String(), readSecret) {
			t.Errorf("next %q: the answer repeats the token", tc.next)
		}
	}
	// The cookie then opens the page, which names every node and job.
	rec := f.do(req{path: "/ui/", cookie: readSecret})
	if rec.Code != http.StatusOK {
		t.Fatalf("with the cookie: %d %s", rec.Code, rec.Body.String())
	}
	for _, want := range []string{`"n1"`, `"n3"`, `"a"`, `"grafana"`, `id="initial"`, "/ui/static/app.js"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(rec.Body.String(), readSecret) {
		t.Error("the page holds the token")
	}
	// The sign-in page: auto-sent only when the user opened the address.
	for site, auto := range map[string]bool{"none": true, "same-origin": true, "cross-site": false, "": false} {
		rec := f.do(req{path: PathLogin + "?next=/ui/jobs", header: map[string]string{"Sec-Fetch-Site": site}})
		body := rec.Body.String()
		if rec.Code != http.StatusOK || len(rec.Result().Cookies()) != 0 || strings.Contains(body, `data-auto="1"`) != auto ||
			!strings.Contains(body, `value="/ui/jobs"`) || !strings.Contains(body, "/ui/static/login.js") {
			t.Errorf("sign-in page from %q: %d %.300s", site, rec.Code, body)
		}
	}
}

// TestLoginCSRF: nothing another site can make a browser send signs it
// in: a GET with the token in the query, a form POST from another
// origin; a bad token is refused and sets no cookie either.
func TestLoginCSRF(t *testing.T) {
	f := newFixture(t, false)
	form := url.Values{FormToken: {readSecret}}
	tests := []struct {
		name string
		r    req
		code int
	}{
		{"GET with a query token", req{path: "/ui/?token=" + readSecret, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 400},
		{"GET of a page with a query token", req{path: "/ui/jobs?token=" + readSecret}, 400},
		{"POST from another origin", req{method: "POST", path: PathLogin, form: form, header: map[string]string{"Origin": "https://evil.example"}}, 403},
		{"POST another site's browser marks", req{method: "POST", path: PathLogin, form: form, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403},
		{"POST from an opaque origin", req{method: "POST", path: PathLogin, form: form, header: map[string]string{"Origin": "null"}}, 403},
		{"POST a token in the query", req{method: "POST", path: PathLogin + "?token=" + readSecret, form: url.Values{}}, 400},
		{"unknown token", req{method: "POST", path: PathLogin, form: url.Values{FormToken: {"plx_not-a-token-of-this-cluster-at-all-0000"}}}, 401},
		{"malformed token", req{method: "POST", path: PathLogin, form: url.Values{FormToken: {"a;b"}}}, 400},
	}
	for _, tc := range tests {
		rec := f.do(tc.r)
		if rec.Code != tc.code || len(rec.Result().Cookies()) != 0 {
			t.Errorf("%s: %d, cookies %v, want %d and none", tc.name, rec.Code, rec.Result().Cookies(), tc.code)
		}
		if strings.Contains(rec.Body.String(), readSecret) {
			t.Errorf("%s: the answer repeats the token", tc.name)
		}
	}
}

func TestAccess(t *testing.T) {
	f := newFixture(t, false)
	tests := []struct {
		name string
		r    req
		code int
		// mention is in the body; cleared: the cookie is removed.
		mention string
		cleared bool
	}{
		{"no token page", req{path: "/ui/"}, 401, "/ui/login#token=", false},
		{"no token api", req{path: PathOverview}, 401, "no token", false},
		{"unknown cookie", req{path: "/ui/", cookie: "plx_unknown-secret-unknown-secret-unknown"}, 401, "unknown token", true},
		{"revoked cookie", req{path: "/ui/jobs", cookie: revokedRead}, 401, "revoked", true},
		{"revoked bearer", req{path: PathOverview, bearer: revokedRead}, 401, "revoked", false},
		{"query token", req{path: "/ui/?token=a"}, 400, "does not sign in", false},
		{"other scheme", req{path: PathOverview, header: map[string]string{"Authorization": "Basic eDp5"}}, 400, "Bearer", false},
		{"read cookie", req{path: "/ui/control", cookie: readSecret}, 200, `data-view="control"`, false},
		{"read bearer api", req{path: PathOverview, bearer: readSecret}, 200, `"serving":"s1"`, false},
		{"history", req{path: "/ui/history", cookie: readSecret}, 200, `data-view="history"`, false},
		{"unknown page", req{path: "/ui/nope", cookie: readSecret}, 404, "There is no page", false},
		{"unknown page without token", req{path: "/ui/nope"}, 401, "", false},
		{"static without token", req{path: "/ui/static/app.js"}, 200, "textContent", false},
		{"vendored chart library", req{path: "/ui/static/uplot/uPlot.iife.min.js"}, 200, "uPlot", false},
		{"templates are not assets", req{path: "/ui/static/page.html.tmpl"}, 404, "", false},
		{"root redirects", req{path: "/"}, 302, "", false},
		{"API still served", req{path: api.PathJobs, bearer: readSecret}, 200, `"id":"a"`, false},
	}
	for _, tc := range tests {
		rec := f.do(tc.r)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.mention) {
			t.Errorf("%s: %d %.300s, want %d mentioning %q", tc.name, rec.Code, rec.Body.String(), tc.code, tc.mention)
		}
		cleared := slices.ContainsFunc(rec.Result().Cookies(), func(c *http.Cookie) bool { return strings.HasPrefix(c.Name, "pollux_token_") && c.MaxAge < 0 })
		if cleared != tc.cleared {
			t.Errorf("%s: cookie cleared %v, want %v", tc.name, cleared, tc.cleared)
		}
		if rec.Code < 300 && strings.HasPrefix(tc.r.path, Prefix) && rec.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("%s: no Content-Security-Policy", tc.name)
		}
	}
}

// A server that cannot tell whether it knows a token (a leader that
// cannot catch up its state) answers 503 and keeps the cookie: the page
// signs out only a token refused as unknown or revoked.
func TestUndecidedTokenKeepsTheCookie(t *testing.T) {
	f := newFixture(t, false)
	f.fb.mu.Lock()
	f.fb.readErr = consensus.ErrNotLeader
	f.fb.mu.Unlock()
	rec := f.do(req{path: "/ui/", cookie: "plx_made-a-moment-ago-on-the-old-leader-01"})
	cleared := slices.ContainsFunc(rec.Result().Cookies(), func(c *http.Cookie) bool { return strings.HasPrefix(c.Name, "pollux_token_") && c.MaxAge < 0 })
	if rec.Code != http.StatusServiceUnavailable || cleared {
		t.Errorf("undecided token: %d (cookie cleared %v) %.300s", rec.Code, cleared, rec.Body.String())
	}
}

func TestInsecureClusterNeedsNoToken(t *testing.T) {
	f := newFixture(t, true)
	rec := f.do(req{path: PathOverview})
	var ov Overview
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &ov) != nil || ov.Viewer.Role != "admin" || !ov.Viewer.CancelAny {
		t.Fatalf("insecure: %d %s", rec.Code, rec.Body.String())
	}
}

func TestUnknownJobIs404(t *testing.T) {
	f := newFixture(t, false)
	rec := f.do(req{path: "/ui/jobs/nope%3Cb%3E", cookie: readSecret})
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "No such job") ||
		!strings.Contains(rec.Body.String(), `&#34;nope&lt;b&gt;&#34;`) || strings.Contains(rec.Body.String(), "<b>") {
		t.Errorf("unknown job page: %d %s", rec.Code, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("404 page content type %q", ct)
	}
	rec = f.do(req{path: PathJob + "nope", cookie: readSecret})
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `no job \"nope\"`) {
		t.Errorf("unknown job API: %d %s", rec.Code, rec.Body.String())
	}
	rec = f.do(req{path: "/ui/jobs/a", cookie: readSecret})
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `data-view="job"`) {
		t.Errorf("known job page: %d", rec.Code)
	}
	// The page follows every event type of the job's timeline, the
	// checkpointed events among them.
	if !strings.Contains(rec.Body.String(), "checkpointed") {
		t.Errorf("known job page does not name the checkpointed event type")
	}
}

func overviewOf(t *testing.T, f *fixture, secret string) Overview {
	t.Helper()
	rec := f.do(req{path: PathOverview, cookie: secret})
	var ov Overview
	if rec.Code != http.StatusOK {
		t.Fatalf("overview: %d %s", rec.Code, rec.Body.String())
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &ov); err != nil {
		t.Fatal(err)
	}
	return ov
}

func TestOverviewShowsTheState(t *testing.T) {
	f := newFixture(t, false)
	ov := overviewOf(t, f, readSecret)
	// The grid: racks r1 (n1, n2) and r2 (n3, dead); every GPU of the
	// allocation coloured by its job.
	if len(ov.Racks) != 2 || ov.Racks[0].Name != "r1" || ov.Racks[1].Name != "r2" {
		t.Fatalf("racks %+v", ov.Racks)
	}
	n1, n2, n3 := ov.Racks[0].Nodes[0], ov.Racks[0].Nodes[1], ov.Racks[1].Nodes[0]
	if !slices.Equal(n1.Slots, []string{"a", "a", "a", "b"}) || !slices.Equal(n2.Slots, []string{"a", "a", "", ""}) ||
		n1.GPUType != "v100" || n1.Used != 4 || n2.Used != 2 {
		t.Errorf("nodes %+v %+v", n1, n2)
	}
	if n3.Health != "dead" || !slices.Equal(n3.Slots, []string{"", ""}) {
		t.Errorf("dead node %+v", n3)
	}
	if ov.GPUs != 8 || ov.GPUsUsed != 6 || ov.Generation != 12 || ov.Leader != "s1" || !ov.IsLeader || ov.Health != HealthOK {
		t.Errorf("overview %+v", ov)
	}
	// The jobs: the API's fields, and a's configuration from its bid on
	// 5 GPUs over 2 nodes (Multi[4]: local 128, one accumulation step).
	want := api.JobsOf(testState())
	if len(ov.Jobs) != len(want) {
		t.Fatalf("%d jobs, want %d", len(ov.Jobs), len(want))
	}
	for i, j := range ov.Jobs {
		if j.ID != want[i].ID || j.GPUs != want[i].GPUs || j.Nodes != want[i].Nodes || j.State != want[i].State {
			t.Errorf("job %d: %+v, API has %+v", i, j.Job, want[i])
		}
	}
	a := ov.Jobs[0]
	md := goodput.Model{Params: model, Grad: goodput.GradStats{GradSqr: 2, GradVar: 6}, Limits: testState().Jobs["a"].Spec.Limits}
	one, err := md.Optimize(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantGoodput := md.Goodput(2, 5, 128, 1)
	if a.LocalBatch != 128 || a.AccumSteps != 1 || a.BatchSize != 5*128*2 || a.Gain != 1.8 || !a.Active ||
		a.Goodput != wantGoodput || a.Speedup != wantGoodput/one.Goodput || a.Submitter != "alice" {
		t.Errorf("job a %+v", a)
	}
	if b := ov.Jobs[1]; b.Goodput != 0 || b.BatchSize != 0 || b.Speedup != 0 {
		t.Errorf("job b has no bid, but shows %+v", b)
	}
	if ov.Goodput != wantGoodput {
		t.Errorf("cluster goodput %v, want %v", ov.Goodput, wantGoodput)
	}
	if d := ov.Jobs[3]; d.Active || d.State != "cancelled" {
		t.Errorf("job d %+v", d)
	}
	if ov.JobCount["running"] != 2 || ov.JobCount["pending"] != 1 || ov.JobCount["cancelled"] != 1 {
		t.Errorf("counts %v", ov.JobCount)
	}
	// Peers: racks from gossip, s3 unreachable from the leader.
	wantPeers := []Peer{{ID: "s1", Voter: true, Leader: true, Alive: true, Rack: "r1", Serving: true},
		{ID: "s2", Voter: true, Alive: true, Rack: "default"}, {ID: "s3", Voter: true, Rack: "r2"}}
	if !slices.Equal(ov.Peers, wantPeers) {
		t.Errorf("peers %+v, want %+v", ov.Peers, wantPeers)
	}
	// The last round this server ran.
	if ov.LastRound != nil {
		t.Errorf("a round before any: %+v", ov.LastRound)
	}
	f.dash.ObserveRound(allocator.RoundInfo{Generation: 13, Jobs: 3, Fitness: 0.5, Duration: 42 * time.Millisecond, Policy: "pollux"})
	if lr := overviewOf(t, f, readSecret).LastRound; lr == nil || lr.Generation != 13 || lr.Seconds != 0.042 || lr.Policy != "pollux" {
		t.Errorf("last round %+v", lr)
	}
	// The autoscaler: nothing until it decides; then its machine, asked
	// for an hour before the fixture's clock, and no cost on a server
	// that does not autoscale.
	if as := ov.Autoscale; as != nil {
		t.Errorf("autoscaler before any decision: %+v", as)
	}
	if _, err := state.ApplyTo(f.fb.st, &state.ScaleDecision{Term: 4, Time: 1_000_000 - 3600, Desired: 4, Add: []string{"auto-1"}}, 4); err != nil {
		t.Fatal(err)
	}
	as := overviewOf(t, f, readSecret).Autoscale
	if as == nil || as.Desired != 4 || len(as.Machines) != 1 || as.Machines[0].Phase != "booting" || as.NodeHours != 1 || as.Cost != nil {
		t.Errorf("autoscaler %+v", as)
	}
}

func TestViewerMayCancelWhatTheTokenMay(t *testing.T) {
	f := newFixture(t, false)
	for _, tc := range []struct {
		secret        string
		any, own      bool
		name, role    string
		accessorShown bool
	}{
		{readSecret, false, false, "grafana", "read", true},
		{submitSecret, false, true, "alice", "submit", true},
		{adminSecret, true, true, "bootstrap", "admin", true},
	} {
		v := overviewOf(t, f, tc.secret).Viewer
		if v.CancelAny != tc.any || v.CancelOwn != tc.own || v.Name != tc.name || v.Role != tc.role || (v.Accessor != "") != tc.accessorShown {
			t.Errorf("%s: viewer %+v", tc.name, v)
		}
	}
}

func TestCancelGoesThroughTheAPI(t *testing.T) {
	ui := map[string]string{"X-Pollux-UI": "1"}
	tests := []struct {
		name   string
		r      req
		code   int
		job    string
		cancel bool
	}{
		{"read token", req{cookie: readSecret, header: ui}, 403, "a", false},
		{"no page header", req{cookie: submitSecret}, 403, "a", false},
		{"another site", req{cookie: submitSecret, header: map[string]string{"X-Pollux-UI": "1", "Sec-Fetch-Site": "cross-site"}}, 403, "a", false},
		{"another origin", req{cookie: submitSecret, header: map[string]string{"X-Pollux-UI": "1", "Origin": "https://evil.example"}}, 403, "a", false},
		{"not its own job", req{cookie: submitSecret, header: ui}, 403, "b", false},
		{"unknown job", req{cookie: adminSecret, header: ui}, 404, "zz", false},
		{"finished job", req{cookie: adminSecret, header: ui}, 409, "d", false},
		{"its own job", req{cookie: submitSecret, header: map[string]string{"X-Pollux-UI": "1", "Sec-Fetch-Site": "same-origin", "Origin": "https://example.com"}}, 200, "a", true},
	}
	for _, tc := range tests {
		f := newFixture(t, false)
		tc.r.method, tc.r.path = "POST", PathJob+tc.job+"/cancel"
		rec := f.do(tc.r)
		if rec.Code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body.String(), tc.code)
		}
		j := f.fb.LocalState().Jobs[tc.job]
		cancelled := j != nil && j.State == state.Cancelled && tc.job != "d"
		if cancelled != tc.cancel {
			t.Errorf("%s: job %s cancelled %v, want %v", tc.name, tc.job, cancelled, tc.cancel)
		}
	}
}

func TestHealthSaysWhenDataIsNotCurrent(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	tests := []struct {
		name        string
		follower    bool
		leader      raft.ServerID
		readErr     error
		lastContact time.Time
		health      string
		mention     string
	}{
		{"leader", false, "s1", nil, time.Time{}, HealthOK, ""},
		{"leader without quorum", false, "s1", errors.New("consensus: not the leader"), time.Time{}, HealthNoQuorum, "majority"},
		{"fresh follower", true, "s2", nil, now.Add(-time.Second), HealthOK, ""},
		{"follower cut off", true, "s2", nil, now.Add(-9 * time.Second), HealthStale, "9.0 s ago"},
		{"follower without leader", true, "", nil, now.Add(-time.Second), HealthStale, "no quorum"},
	}
	for _, tc := range tests {
		f := newFixture(t, false)
		f.fb.follower, f.fb.leader, f.fb.readErr = tc.follower, tc.leader, tc.readErr
		f.dash.cfg.LastContact = func() time.Time { return tc.lastContact }
		ov := overviewOf(t, f, readSecret)
		if ov.Health != tc.health || !strings.Contains(ov.HealthReason, tc.mention) || ov.Stale != (tc.health != HealthOK || tc.follower) {
			t.Errorf("%s: health %q (%s), stale %v", tc.name, ov.Health, ov.HealthReason, ov.Stale)
		}
		// The data is still shown, from the local copy.
		if len(ov.Jobs) != 4 || ov.Leader != string(tc.leader) {
			t.Errorf("%s: %d jobs, leader %q", tc.name, len(ov.Jobs), ov.Leader)
		}
	}
}

func TestSeriesRingIsBoundedAndIncremental(t *testing.T) {
	f := newFixture(t, false)
	// Retention 10 s at one sample a second: a ring of 10.
	for i := range 14 {
		if i == 5 {
			f.fb.mu.Lock()
			f.fb.st.Jobs["c"].State = state.Running
			f.fb.st.Allocation.Jobs["c"] = []state.Slot{{Node: "n2", GPUs: 2}}
			f.fb.mu.Unlock()
		}
		f.dash.Sample()
		f.advance(time.Second)
	}
	ov := overviewOf(t, f, readSecret)
	if len(ov.Series) != 10 {
		t.Fatalf("%d samples, want the ring's 10", len(ov.Series))
	}
	first := ov.Series[0]
	if first.Time != 1_000_004 || ov.Series[9].Time != 1_000_013 {
		t.Errorf("samples from %v to %v", first.Time, ov.Series[9].Time)
	}
	if s := ov.Series[0]; s.GPUsUsed != 6 || s.GPUs != 8 || s.Running != 2 || s.Pending != 1 || s.Goodput <= 0 {
		t.Errorf("sample before c ran: %+v", s)
	}
	if s := ov.Series[1]; s.GPUsUsed != 8 || s.Running != 3 || s.Pending != 0 {
		t.Errorf("sample after c ran: %+v", s)
	}
	rec := f.do(req{path: PathOverview + "?since=1000011", cookie: readSecret})
	var inc Overview
	if err := json.Unmarshal(rec.Body.Bytes(), &inc); err != nil || len(inc.Series) != 2 || inc.Series[0].Time != 1_000_012 {
		t.Errorf("since: %v %+v", err, inc.Series)
	}
	for _, bad := range []string{"x", "-1", "1e999999", "NaN", "Inf", "-0x1p-2"} {
		if rec := f.do(req{path: PathOverview + "?since=" + bad, cookie: readSecret}); rec.Code != http.StatusBadRequest {
			t.Errorf("since=%s: %d", bad, rec.Code)
		}
	}
}

func TestGradientHistory(t *testing.T) {
	f := newFixture(t, false)
	setGrad := func(sqr, v float64) {
		f.fb.mu.Lock()
		f.fb.st.Jobs["a"].Grad = goodput.GradStats{GradSqr: sqr, GradVar: v}
		f.fb.mu.Unlock()
	}
	// Unchanged statistics are one point; the ring keeps the last 3.
	for _, g := range [][2]float64{{2, 6}, {2, 6}, {2, 8}, {1, 8}, {1, 8}, {1, 4}} {
		setGrad(g[0], g[1])
		f.dash.Sample()
		f.advance(time.Second)
	}
	rec := f.do(req{path: PathJob + "a", cookie: readSecret})
	var d JobDetail
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatal(rec.Code, err)
	}
	var noise []float64
	for _, p := range d.GradHistory {
		noise = append(noise, p.NoiseScale)
	}
	if !slices.Equal(noise, []float64{64 * 8 / 2, 64 * 8, 64 * 4}) {
		t.Errorf("noise scale history %v", noise)
	}
	// The page's model: the profile with measured and fitted throughput,
	// a fitted curve per measured shape, the speedups of the bid.
	if d.Model == nil || len(d.Profile) != 2 || d.Profile[0].Throughput != 64/0.05 ||
		d.Profile[1].Fitted != model.Throughput(1, 2, 128, 0) || len(d.Fit) != 2 || len(d.Fit[0].Points) != fitPoints {
		t.Errorf("model %+v profile %+v fit %d", d.Model, d.Profile, len(d.Fit))
	}
	if len(d.Speedups) != 8 || d.Speedups[0].Single < 0.99 || d.Speedups[0].Single > 1.01 || d.Speedups[0].Multi != 0 || d.Speedups[7].Multi <= 0 {
		t.Errorf("speedups %+v", d.Speedups)
	}
	// A job pruned from the state takes its history with it.
	f.fb.mu.Lock()
	delete(f.fb.st.Jobs, "a")
	delete(f.fb.st.Allocation.Jobs, "a")
	f.fb.mu.Unlock()
	f.dash.Sample()
	if _, ok := f.dash.grads["a"]; ok {
		t.Error("history of a pruned job kept")
	}
}

func TestRing(t *testing.T) {
	r := newRing[int](3)
	all := func(int) bool { return true }
	if _, ok := r.last(); ok || len(r.items(all)) != 0 {
		t.Fatal("empty ring has items")
	}
	for i := 1; i <= 5; i++ {
		r.add(i)
	}
	if got := r.items(all); !slices.Equal(got, []int{3, 4, 5}) {
		t.Errorf("items %v", got)
	}
	if got := r.items(func(v int) bool { return v > 3 }); !slices.Equal(got, []int{4, 5}) {
		t.Errorf("items after 3: %v", got)
	}
	if got := r.items(func(v int) bool { return v > 9 }); len(got) != 0 {
		t.Errorf("items after 9: %v", got)
	}
	if v, _ := r.last(); v != 5 {
		t.Errorf("last %d", v)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	fb := &fakeBackend{st: testState()}
	a := api.New("s1", api.Config{Backend: fb, Logger: slog.New(slog.DiscardHandler)})
	for _, c := range []Config{{}, {Backend: fb}, {Backend: fb, API: a, SampleEvery: time.Minute, Retention: time.Second}, {Backend: fb, API: a, GradHistory: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// A follower that does not know a token yet (made a moment ago through
// the leader) waits a little for it; one it never learns is refused with
// a link to the leader's dashboard.
func TestFollowerWaitsForANewToken(t *testing.T) {
	fb := &fakeBackend{st: testState(), follower: true, leader: "s2"}
	log := slog.New(slog.DiscardHandler)
	members := func() []cluster.Member {
		return []cluster.Member{{Name: "s2", Meta: cluster.Meta{Role: cluster.RoleServer, HTTPAddr: "127.0.0.1:8082"}}}
	}
	a := api.New("s1", api.Config{Backend: fb, Members: members, Logger: log})
	d, err := New(Config{ID: "s1", Backend: fb, API: a, Members: members, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{fb: fb, dash: d, h: d.Handler(a)}
	const fresh = "plx_a-token-made-a-moment-ago-through-the-leader"
	go func() {
		time.Sleep(250 * time.Millisecond)
		_ = fb.ApplyCommand(context.Background(), &state.CreateToken{Token: state.Token{Accessor: "acc-fresh", Name: "fresh",
			Role: state.RoleRead, Hash: state.HashSecret(fresh), CreateTime: 9}})
	}()
	start := time.Now()
	if rec := f.do(req{path: "/ui/", cookie: fresh, tls: true}); rec.Code != http.StatusOK {
		t.Errorf("a token the follower learns 250 ms later: %d %.300s", rec.Code, rec.Body.String())
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("answered after %v, before the token existed here", waited)
	}
	rec := f.do(req{path: "/ui/", cookie: "plx_a-token-this-cluster-never-made-0000000", tls: true})
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "does not know the token") ||
		!strings.Contains(rec.Body.String(), `href="https://127.0.0.1:8082/ui/"`) {
		t.Errorf("a token never learnt: %d %s", rec.Code, rec.Body.String())
	}
}

// Names from the cluster never become markup: the data embedded in a
// page is escaped JSON.
func TestEmbeddedDataIsEscaped(t *testing.T) {
	f := newFixture(t, false)
	const evil = `x</script><script>alert(1)</script>`
	f.fb.mu.Lock()
	f.fb.st.Jobs[evil] = &state.Job{ID: evil, State: state.Pending, SubmitTime: 9, SubmitterName: `<img src=x onerror=alert(2)>`,
		Spec: state.JobSpec{Name: evil, Limits: f.fb.st.Jobs["c"].Spec.Limits}}
	f.fb.mu.Unlock()
	rec := f.do(req{path: "/ui/jobs", cookie: readSecret})
	body := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Contains(body, "</script><script>") || strings.Contains(body, "<img src=x") {
		t.Fatalf("%d: the page holds a name as markup:\n%s", rec.Code, body)
	}
	// The escaped JSON still carries the name.
	start := strings.Index(body, `<script id="initial" type="application/json">`)
	end := strings.Index(body[start:], "</script>")
	var data struct{ Overview Overview }
	if start < 0 || end < 0 || json.Unmarshal([]byte(body[start+len(`<script id="initial" type="application/json">`):start+end]), &data) != nil ||
		!slices.ContainsFunc(data.Overview.Jobs, func(j Job) bool { return j.ID == evil }) {
		t.Errorf("the embedded data lost the job %q", evil)
	}
}

// TestRunningJobUsesItsTypesModel: a job whose bid has a part for the
// GPU type it is placed on (v100) shows that part's batch configuration
// and its goodput by that type's model, and each measurement of the
// detail view is set against the model of its own type.
func TestRunningJobUsesItsTypesModel(t *testing.T) {
	st := testState()
	a := st.Jobs["a"]
	slow := model
	slow.AlphaC, slow.BetaC = 3*model.AlphaC, 3*model.BetaC
	tb := state.TypeBid{GPUType: "v100", Params: slow, MostProfiled: 2,
		Single: slices.Clone(a.Bid.Single), Multi: slices.Clone(a.Bid.Multi)}
	tb.Multi[4] = state.BatchChoice{LocalBatch: 32, AccumSteps: 2, Gain: 1.2}
	a.Bid.Types = []state.TypeBid{tb}
	a.Profile[1].GPUType = "v100" // measured on v100; the other entry untyped
	if err := a.Bid.Validate(); err != nil {
		t.Fatal(err)
	}
	var got Job
	for _, j := range jobsOf(st, nil) {
		if j.ID == "a" {
			got = j
		}
	}
	md := goodput.Model{Params: slow, Grad: a.Bid.Grad, Limits: a.Spec.Limits}
	if got.LocalBatch != 32 || got.AccumSteps != 2 || got.Gain != 1.2 || got.Goodput != md.Goodput(2, 5, 32, 2) {
		t.Errorf("job a on v100: %+v, want the v100 choice and goodput %v", got, md.Goodput(2, 5, 32, 2))
	}
	d, ok := detailOf(st, "a", nil, 0, nil)
	if !ok || len(d.Profile) != 2 {
		t.Fatalf("detail %+v", d)
	}
	for _, pp := range d.Profile {
		p := model
		if pp.GPUType == "v100" {
			p = slow
		}
		if want := p.Throughput(pp.Nodes, pp.Replicas, float64(pp.LocalBatch), 0); math.Abs(pp.Fitted-want) > 1e-9*want {
			t.Errorf("%+v: fitted %v, want %v by its type's model", pp, pp.Fitted, want)
		}
	}
	// The fitted curves: one per (type, shape) measured, each by its
	// type's model.
	if len(d.Fit) != 2 {
		t.Fatalf("fit curves %+v, want one per measured (type, shape)", d.Fit)
	}
	for _, c := range d.Fit {
		p := model
		if c.GPUType == "v100" {
			p = slow
		}
		m, got := c.Points[fitPoints/2][0], c.Points[fitPoints/2][1]
		if want := p.Throughput(c.Nodes, c.Replicas, m, 0); math.Abs(got-want) > 1e-9*want {
			t.Errorf("curve %q %d/%d at batch %v: %v, want %v by its type's model", c.GPUType, c.Nodes, c.Replicas, m, got, want)
		}
	}
	// The v100 speedups: its choices by its model over its own one-GPU best.
	one, err := md.Optimize(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.TypeSpeedups) != 1 || d.TypeSpeedups[0].GPUType != "v100" || d.TypeSpeedups[0].OneGPU != one.Goodput {
		t.Fatalf("type speedups %+v, want v100's with one-GPU goodput %v", d.TypeSpeedups, one.Goodput)
	}
	pts := d.TypeSpeedups[0].Points
	if want := md.Goodput(2, 5, 32, 2) / one.Goodput; len(pts) < 5 || pts[4].Replicas != 5 || math.Abs(pts[4].Multi-want) > 1e-9*want {
		t.Errorf("v100 speedups %+v, want %v on 5 GPUs over several nodes", pts, want)
	}
}
