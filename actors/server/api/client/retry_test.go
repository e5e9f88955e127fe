package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
	"pollux/consensus/state"
)

// keys records the idempotency keys of the requests a test server got.
type keys struct {
	mu   sync.Mutex
	seen []string
}

func (k *keys) record(r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen = append(k.seen, r.Header.Get(api.HeaderIdempotencyKey))
}

func (k *keys) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := k.seen
	k.seen = nil
	return out
}

// TestRetriedWritesSucceed: the first server commits each write and then
// fails its answer with a 503, as a server whose leader changed after the
// commit does; the client retries on the second server (same replicated
// state), which must answer as the write did, not "already exists" or
// "is cancelled". Another logical request for the same name is still
// refused.
func TestRetriedWritesSucceed(t *testing.T) {
	fb := newBackend(false)
	var k keys
	first := newAPI("s1", fb, "")
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.record(r)
		first.ServeHTTP(httptest.NewRecorder(), r) // commits; its answer is lost
		http.Error(w, `{"error":"consensus: leadership lost"}`, http.StatusServiceUnavailable)
	}))
	t.Cleanup(failing.Close)
	second := newAPI("s2", fb, "")
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.record(r)
		second.ServeHTTP(w, r)
	}))
	t.Cleanup(healthy.Close)
	c := newClient(t, client.Config{Servers: []string{failing.URL, healthy.URL}, Token: adminSecret})
	ctx := context.Background()
	spec := []byte("name: resnet\napplication: cifar10\ninit_batch_size: 128\n")

	id, err := c.Submit(ctx, spec)
	if err != nil || id != "resnet" {
		t.Fatalf("retried submit: %q, %v", id, err)
	}
	sameKey := func(what string) {
		t.Helper()
		got := k.take()
		if len(got) != 2 || got[0] == "" || got[0] != got[1] {
			t.Errorf("%s: keys %q, want one key sent to both servers", what, got)
		}
	}
	sameKey("submit")
	if j := fb.LocalState().Jobs["resnet"]; j == nil || j.State != state.Pending {
		t.Fatalf("job after the retried submit: %+v", j)
	}

	// Another submission of the name (a new logical request) is refused.
	_, err = c.Submit(ctx, spec)
	var refused *client.APIError
	if !errors.As(err, &refused) || refused.StatusCode != http.StatusConflict {
		t.Fatalf("second submit of the name: %v, want a 409", err)
	}
	if got := k.take(); len(got) != 2 || got[0] == "" {
		t.Fatalf("second submit: keys %q", got)
	}

	res, err := c.Cancel(ctx, "resnet")
	if err != nil || res.ID != "resnet" || res.State != "cancelled" {
		t.Fatalf("retried cancel: %+v, %v", res, err)
	}
	sameKey("cancel")
	if j := fb.LocalState().Jobs["resnet"]; j == nil || j.State != state.Cancelled {
		t.Fatalf("job after the retried cancel: %+v", j)
	}
	// A new cancel of the finished job is refused.
	if _, err = c.Cancel(ctx, "resnet"); !errors.As(err, &refused) || refused.StatusCode != http.StatusConflict {
		t.Fatalf("second cancel: %v, want a 409", err)
	}
}
