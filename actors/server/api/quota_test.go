package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pollux/consensus"
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

// TestSubmissionRate: a submission the leader refuses past its
// submitter's token bucket (consensus.ErrRateLimited, here or forwarded
// from the leader as text) is a 429 with the leader's Retry-After and
// one log line naming the submitter, and changes nothing.
func TestSubmissionRate(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		retry string
	}{
		{name: "refused on this server, the leader", err: &consensus.RateError{Accessor: "acc-submit", Name: "alice", Rate: 0.5, Burst: 1, Wait: 1500 * time.Millisecond}, retry: "2"},
		{name: "refused by the leader, forwarded", err: fmt.Errorf("%w: token acc-submit (alice) submits faster than its quota of 0.5 submissions per second (burst 1), over all servers (pollux acl quota); retry in 3.2s", consensus.ErrRateLimited), retry: "4"},
		{name: "forwarded without a wait", err: fmt.Errorf("%w: token acc-submit", consensus.ErrRateLimited), retry: "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, fb, buf, _ := tenantAPI(t)
			fb.refuse = tt.err
			before := state.EncodeState(fb.st)
			code, body, h := doHeader(a, submitSecret, "POST", PathJobs, strings.Replace(good, "j1", "r2", 1))
			if code != http.StatusTooManyRequests || !strings.Contains(body, "past its submission rate") || h.Get("Retry-After") != tt.retry {
				t.Fatalf("%d %s Retry-After %q, want 429 after %s s", code, body, h.Get("Retry-After"), tt.retry)
			}
			if !bytes.Equal(before, state.EncodeState(fb.st)) {
				t.Errorf("the refusal changed the state")
			}
			checkOneRefusal(t, buf.String(), "acc-submit", http.StatusTooManyRequests)
		})
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
