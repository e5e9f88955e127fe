package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// doKeyed sends a request with the token secret and an idempotency key.
func doKeyed(a *API, secret, key, method, path, body string) (int, string) {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+secret)
	if key != "" {
		r.Header.Set(HeaderIdempotencyKey, key)
	}
	a.ServeHTTP(rec, r)
	return rec.Code, rec.Body.String()
}

// TestIdempotentWrites replays writes as a retrying client does, in
// order, against one state: a retry with the request's key answers as
// the request did; anything else that is not a retry is still refused.
func TestIdempotentWrites(t *testing.T) {
	a, fb := newTest()
	other := strings.Replace(good, "max_batch_size: 1024", "max_batch_size: 2048", 1)
	steps := []struct {
		name, secret, key, method, path, body string
		code                                  int
		mention                               string
	}{
		{"submit", submitSecret, "k-sub-1", "POST", PathJobs, good, http.StatusCreated, `"id":"j1"`},
		{"submit retried", submitSecret, "k-sub-1", "POST", PathJobs, good, http.StatusCreated, `"id":"j1"`},
		{"another spec under the key", submitSecret, "k-sub-1", "POST", PathJobs, other, http.StatusConflict, "already exists"},
		{"same spec, another key", submitSecret, "k-sub-2", "POST", PathJobs, good, http.StatusConflict, "already exists"},
		{"same spec, no key", submitSecret, "", "POST", PathJobs, good, http.StatusConflict, "already exists"},
		{"another submitter, same key", otherSecret, "k-sub-1", "POST", PathJobs, good, http.StatusConflict, "already exists"},
		{"bad key", submitSecret, "no spaces", "POST", PathJobs, good, http.StatusBadRequest, HeaderIdempotencyKey},
		{"long key", submitSecret, strings.Repeat("k", maxKey+1), "POST", PathJobs + "/j1/cancel", "", http.StatusBadRequest, HeaderIdempotencyKey},
		{"cancel", submitSecret, "k-can-1", "POST", PathJobs + "/j1/cancel", "", http.StatusOK, `"state":"cancelled"`},
		{"cancel retried", submitSecret, "k-can-1", "POST", PathJobs + "/j1/cancel", "", http.StatusOK, `"state":"cancelled"`},
		{"cancel, another key", submitSecret, "k-can-2", "POST", PathJobs + "/j1/cancel", "", http.StatusConflict, "already finished"},
		{"cancel, no key", submitSecret, "", "POST", PathJobs + "/j1/cancel", "", http.StatusConflict, "already finished"},
	}
	for _, s := range steps {
		code, body := doKeyed(a, s.secret, s.key, s.method, s.path, s.body)
		if code != s.code || !strings.Contains(body, s.mention) {
			t.Errorf("%s: %d %s, want %d mentioning %q", s.name, code, body, s.code, s.mention)
		}
	}
	j := fb.st.Jobs["j1"]
	if j == nil || j.Spec.Limits.MaxBatch != 1024 || j.Submitter != "acc-submit" || j.CancelKey != "k-can-1" ||
		!strings.HasPrefix(j.SubmitKey, "k-sub-1.") {
		t.Errorf("stored job %+v", j)
	}
}
