package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/proc"
)

// fakeAPI answers submissions by their body, and reads with fixed
// answers.
func fakeAPI(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.PathJobs, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		code := map[string]int{"created": 201, "exists": 409, "bad": 400, "full": 507, "busy": 503}[string(b)]
		if string(b) == "slow" { // answers only after the client gave up
			<-r.Context().Done()
			code = 201
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(api.Error{Error: "said " + string(b)})
	})
	mux.HandleFunc("GET "+api.PathJobs, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderStale, "true")
		_ = json.NewEncoder(w).Encode([]api.Job{{ID: "j", State: "running", Incarnation: 2, Epoch: 3, Progress: 4.5}})
	})
	mux.HandleFunc("POST "+api.PathJobs+"/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		code := map[string]int{"run": 200, "done": 409, "none": 404, "full": 507, "busy": 503}[r.PathValue("id")]
		w.WriteHeader(code)
		if code == 200 {
			inc := uint64(4)
			_ = json.NewEncoder(w).Encode(api.CancelResult{ID: r.PathValue("id"), State: "cancelled", Incarnation: &inc})
			return
		}
		_ = json.NewEncoder(w).Encode(api.Error{Error: "cancel " + r.PathValue("id")})
	})
	mux.HandleFunc("GET "+api.PathJobs+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		switch id {
		case "nohdr":
		case "other":
			w.Header().Set(api.HeaderStale, "false")
			id = "someone-else"
		default:
			w.Header().Set(api.HeaderStale, "false")
		}
		if id == "none" {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(api.Error{Error: "no job"})
			return
		}
		_ = json.NewEncoder(w).Encode(api.Job{ID: id, State: "cancelled", Incarnation: 3})
	})
	mux.HandleFunc("GET "+api.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(api.Status{Leader: "s0", Serving: "s0", Term: 4, Generation: 9})
	})
	srv := httptest.NewTLSServer(mux) // the launcher speaks HTTPS, as to a real server
	t.Cleanup(srv.Close)
	return srv
}

// TestClientRecordsEveryOperation: each answer is classified (ok, fail
// for a definite refusal, info when unknown) and recorded with an invoke
// before it.
func TestClientRecordsEveryOperation(t *testing.T) {
	srv := fakeAPI(t)
	path := filepath.Join(t.TempDir(), "history.jsonl")
	rec, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	m := &Member{Role: history.Server, ID: "s0", HTTP: srv.Listener.Addr().String()}
	c := &Cluster{Servers: []*Member{m}, log: slog.New(slog.DiscardHandler), hist: rec, http: srv.Client()}
	cl := c.Client()
	ctx := context.Background()
	for body, want := range map[string]history.Type{"created": history.OK, "exists": history.Fail, "bad": history.Fail,
		"full": history.Fail, "busy": history.Info, "slow": history.Info} {
		timeout := 10 * time.Second // generous: a loaded machine, TLS handshakes under -race
		if body == "slow" {
			timeout = 100 * time.Millisecond
		}
		a := cl.Submit(ctx, m, "job-"+body, []byte(body), timeout)
		if a.Type != want {
			t.Errorf("%s: %+v, want %s", body, a, want)
		}
		if body == "bad" && a.Err != "said bad" {
			t.Errorf("the refusal's error text: %q", a.Err)
		}
	}
	js, stale, a := cl.Jobs(ctx, m, time.Second)
	if !a.OK() || !stale || len(js) != 1 || js[0].Incarnation != 2 {
		t.Errorf("jobs: %+v %v %+v", js, stale, a)
	}
	st, a := cl.Status(ctx, m, time.Second)
	if !a.OK() || st.Generation != 9 {
		t.Errorf("status: %+v %+v", st, a)
	}
	// Cancels: 200 is OK; 404 and 409 definite refusals; 507 too (a full
	// disk refused it before logging); another 5xx unknown.
	for job, want := range map[string]history.Type{"run": history.OK, "done": history.Fail, "none": history.Fail,
		"full": history.Fail, "busy": history.Info} {
		if a := cl.Cancel(ctx, m, job, time.Second); a.Type != want {
			t.Errorf("cancel %s: %+v, want %s", job, a, want)
		}
	}
	// Job reads: found, absent (a 404 is an answer), or unknown (no stale
	// header, another job than asked).
	if j, found, stale, a := cl.Job(ctx, m, "j", time.Second); !a.OK() || !found || stale || j.Incarnation != 3 {
		t.Errorf("job j: %+v %v %v %+v", j, found, stale, a)
	}
	if _, found, _, a := cl.Job(ctx, m, "none", time.Second); !a.OK() || found || a.Code != 404 {
		t.Errorf("job none: %v %+v", found, a)
	}
	for _, job := range []string{"nohdr", "other"} {
		if _, _, _, a := cl.Job(ctx, m, job, time.Second); a.Type != history.Info {
			t.Errorf("job %s: %+v, want unknown", job, a)
		}
	}
	dead := &Member{Role: history.Server, ID: "s1", HTTP: "127.0.0.1:1"}
	if a := cl.Submit(ctx, dead, "job-x", []byte("created"), time.Second); a.Type != history.Info {
		t.Errorf("a dead server: %+v", a)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	lines, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2*18 {
		t.Fatalf("%d lines for 18 operations", len(lines))
	}
	open := map[uint64]bool{}
	for _, l := range lines {
		if l.Op.Type == history.Invoke {
			open[l.Op.ID] = true
			continue
		}
		if !open[l.Op.ID] {
			t.Errorf("completion %+v before its invoke", l.Op)
		}
		delete(open, l.Op.ID)
		if l.Op.F == history.Jobs && (!l.Op.Stale || len(l.Op.Jobs) != 1 || l.Op.Jobs[0].Progress != 4.5) {
			t.Errorf("jobs answer recorded as %+v", l.Op)
		}
		if l.Op.F == history.GetJob && l.Op.Type == history.OK && (l.Op.Stale || (l.Op.Code == 404) != (len(l.Op.Jobs) == 0)) {
			t.Errorf("job answer recorded as %+v", l.Op)
		}
		if l.Op.F == history.Status && (l.Op.Status == nil || l.Op.Status.Generation != 9) {
			t.Errorf("status answer recorded as %+v", l.Op)
		}
		if (l.Op.F == history.Submit || l.Op.F == history.Cancel) && l.Op.Type == history.Invoke && l.Op.Key == "" {
			t.Errorf("a write recorded without its idempotency key: %+v", l.Op)
		}
		if l.Op.F == history.Cancel && l.Op.Type == history.OK && (l.Op.Inc == nil || *l.Op.Inc != 4) {
			t.Errorf("cancel answer recorded as %+v", l.Op)
		}
	}
	if len(open) != 0 {
		t.Errorf("operations never completed: %v", open)
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Exec: []string{"pollux"}, Dir: "/x"}
	if err := o.defaults(); err != nil || o.Servers != 3 || o.Network != Loopback || o.Logger == nil {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	for name, bad := range map[string]Options{
		"no dir":      {Exec: []string{"p"}},
		"no exec":     {Dir: "/x"},
		"bad network": {Exec: []string{"p"}, Dir: "/x", Network: "carrier-pigeon"},
		"negative":    {Exec: []string{"p"}, Dir: "/x", DataSize: -1},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCPUSlotsOptions(t *testing.T) {
	o := Options{Exec: []string{"pollux"}, Dir: "/x", CPUSlots: 3}
	if err := o.defaults(); err != nil || o.GPUsPerAgent != 3 {
		t.Errorf("CPUSlots 3: %v, %d GPUs per agent, want 3", err, o.GPUsPerAgent)
	}
	for _, bad := range []Options{
		{Exec: []string{"pollux"}, Dir: "/x", CPUSlots: 3, GPUsPerAgent: 4},
		{Exec: []string{"pollux"}, Dir: "/x", CPUSlots: -1},
	} {
		if err := bad.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", bad, err)
		}
	}
}

// keyedAPI is two servers of one cluster that apply a write and lose
// the answer (503) on the first server, and answer as the API does on
// the second: a retry with the key of the write that took effect gets
// its answer (201, 200), another key 409. It returns the servers and
// the keys each request carried.
func keyedAPI(t *testing.T) ([]*Member, func() []string) {
	var (
		mu   sync.Mutex
		keys []string
		made = map[string]string{"taken": "someone-elses-key"} // job -> its submission's key
		done = map[string]string{}                             // job -> its cancel's key
	)
	handler := func(lose bool) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("POST "+api.PathJobs, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			job, key := string(b), r.Header.Get(api.HeaderIdempotencyKey)
			mu.Lock()
			defer mu.Unlock()
			keys = append(keys, key)
			code := http.StatusCreated
			if k, ok := made[job]; !ok {
				made[job] = key
			} else if k != key || key == "" {
				code = http.StatusConflict
			}
			if lose {
				code = http.StatusServiceUnavailable
			}
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(map[string]string{"id": job})
		})
		mux.HandleFunc("POST "+api.PathJobs+"/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
			job, key := r.PathValue("id"), r.Header.Get(api.HeaderIdempotencyKey)
			mu.Lock()
			defer mu.Unlock()
			keys = append(keys, key)
			code := http.StatusOK
			if k, ok := done[job]; !ok {
				done[job] = key
			} else if k != key || key == "" {
				code = http.StatusConflict
			}
			if lose {
				code = http.StatusServiceUnavailable
			}
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(api.CancelResult{ID: job, State: "cancelled"})
		})
		return mux
	}
	var ms []*Member
	for i, lose := range []bool{true, false} {
		srv := httptest.NewTLSServer(handler(lose))
		t.Cleanup(srv.Close)
		ms = append(ms, &Member{Role: history.Server, ID: []string{"s0", "s1"}[i], HTTP: srv.Listener.Addr().String()})
	}
	return ms, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := keys
		keys = nil
		return out
	}
}

// serving makes members ms serving: a serving member needs a process,
// and one that sleeps stands for each.
func serving(t *testing.T, ms []*Member) {
	t.Helper()
	g := proc.ForTest(t)
	for _, m := range ms {
		p, err := g.Start(proc.Spec{Name: "server/" + m.ID, Path: "/bin/sleep", Args: []string{"60"}})
		if err != nil {
			t.Fatal(err)
		}
		m.p = p
	}
}

// TestAnyRetriesWithOneKey: SubmitAny and CancelAny send one key per
// call, the same to each server they try, so the retry of a write whose
// answer was lost succeeds as the write did; a name another submission
// holds is a refusal (409), not a success.
func TestAnyRetriesWithOneKey(t *testing.T) {
	ms, sent := keyedAPI(t)
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	c := &Cluster{Servers: ms, log: slog.New(slog.DiscardHandler), http: srv.Client()}
	serving(t, ms)
	cl := c.Client()
	ctx := context.Background()
	sameKey := func(what string) {
		t.Helper()
		keys := sent()
		if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
			t.Errorf("%s: keys sent %q, want one key sent to both servers", what, keys)
		}
	}
	if a := cl.SubmitAny(ctx, "j1", []byte("j1"), 10*time.Millisecond, 10*time.Second); !a.OK() || a.Code != http.StatusCreated {
		t.Errorf("submit with a lost answer, retried: %+v", a)
	}
	sameKey("submit")
	if a := cl.SubmitAny(ctx, "taken", []byte("taken"), 10*time.Millisecond, 10*time.Second); a.Type != history.Fail || a.Code != http.StatusConflict {
		t.Errorf("submit of a name another submission holds: %+v, want a 409 refusal", a)
	}
	sameKey("submit of a taken name")
	if a := cl.SubmitAny(ctx, "j1", []byte("j1"), 10*time.Millisecond, 10*time.Second); a.Type != history.Fail || a.Code != http.StatusConflict {
		t.Errorf("a second submission (a new call) of j1: %+v, want a 409 refusal", a)
	}
	sameKey("a second submission")
	if a := cl.CancelAny(ctx, "j1", 10*time.Millisecond, 10*time.Second); !a.OK() || a.Code != http.StatusOK {
		t.Errorf("cancel with a lost answer, retried: %+v", a)
	}
	sameKey("cancel")
	if a := cl.CancelAny(ctx, "j1", 10*time.Millisecond, 10*time.Second); a.Type != history.Fail || a.Code != http.StatusConflict {
		t.Errorf("a second cancel: %+v, want a 409 refusal", a)
	}
	sameKey("a second cancel")
}

// TestReadsReachEveryServer: a client's successive reads start from the
// next server in turn, so a follower that answers from the past marked
// fresh is read between the leader's answers (where a checker sees it)
// instead of the first server to answer taking every read.
func TestReadsReachEveryServer(t *testing.T) {
	// s0 is a frozen follower claiming freshness, s1 an honest follower
	// (stale), s2 the leader.
	answer := map[string]struct {
		stale string
		state string
	}{"s0": {"false", "running"}, "s1": {"true", "running"}, "s2": {"false", "completed"}}
	var ms []*Member
	var client *http.Client
	for _, id := range []string{"s0", "s1", "s2"} {
		mux := http.NewServeMux()
		mux.HandleFunc("GET "+api.PathJobs, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(api.HeaderStale, answer[id].stale)
			_ = json.NewEncoder(w).Encode([]api.Job{{ID: "j", State: answer[id].state}})
		})
		mux.HandleFunc("GET "+api.PathJobs+"/{id}", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(api.HeaderStale, answer[id].stale)
			_ = json.NewEncoder(w).Encode(api.Job{ID: r.PathValue("id"), State: answer[id].state})
		})
		srv := httptest.NewTLSServer(mux)
		t.Cleanup(srv.Close)
		client = srv.Client() // every httptest server shares one certificate
		ms = append(ms, &Member{Role: history.Server, ID: id, HTTP: srv.Listener.Addr().String()})
	}
	serving(t, ms)
	c := &Cluster{Servers: ms, log: slog.New(slog.DiscardHandler), http: client}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		read func(cl *Client) (string, error)
	}{
		{"JobsAny", func(cl *Client) (string, error) {
			js, stale, err := cl.JobsAny(ctx)
			if err != nil || stale || len(js) != 1 {
				return "", fmt.Errorf("jobs %v, stale %v, err %v", js, stale, err)
			}
			return js[0].State, nil
		}},
		{"JobAny", func(cl *Client) (string, error) {
			j, found, err := cl.JobAny(ctx, "j")
			if err != nil || !found {
				return "", fmt.Errorf("found %v, err %v", found, err)
			}
			return j.State, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := c.Client()
			seen := map[string]int{}
			for range 6 {
				st, err := tc.read(cl)
				if err != nil {
					t.Fatal(err)
				}
				seen[st]++
			}
			if seen["running"] == 0 || seen["completed"] == 0 {
				t.Errorf("6 reads saw %v: want both the frozen follower's past and the leader's present", seen)
			}
		})
	}
}
