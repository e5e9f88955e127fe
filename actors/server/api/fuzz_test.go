package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"pollux/consensus/state"
)

// FuzzRequestBodies sends any body to every endpoint that decodes one
// (a job submission, a new token, a new Raft server), as an admin. Seen
// from the outside: the server never panics nor answers 5xx, always
// answers JSON, and a refusal (4xx) changes neither the replicated state
// nor the Raft membership.
func FuzzRequestBodies(f *testing.F) {
	for _, seed := range []struct {
		route uint8
		body  string
	}{
		{0, good},
		{0, `{"name":"j2","application":"cifar10","init_batch_size":128}`},
		{0, "name: j3\napplication: cifar10\ninit_batch_size: -1\n"},
		{1, `{"name":"ci","role":"submit"}`},
		{1, `{"name":"ci","role":"root"}`},
		{2, `{"id":"s3","address":"127.0.0.1:7000"}`},
		{2, `{"id":"s3","address":"nowhere"}`},
		{2, `{"id":"","address":"127.0.0.1:1"}`},
		{1, `{"name":"x","role":"read"}{"name":"y"}`},
		{2, `[`},
		{0, ""},
	} {
		f.Add(seed.route, seed.body)
	}
	paths := []string{PathJobs, PathACLTokens, PathPeers}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		a, fb := newTest()
		path := paths[int(route)%len(paths)]
		before, servers, applied := state.EncodeState(fb.st), slices.Clone(fb.servers), fb.applied
		code, out := do(a, "POST", path, body)
		if code >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, code, out)
		}
		if !json.Valid([]byte(out)) {
			t.Fatalf("POST %s %q: %d, not JSON: %s", path, body, code, out)
		}
		if code >= 400 {
			if !bytes.Equal(before, state.EncodeState(fb.st)) || fb.applied != applied {
				t.Fatalf("POST %s %q refused (%d %s) but changed the state", path, body, code, out)
			}
			if !slices.Equal(servers, fb.servers) {
				t.Fatalf("POST %s %q refused (%d %s) but changed the servers: %v", path, body, code, out, fb.servers)
			}
		} else if code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("POST %s %q: %d %s", path, body, code, out)
		}
	})
}
