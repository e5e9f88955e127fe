package api

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/internal/logbuf"
)

// logged returns newTest's API logging to a buffer.
func logged() (*API, *fakeBackend, *logbuf.Buffer) {
	_, fb := newTest()
	var buf logbuf.Buffer
	a := New("s1", Config{Backend: fb, Apps: []string{"cifar10"}, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	return a, fb, &buf
}

// TestRouteRoles pins the documented role of every endpoint
// (docs/security.md): reads need read, submitting and cancelling submit,
// the operator and token endpoints admin; only the bootstrap needs none.
func TestRouteRoles(t *testing.T) {
	want := map[string]state.Role{
		"POST " + PathJobs:                             state.RoleSubmit,
		"GET " + PathJobs:                              state.RoleRead,
		"GET " + PathJobs + "/{id}":                    state.RoleRead,
		"POST " + PathJobs + "/{id}/cancel":            state.RoleSubmit,
		"GET " + PathJobs + "/{id}/logs":               state.RoleSubmit,
		"GET " + PathNodes:                             state.RoleRead,
		"GET " + PathStatus:                            state.RoleRead,
		"GET " + PathEvents:                            state.RoleRead,
		"GET /metrics":                                 state.RoleRead,
		"GET " + PathPeers:                             state.RoleAdmin,
		"POST " + PathPeers:                            state.RoleAdmin,
		"DELETE " + PathPeers + "/{id}":                state.RoleAdmin,
		"GET " + PathACLTokens:                         state.RoleAdmin,
		"POST " + PathACLTokens:                        state.RoleAdmin,
		"POST " + PathACLTokens + "/{accessor}/revoke": state.RoleAdmin,
		"GET " + PathACLSelf:                           state.RoleRead,
		"GET " + PathACLQuotas:                         state.RoleAdmin,
		"POST " + PathACLQuotas:                        state.RoleAdmin,
		"POST " + PathACLBootstrap:                     roleBootstrap,
		"GET " + PathOpenAPI:                           state.RoleRead,
		"GET " + PathSnapshot:                          state.RoleAdmin,
		"PUT " + PathSnapshot:                          state.RoleAdmin,
	}
	a, _ := newTest()
	if len(a.routes) != len(want) {
		t.Errorf("%d routes, want %d", len(a.routes), len(want))
	}
	for _, rt := range a.routes {
		if need, ok := want[rt.pattern]; !ok || need != rt.need {
			t.Errorf("%s needs %v, want %v (documented: %v)", rt.pattern, rt.need, want[rt.pattern], ok)
		}
	}
}

// concrete turns a route pattern into a request on newTest's state: a
// job submitted by alice, a read token to revoke, a body that parses.
func concrete(pattern string) (method, path, body string) {
	method, path, _ = strings.Cut(pattern, " ")
	path = strings.NewReplacer("{id}", "alices", "{accessor}", "acc-read").Replace(path)
	switch {
	case method == "POST" && path == PathJobs:
		body = strings.Replace(good, "j1", "new-job", 1)
	case method == "POST" && path == PathPeers:
		body = `{"id":"s9","address":"127.0.0.1:9"}`
	case method == "POST" && path == PathACLTokens:
		body = `{"name":"n","role":"read"}`
	}
	return method, path, body
}

// TestAuthorizationMatrix sends every endpoint every kind of credential:
// no token, unknown and revoked tokens get 401, a role below the
// endpoint's 403, the rest pass the check. A refused request writes
// nothing, changes nothing and is logged once, naming the peer.
func TestAuthorizationMatrix(t *testing.T) {
	const revokedSecret = "plx_revoked-secret-of-the-api-tests-012345"
	creds := []struct {
		name   string
		secret string
		role   state.Role // 0: refused with 401
	}{
		{"no token", "", 0},
		{"unknown token", "plx_unknown-secret-nobody-has-0123456789ab", 0},
		{"revoked admin", revokedSecret, 0},
		{"read", readSecret, state.RoleRead},
		{"submit (alice)", submitSecret, state.RoleSubmit},
		{"admin", adminSecret, state.RoleAdmin},
	}
	a0, _ := newTest()
	for _, rt := range a0.routes {
		if rt.need == roleBootstrap {
			continue
		}
		for _, c := range creds {
			t.Run(rt.pattern+"/"+c.name, func(t *testing.T) {
				a, fb, logs := logged()
				for _, cmd := range []state.Command{
					&state.CreateToken{Token: state.Token{Accessor: "acc-revoked", Name: "old", Role: state.RoleAdmin, Hash: state.HashSecret(revokedSecret), CreateTime: 5}},
					&state.RevokeToken{Accessor: "acc-revoked", Time: 6},
				} {
					if _, err := state.ApplyTo(fb.st, cmd, 1); err != nil {
						t.Fatal(err)
					}
				}
				if code, out := doAs(a, submitSecret, "POST", PathJobs, strings.Replace(good, "j1", "alices", 1)); code != http.StatusCreated {
					t.Fatalf("alice submits: %d %s", code, out)
				}
				before, applied := state.EncodeState(fb.st), fb.applied
				method, path, body := concrete(rt.pattern)
				code, out := doAs(a, c.secret, method, path, body)
				want := 0
				switch {
				case c.role == 0:
					want = http.StatusUnauthorized
				case !c.role.Allows(rt.need):
					want = http.StatusForbidden
				}
				if want == 0 {
					if code == http.StatusUnauthorized || code == http.StatusForbidden {
						t.Fatalf("%s %s as %s: %d %s, want it through the check", method, path, c.name, code, out)
					}
					return
				}
				if code != want {
					t.Fatalf("%s %s as %s: %d %s, want %d", method, path, c.name, code, out, want)
				}
				var e Error
				if json.Unmarshal([]byte(out), &e) != nil || !strings.HasPrefix(e.Error, "api: ") {
					t.Errorf("refusal body %q is not a clear error", out)
				}
				if fb.applied != applied || !bytes.Equal(before, state.EncodeState(fb.st)) {
					t.Errorf("a refused request wrote (%d writes) or changed the state", fb.applied-applied)
				}
				if lines := logs.Lines("api: refused request"); len(lines) != 1 || !strings.Contains(lines[0], "peer=192.0.2.1:1234") {
					t.Errorf("log lines of the refusal: %q", lines)
				}
			})
		}
	}
}

func TestBadAuthorizationHeaders(t *testing.T) {
	huge := "plx_" + strings.Repeat("A", 1<<20)
	tests := []struct {
		name    string
		headers []string
		mention string
	}{
		{"missing", nil, "no token"},
		{"basic auth", []string{"Basic dXNlcjpwYXNz"}, "want Bearer"},
		{"scheme only", []string{"Bearer"}, "empty token"},
		{"scheme and spaces", []string{"Bearer    "}, "empty token"},
		{"token without scheme", []string{adminSecret}, "want Bearer"},
		{"two headers", []string{"Bearer " + adminSecret, "Bearer " + readSecret}, "2 Authorization headers"},
		{"huge token", []string{"Bearer " + huge}, "characters"},
		{"control character", []string{"Bearer plx_abc\x01def"}, "printable ASCII"},
		{"non-ASCII", []string{"Bearer plx_ünïcode-token-of-some-length"}, "printable ASCII"},
		{"unknown", []string{"Bearer plx_no-such-token-0123456789abcdefghij"}, "unknown token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, fb, logs := logged()
			before := state.EncodeState(fb.st)
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("POST", PathJobs, strings.NewReader(good))
			for _, h := range tt.headers {
				r.Header.Add("Authorization", h)
			}
			a.ServeHTTP(rec, r)
			if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), tt.mention) {
				t.Fatalf("%d %s, want 401 mentioning %q", rec.Code, rec.Body.String(), tt.mention)
			}
			if rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if len(rec.Body.String()) > 1024 {
				t.Errorf("the refusal echoes %d bytes", rec.Body.Len())
			}
			if fb.applied != 0 || !bytes.Equal(before, state.EncodeState(fb.st)) {
				t.Error("a refused request changed the state")
			}
			if lines := logs.Lines("api: refused request"); len(lines) != 1 || len(lines[0]) > 2048 {
				t.Errorf("log lines: %d (%d bytes)", len(lines), len(strings.Join(lines, "")))
			}
		})
	}
	// The scheme is case-insensitive and spaces around the token are
	// dropped.
	a, _ := newTest()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", PathJobs, nil)
	r.Header.Set("Authorization", "bearer  "+readSecret+" ")
	a.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Errorf("lower-case bearer: %d %s", rec.Code, rec.Body.String())
	}
}

// TestCancelOwnJobsOnly: a submit token cancels the jobs it submitted,
// not another's; an admin cancels any; the job shows its submitter.
func TestCancelOwnJobsOnly(t *testing.T) {
	a, fb, logs := logged()
	if code, out := doAs(a, submitSecret, "POST", PathJobs, good); code != http.StatusCreated {
		t.Fatalf("alice submits: %d %s", code, out)
	}
	if code, out := doAs(a, otherSecret, "POST", PathJobs, strings.Replace(good, "j1", "bobs", 1)); code != http.StatusCreated {
		t.Fatalf("bob submits: %d %s", code, out)
	}
	if code, out := doAs(a, readSecret, "POST", PathJobs, strings.Replace(good, "j1", "readers", 1)); code != http.StatusForbidden || !strings.Contains(out, "has role read") {
		t.Errorf("a read token submits: %d %s", code, out)
	}
	_, out := doAs(a, readSecret, "GET", PathJobs+"/j1", "")
	var j Job
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Submitter != "alice" || j.SubmitterAccessor != "acc-submit" {
		t.Errorf("job j1 shows submitter %q %q: %s", j.Submitter, j.SubmitterAccessor, out)
	}
	applied := fb.applied
	if code, out := doAs(a, otherSecret, "POST", PathJobs+"/j1/cancel", ""); code != http.StatusForbidden || !strings.Contains(out, "alice") {
		t.Errorf("bob cancels alice's job: %d %s", code, out)
	}
	if code, _ := doAs(a, readSecret, "POST", PathJobs+"/j1/cancel", ""); code != http.StatusForbidden {
		t.Errorf("a read token cancels: %d", code)
	}
	if fb.applied != applied || fb.st.Jobs["j1"].State != state.Pending {
		t.Errorf("refused cancels wrote %d times; j1 is %v", fb.applied-applied, fb.st.Jobs["j1"].State)
	}
	if code, out := doAs(a, submitSecret, "POST", PathJobs+"/j1/cancel", ""); code != http.StatusOK {
		t.Errorf("alice cancels her job: %d %s", code, out)
	}
	if code, out := doAs(a, adminSecret, "POST", PathJobs+"/bobs/cancel", ""); code != http.StatusOK {
		t.Errorf("the admin cancels bob's job: %d %s", code, out)
	}
	if j := fb.st.Jobs["j1"]; j.State != state.Cancelled || j.Reason != "cancelled by token alice" {
		t.Errorf("j1 %v %q", j.State, j.Reason)
	}
	if n := len(logs.Lines("api: refused request")); n != 3 {
		t.Errorf("%d refusals logged, want 3", n)
	}
}

func TestTokenEndpoints(t *testing.T) {
	a, fb := newTest()
	code, out := do(a, "POST", PathACLTokens, `{"name":"ci","role":"submit"}`)
	var created Token
	if err := json.Unmarshal([]byte(out), &created); err != nil || code != http.StatusCreated || !strings.HasPrefix(created.Secret, SecretPrefix) ||
		created.Role != "submit" || created.Name != "ci" || len(created.Accessor) != 32 {
		t.Fatalf("create: %d %s", code, out)
	}
	if len(created.Secret) != len(SecretPrefix)+43 {
		t.Errorf("secret of %d characters", len(created.Secret))
	}
	if code, _ := doAs(a, created.Secret, "POST", PathJobs, good); code != http.StatusCreated {
		t.Errorf("the new token submits: %d", code)
	}
	code, out = do(a, "GET", PathACLTokens, "")
	var list []Token
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 200 || len(list) != 5 || !list[0].Bootstrap || list[4].Accessor != created.Accessor {
		t.Fatalf("list: %d %s", code, out)
	}
	if strings.Contains(out, created.Secret) || strings.Contains(out, "secret") {
		t.Errorf("the listing shows secrets: %s", out)
	}
	code, out = doAs(a, created.Secret, "GET", PathACLSelf, "")
	var self Token
	if err := json.Unmarshal([]byte(out), &self); err != nil || code != 200 || self.Accessor != created.Accessor || self.Secret != "" {
		t.Errorf("self: %d %s", code, out)
	}

	bad := []struct{ body, mention string }{
		{`{"name":"x","role":"root"}`, "unknown role"},
		{`{"name":"x"}`, "unknown role"},
		{`{"name":"","role":"read"}`, "token name"},
		{`{"name":"two words","role":"read"}`, "space"},
		{`{"name":"x","role":"read","secret":"mine"}`, "unknown field"},
		{`garbage`, "token body"},
		{`{"name":"` + strings.Repeat("n", 100) + `","role":"read"}`, "limit"},
	}
	for _, b := range bad {
		before := state.EncodeState(fb.st)
		if code, out := do(a, "POST", PathACLTokens, b.body); code != http.StatusBadRequest || !strings.Contains(out, b.mention) {
			t.Errorf("create %s: %d %s, want 400 mentioning %q", b.body, code, out, b.mention)
		}
		if !bytes.Equal(before, state.EncodeState(fb.st)) {
			t.Errorf("create %s changed the state", b.body)
		}
	}

	if code, out := do(a, "POST", PathACLTokens+"/"+created.Accessor+"/revoke", ""); code != http.StatusOK || !strings.Contains(out, `"revoked":true`) {
		t.Errorf("revoke: %d %s", code, out)
	}
	if code, out := doAs(a, created.Secret, "GET", PathJobs, ""); code != http.StatusUnauthorized || !strings.Contains(out, "revoked") {
		t.Errorf("the revoked token reads: %d %s", code, out)
	}
	if code, _ := do(a, "POST", PathACLTokens+"/"+created.Accessor+"/revoke", ""); code != http.StatusConflict {
		t.Errorf("revoke twice: %d", code)
	}
	if code, _ := do(a, "POST", PathACLTokens+"/nope/revoke", ""); code != http.StatusNotFound {
		t.Errorf("revoke unknown: %d", code)
	}
	if code, out := do(a, "POST", PathACLTokens+"/acc-admin/revoke", ""); code != http.StatusBadRequest || !strings.Contains(out, "last admin") {
		t.Errorf("revoke the last admin: %d %s", code, out)
	}
}

// clientTLS is a TLS connection state showing a certificate of role.
func clientTLS(t *testing.T, role pki.Role) *tls.ConnectionState {
	t.Helper()
	ca, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue(pki.CertRequest{Identity: pki.Identity{Role: role, Name: "someone"}})
	if err != nil {
		t.Fatal(err)
	}
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{is.Cert}}
}

func TestBootstrap(t *testing.T) {
	fb := &fakeBackend{st: &state.State{Jobs: map[string]*state.Job{}, Nodes: map[string]*state.Node{}}}
	var logs logbuf.Buffer
	a := New("s1", Config{Backend: fb, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	post := func(cs *tls.ConnectionState, body string) (int, string) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", PathACLBootstrap, strings.NewReader(body))
		r.TLS = cs
		a.ServeHTTP(rec, r)
		return rec.Code, rec.Body.String()
	}
	if code, out := doAs(a, "plx_anything-0123456789abcdefghijklmnop", "GET", PathStatus, ""); code != http.StatusUnauthorized || !strings.Contains(out, "pollux acl bootstrap") {
		t.Errorf("before the bootstrap: %d %s", code, out)
	}
	for name, cs := range map[string]*tls.ConnectionState{"no TLS": nil, "no certificate": {}, "agent certificate": clientTLS(t, pki.RoleAgent)} {
		if code, out := post(cs, ""); code != http.StatusForbidden || !strings.Contains(out, "client certificate") {
			t.Errorf("bootstrap with %s: %d %s", name, code, out)
		}
	}
	client := clientTLS(t, pki.RoleClient)
	if code, out := post(client, `{"secret":"short"}`); code != http.StatusBadRequest || !strings.Contains(out, "characters") {
		t.Errorf("short secret: %d %s", code, out)
	}
	if code, out := post(client, `{"token":"x"}`); code != http.StatusBadRequest {
		t.Errorf("unknown field: %d %s", code, out)
	}
	if fb.applied != 0 || fb.st.ACL.Bootstrapped() {
		t.Fatal("refused bootstraps wrote")
	}
	code, out := post(client, "")
	var tok Token
	if err := json.Unmarshal([]byte(out), &tok); err != nil || code != http.StatusCreated || tok.Role != "admin" || !tok.Bootstrap || !strings.HasPrefix(tok.Secret, SecretPrefix) {
		t.Fatalf("bootstrap: %d %s", code, out)
	}
	if code, _ := doAs(a, tok.Secret, "GET", PathStatus, ""); code != http.StatusOK {
		t.Errorf("the bootstrap token reads: %d", code)
	}
	if code, out := post(client, ""); code != http.StatusConflict || !strings.Contains(out, "already") {
		t.Errorf("second bootstrap: %d %s", code, out)
	}
	if code, _ := post(clientTLS(t, pki.RoleServer), `{"secret":"`+strings.Repeat("z", 40)+`"}`); code != http.StatusConflict {
		t.Errorf("second bootstrap with a secret of its own: %d", code)
	}
	if lines := logs.Lines("api: tokens bootstrapped"); len(lines) != 1 {
		t.Errorf("bootstrap log lines %q", lines)
	}

	// A bootstrap with the administrator's secret is safe to retry.
	fb2 := &fakeBackend{st: &state.State{Jobs: map[string]*state.Job{}, Nodes: map[string]*state.Node{}}}
	a = New("s1", Config{Backend: fb2, Logger: slog.New(slog.DiscardHandler)})
	mine := `{"secret":"` + strings.Repeat("m", 40) + `"}`
	for i, want := range []int{http.StatusCreated, http.StatusOK} {
		code, out := post(client, mine)
		if code != want || strings.Contains(out, "mmmm") {
			t.Errorf("bootstrap with a secret, attempt %d: %d %s (want %d, no secret echoed)", i, code, out, want)
		}
	}
	if code, _ := doAs(a, strings.Repeat("m", 40), "GET", PathACLTokens, ""); code != http.StatusOK {
		t.Errorf("the administrator's secret: %d", code)
	}
}

// TestInsecureTakesNoToken: --insecure turns the check off (every
// request is an anonymous admin) and says so in the log.
func TestInsecureTakesNoToken(t *testing.T) {
	_, fb := newTest()
	var logs logbuf.Buffer
	a := New("s1", Config{Backend: fb, Apps: []string{"cifar10"}, Insecure: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if len(logs.Lines("INSECURE MODE: API tokens are NOT checked")) != 1 {
		t.Errorf("no warning: %q", logs.Lines(""))
	}
	if code, out := doAs(a, "", "POST", PathJobs, good); code != http.StatusCreated {
		t.Errorf("insecure submit: %d %s", code, out)
	}
	if j := fb.st.Jobs["j1"]; j.Submitter != "" {
		t.Errorf("anonymous submitter %q", j.Submitter)
	}
	if code, out := doAs(a, "", "GET", PathACLSelf, ""); code != http.StatusOK || !strings.Contains(out, "anonymous") {
		t.Errorf("insecure self: %d %s", code, out)
	}
}

// TestFollowerRedirectsUnknownTokens: a follower that does not know a
// token (it may not have applied its creation yet) sends the client to
// the leader's API, whose table is the authority; a token it knows is
// checked locally; without a known leader an unknown token is a 503
// (retry), not a 401: the follower cannot tell.
func TestFollowerRedirectsUnknownTokens(t *testing.T) {
	_, fb := newTest()
	fb.follower = true
	members := []cluster.Member{{Name: "s1", Meta: cluster.Meta{Role: cluster.RoleServer, HTTPAddr: "10.0.0.1:8080"}}}
	a := New("s2", Config{Backend: fb, Members: func() []cluster.Member { return members }, Logger: slog.New(slog.DiscardHandler)})
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", PathJobs+"?x=1", nil)
	r.Header.Set("Authorization", "Bearer plx_made-on-the-leader-a-moment-ago-0123456")
	a.ServeHTTP(rec, r)
	if rec.Code != http.StatusTemporaryRedirect || rec.Header().Get("Location") != "http://10.0.0.1:8080"+PathJobs+"?x=1" {
		t.Errorf("unknown token on a follower: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	if code, _ := doAs(a, readSecret, "GET", PathJobs, ""); code != http.StatusOK {
		t.Errorf("known token on a follower: %d", code)
	}
	members = nil
	rec = httptest.NewRecorder()
	a.ServeHTTP(rec, r)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("unknown token, leader unknown: %d %q", rec.Code, rec.Body.String())
	}
}

// TestLeaderCatchesUpBeforeRefusingTokens: a leader elected a moment ago
// may not have applied its predecessors' entries; a token it does not
// know is looked up again after a linearizable read has caught it up
// (found: served), and is a 401 only then; a leader that cannot read
// (leadership lost meanwhile) answers 503 (retry).
func TestLeaderCatchesUpBeforeRefusingTokens(t *testing.T) {
	const late = "plx_created-by-the-previous-leader-0123456789"
	_, fb := newTest()
	a := New("s1", Config{Backend: fb, Logger: slog.New(slog.DiscardHandler)})
	reads := 0
	fb.onRead = func() {
		reads++
		if fb.st.ACL.Bootstrapped() && reads == 1 {
			c := &state.CreateToken{Token: state.Token{Accessor: "acc-late", Name: "late", Role: state.RoleRead, Hash: state.HashSecret(late), CreateTime: 9}}
			if _, err := state.ApplyTo(fb.st, c, 3); err != nil {
				t.Fatal(err)
			}
		}
	}
	if code, out := doAs(a, late, "GET", PathACLSelf, ""); code != http.StatusOK || reads != 1 {
		t.Errorf("a token applied by the catch-up read: %d %s (%d reads)", code, out, reads)
	}
	if code, _ := doAs(a, readSecret, "GET", PathACLSelf, ""); code != http.StatusOK || reads != 1 {
		t.Errorf("a known token: %d, %d reads (want no read)", code, reads)
	}
	if code, out := doAs(a, "plx_never-made-anywhere-0123456789abcdef", "GET", PathACLSelf, ""); code != http.StatusUnauthorized || reads != 2 {
		t.Errorf("a token unknown after the read: %d %s (%d reads)", code, out, reads)
	}
	fb.readErr = consensus.ErrNotLeader
	if code, out := doAs(a, "plx_never-made-anywhere-0123456789abcdef", "GET", PathJobs, ""); code != http.StatusServiceUnavailable || !strings.Contains(out, "retry") {
		t.Errorf("a leader that cannot read: %d %s", code, out)
	}
}
