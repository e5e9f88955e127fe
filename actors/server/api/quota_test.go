package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pollux/consensus/state"
	"pollux/internal/logbuf"
)

// tenantAPI is newTest's API with a clock, logging to a buffer, and for
// alice (acc-submit) a live job "live-a" and a finished "done-a".
func tenantAPI(t *testing.T) (*API, *fakeBackend, *logbuf.Buffer, *time.Time) {
	t.Helper()
	_, fb := newTest()
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	a := New("s1", Config{Backend: fb, Apps: []string{"cifar10"}, Now: clock, Logger: slog.New(slog.DiscardHandler)})
	for _, name := range []string{"live-a", "done-a"} {
		if code, body := doAs(a, submitSecret, "POST", PathJobs, strings.Replace(good, "j1", name, 1)); code != http.StatusCreated {
			t.Fatalf("submit %s: %d %s", name, code, body)
		}
	}
	if code, body := doAs(a, submitSecret, "POST", PathJobs+"/done-a/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	var buf logbuf.Buffer
	a = New("s1", Config{Backend: fb, Apps: []string{"cifar10"}, Now: clock, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	return a, fb, &buf, &now
}

// doHeader is doAs returning the answer's headers too.
func doHeader(a *API, secret, method, path, body string) (int, string, http.Header) {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+secret)
	a.ServeHTTP(rec, r)
	return rec.Code, rec.Body.String(), rec.Header()
}

// TestTenancyRefusals: a submission that would touch another tenant's
// checkpoints, or pass a quota or the state budget, is refused with a
// status and reason, one log line naming the submitter, and no change
// of state.
func TestTenancyRefusals(t *testing.T) {
	tests := []struct {
		name     string
		setup    *state.SetQuota // applied before (nil: none)
		secret   string
		accessor string
		body     string
		code     int
		mention  string
		retry    string // Retry-After ("": none)
	}{
		{name: "checkpoint squatting", secret: otherSecret, accessor: "acc-other", body: good + "checkpoint_dir: /ckpt/live-a\n",
			code: http.StatusConflict, mention: `held by job \"live-a\"`},
		{name: "directory of a job to come", secret: otherSecret, accessor: "acc-other", body: good + "checkpoint_dir: /ckpt/next-a\n",
			code: http.StatusForbidden, mention: "not its own"},
		{name: "resume another tenant's job", secret: otherSecret, accessor: "acc-other", body: good + "resume_from: done-a\n",
			code: http.StatusForbidden, mention: "submitted by token acc-submit (alice)"},
		{name: "job quota", setup: &state.SetQuota{Accessor: "acc-submit", Quota: state.Quota{Jobs: 1}, By: "acc-admin"},
			secret: submitSecret, accessor: "acc-submit", body: good, code: http.StatusTooManyRequests, mention: "holds 1 running or pending jobs", retry: "30"},
		{name: "spec bytes quota", setup: &state.SetQuota{Accessor: "acc-submit", Quota: state.Quota{SpecBytes: 10}, By: "acc-admin"},
			secret: submitSecret, accessor: "acc-submit", body: good, code: http.StatusTooManyRequests, mention: "bytes of job specs", retry: "30"},
		{name: "state budget", setup: &state.SetQuota{Budget: 10, By: "acc-admin"},
			secret: otherSecret, accessor: "acc-other", body: good, code: http.StatusInsufficientStorage, mention: "budget of 10 "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, fb, buf, _ := tenantAPI(t)
			if tt.setup != nil {
				if _, err := state.ApplyTo(fb.st, tt.setup, 3); err != nil {
					t.Fatal(err)
				}
			}
			before := state.EncodeState(fb.st)
			code, body, h := doHeader(a, tt.secret, "POST", PathJobs, tt.body)
			if code != tt.code || !strings.Contains(body, tt.mention) {
				t.Fatalf("%d %s, want %d mentioning %s", code, body, tt.code, tt.mention)
			}
			if got := h.Get("Retry-After"); got != tt.retry {
				t.Errorf("Retry-After %q, want %q", got, tt.retry)
			}
			if !bytes.Equal(before, state.EncodeState(fb.st)) {
				t.Errorf("the refusal changed the state")
			}
			checkOneRefusal(t, buf.String(), tt.accessor, tt.code)
		})
	}
}

// checkOneRefusal checks that log holds exactly one line, the refusal
// of a request of accessor with code.
func checkOneRefusal(t *testing.T, log string, accessor string, code int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want one: %q", len(lines), lines)
	}
	var rec struct {
		Msg      string `json:"msg"`
		Accessor string `json:"accessor"`
		Status   int    `json:"status"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec.Msg != "api: refused request" || rec.Accessor != accessor || rec.Status != code {
		t.Errorf("log line %s (%v), want a refusal of %s with %d", lines[0], err, accessor, code)
	}
}

// TestSubmissionRate: past its token bucket a submitter gets 429 with
// Retry-After and one log line naming it, and nothing reaches the
// state; the bucket refills with the clock, and another submitter's is
// its own.
func TestSubmissionRate(t *testing.T) {
	a, fb, buf, now := tenantAPI(t)
	if _, err := state.ApplyTo(fb.st, &state.SetQuota{Accessor: "acc-submit", Quota: state.Quota{Rate: 0.5, Burst: 1}, By: "acc-admin"}, 3); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(time.Hour) // past the refresh of the quotas read
	submit := func(secret, name string) (int, string, http.Header) {
		return doHeader(a, secret, "POST", PathJobs, strings.Replace(good, "j1", name, 1))
	}
	if code, body, _ := submit(submitSecret, "r1"); code != http.StatusCreated {
		t.Fatalf("first: %d %s", code, body)
	}
	mark := len(buf.String())
	applied := fb.applied
	code, body, h := submit(submitSecret, "r2")
	if code != http.StatusTooManyRequests || !strings.Contains(body, "0.5 submissions per second") || h.Get("Retry-After") != "2" {
		t.Fatalf("second: %d %s Retry-After %q, want 429 after 2 s", code, body, h.Get("Retry-After"))
	}
	if fb.applied != applied || fb.st.Jobs["r2"] != nil {
		t.Errorf("a refused submission reached the state")
	}
	checkOneRefusal(t, buf.String()[mark:], "acc-submit", http.StatusTooManyRequests)
	if code, body, _ := submit(otherSecret, "b1"); code != http.StatusCreated {
		t.Errorf("another submitter: %d %s", code, body)
	}
	*now = now.Add(2 * time.Second)
	if code, body, _ := submit(submitSecret, "r2"); code != http.StatusCreated {
		t.Errorf("after the refill: %d %s", code, body)
	}
}

// TestQuotaEndpoints: an admin sets and lists quotas; a submit token
// can do neither; a bad quota is a 400 naming the field.
func TestQuotaEndpoints(t *testing.T) {
	a, fb, _, _ := tenantAPI(t)
	set := `{"accessor":"acc-submit","quota":{"jobs":3,"rate":1}}`
	if code, body := doAs(a, submitSecret, "POST", PathACLQuotas, set); code != http.StatusForbidden {
		t.Errorf("submit token sets a quota: %d %s", code, body)
	}
	if code, body := do(a, "POST", PathACLQuotas, set); code != http.StatusOK {
		t.Fatalf("set: %d %s", code, body)
	}
	if q := fb.st.Quotas.Of("acc-submit"); q.Jobs != 3 || q.Rate != 1 || q.SpecBytes != state.DefaultQuota.SpecBytes {
		t.Errorf("quota in the state %+v", q)
	}
	if code, body := do(a, "POST", PathACLQuotas, `{"quota":{"jobs":-1}}`); code != http.StatusBadRequest || !strings.Contains(body, "quota of -1 jobs") {
		t.Errorf("bad quota: %d %s", code, body)
	}
	if code, body := do(a, "POST", PathACLQuotas, `{"quota":{},"state_budget":1000000}`); code != http.StatusOK {
		t.Errorf("set the budget: %d %s", code, body)
	}
	code, body := do(a, "GET", PathACLQuotas, "")
	var qs Quotas
	if err := json.Unmarshal([]byte(body), &qs); code != http.StatusOK || err != nil {
		t.Fatalf("list: %d %s %v", code, body, err)
	}
	if qs.StateBudget != 1000000 || qs.StateBytes <= 0 || qs.Default.Jobs != state.DefaultQuota.Jobs {
		t.Errorf("listed %+v", qs)
	}
	var alice *TokenQuota
	for i := range qs.Tokens {
		if qs.Tokens[i].Accessor == "acc-submit" {
			alice = &qs.Tokens[i]
		}
	}
	if alice == nil || alice.Own == nil || alice.Own.Jobs != 3 || alice.Quota.Jobs != 3 || alice.Jobs != 1 || alice.SpecBytes <= 0 {
		t.Errorf("alice's quota listed %+v", alice)
	}
	if code, _ := doAs(a, readSecret, "GET", PathACLQuotas, ""); code != http.StatusForbidden {
		t.Errorf("read token lists the quotas: %d", code)
	}
}
