package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
	"pollux/cluster/pki"
)

// answering is a test server that answers every request with status and
// body, and records the paths it was asked.
type answering struct {
	*httptest.Server
	mu    sync.Mutex
	asked []string
}

func answer(t *testing.T, status int, body string) *answering {
	a := &answering{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.asked = append(a.asked, r.Method+" "+r.URL.Path)
		a.mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *answering) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.asked)
}

// down is the URL of a server that is not there.
func down(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestServersInOrder: an unreachable server and a 5xx move on to the
// next server; a 4xx is final; when no server answers, the error names
// each one's failure.
func TestServersInOrder(t *testing.T) {
	ok := answer(t, http.StatusOK, `[{"id":"j1","state":"running"}]`)
	busy := answer(t, http.StatusServiceUnavailable, `{"error":"consensus: no leader"}`)
	refusing := answer(t, http.StatusForbidden, `{"error":"api: token acc (grafana) has role read"}`)
	garbled := answer(t, http.StatusOK, `<html>`)
	gone := down(t)
	tests := []struct {
		name    string
		servers []string
		check   func(jobs []api.Job, err error) bool
	}{
		{"down, 5xx, then an answer", []string{gone, busy.URL, ok.URL},
			func(jobs []api.Job, err error) bool { return err == nil && len(jobs) == 1 && jobs[0].ID == "j1" }},
		{"a refusal is final", []string{refusing.URL, ok.URL},
			func(_ []api.Job, err error) bool {
				var ae *client.APIError
				return errors.As(err, &ae) && ae.StatusCode == 403 && ae.Status == "403 Forbidden" &&
					ae.Message == "api: token acc (grafana) has role read" &&
					err.Error() == "client: refused (403 Forbidden): api: token acc (grafana) has role read"
			}},
		{"nobody answers", []string{gone, busy.URL},
			func(_ []api.Job, err error) bool {
				return errors.Is(err, client.ErrUnavailable) && strings.Contains(err.Error(), "connection refused") &&
					strings.Contains(err.Error(), strings.TrimPrefix(busy.URL, "http://")+": 503 Service Unavailable: consensus: no leader")
			}},
		{"an answer that is not JSON", []string{garbled.URL, ok.URL},
			func(_ []api.Job, err error) bool {
				var ae *client.APIError
				return err != nil && !errors.Is(err, client.ErrUnavailable) && !errors.As(err, &ae) &&
					strings.HasPrefix(err.Error(), "client: GET /v1/jobs: the answer of "+garbled.URL)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := ok.count()
			jobs, err := newClient(t, client.Config{Servers: tc.servers, Timeout: 10 * time.Second}).Jobs(context.Background())
			if !tc.check(jobs, err) {
				t.Errorf("jobs %+v, err %v", jobs, err)
			}
			if tc.name == "a refusal is final" && ok.count() != before {
				t.Error("asked the next server after a refusal")
			}
		})
	}
}

// TestBadConfig: files that cannot be loaded and addresses that are no
// URL are ErrConfig, before any request.
func TestBadConfig(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := pki.DevBundle(filepath.Join(dir, "tls"), []string{"s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := b.Files(pki.DevClient)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, mention string
		cfg           client.Config
	}{
		{"missing CA", "no such file", client.Config{CA: filepath.Join(dir, "nope.pem")}},
		{"CA that is no certificate", "CA", client.Config{CA: notPEM}},
		{"certificate without its key", "go together", client.Config{Cert: cert}},
		{"key without its certificate", "go together", client.Config{Key: key}},
		{"certificate that is no certificate", "client certificate", client.Config{Cert: notPEM, Key: key}},
		{"key of another certificate", "client certificate", client.Config{Cert: cert, Key: b.CA}},
		{"server that is no URL", `"http://[::1"`, client.Config{Servers: []string{"127.0.0.1:1", "http://[::1"}}},
		{"empty server", `""`, client.Config{Servers: []string{""}}},
	} {
		_, err := client.New(tc.cfg)
		if !errors.Is(err, client.ErrConfig) || !strings.Contains(err.Error(), tc.mention) || !strings.HasPrefix(err.Error(), "client: ") {
			t.Errorf("%s: %v, want ErrConfig mentioning %s", tc.name, err, tc.mention)
		}
	}
	if _, err := client.New(client.Config{CA: b.CA, Cert: cert, Key: key}); err != nil {
		t.Errorf("good files: %v", err)
	}
}

// TestTLS runs the real API over HTTPS with a server certificate of a
// cluster CA: the client needs that CA, says what to do without it, and
// shows its client certificate to bootstrap the tokens.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	b, err := pki.DevBundle(filepath.Join(dir, "cluster"), []string{"s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.DevBundle(filepath.Join(dir, "other"), []string{"s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(newAPI("s1", newBackend(true), ""))
	startTLS(t, srv, b)
	plain, _ := newServer()
	defer plain.Close()
	cert, key, err := b.Files(pki.DevClient)
	if err != nil {
		t.Fatal(err)
	}
	addr := hostPort(srv)
	ctx := context.Background()
	for _, tc := range []struct {
		name, mention string
		cfg           client.Config
	}{
		{"no CA", "(pass the cluster CA with --ca or $POLLUX_CA)", client.Config{Servers: []string{addr}}},
		{"another cluster's CA", "(is --ca " + other.CA + " the CA of this cluster?)", client.Config{Servers: []string{addr}, CA: other.CA}},
		{"HTTPS to a plain server", "(the server runs --insecure: give its address as http://HOST:PORT)",
			client.Config{Servers: []string{strings.TrimPrefix(plain.URL, "http://")}, CA: b.CA}},
	} {
		_, err := newClient(t, tc.cfg).Status(ctx)
		if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v, want it to say %s", tc.name, err, tc.mention)
		}
	}
	_, err = newClient(t, client.Config{Servers: []string{"http://" + addr}, CA: b.CA}).Status(ctx)
	if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to an HTTPS server: %v, want the server's 400", err)
	}

	_, err = newClient(t, client.Config{Servers: []string{addr}, CA: b.CA}).Bootstrap(ctx, api.Bootstrap{})
	if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Message, "client certificate") {
		t.Errorf("bootstrap without a client certificate: %v", err)
	}
	tok, err := newClient(t, client.Config{Servers: []string{addr}, CA: b.CA, Cert: cert, Key: key}).Bootstrap(ctx, api.Bootstrap{})
	if err != nil || !tok.Bootstrap || tok.Role != "admin" || !strings.HasPrefix(tok.Secret, api.SecretPrefix) {
		t.Fatalf("bootstrap: %+v, %v", tok, err)
	}
	self, err := newClient(t, client.Config{Servers: []string{addr}, CA: b.CA, Token: " " + tok.Secret + "\n"}).Self(ctx)
	if err != nil || self.Accessor != tok.Accessor || self.Secret != "" {
		t.Errorf("self with the bootstrap secret: %+v, %v", self, err)
	}
}

// TestRedirects: a follower redirects a membership change to the leader's
// API and the client sends the token there too; never to a plain HTTP
// server from an HTTPS one; and it gives up on a redirect loop.
func TestRedirects(t *testing.T) {
	leaderFB := newBackend(false)
	leader := httptest.NewServer(newAPI("s1", leaderFB, ""))
	defer leader.Close()
	followerFB := newBackend(false)
	followerFB.follower = true
	// The follower names the leader by another name of 127.0.0.1, to
	// which net/http would not send the token by itself.
	follower := httptest.NewServer(newAPI("s2", followerFB, strings.Replace(leader.URL, "http://127.0.0.1", "[::ffff:127.0.0.1]", 1)))
	defer follower.Close()

	c := newClient(t, client.Config{Servers: []string{follower.URL}, Token: adminSecret})
	ctx := context.Background()
	if err := c.AddPeer(ctx, api.AddPeer{ID: "s4", Address: "127.0.0.1:7004"}); err != nil {
		t.Fatal(err)
	}
	if err := c.RemovePeer(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	servers, _ := leaderFB.Servers()
	var ids []string
	for _, s := range servers {
		ids = append(ids, string(s.ID))
	}
	if !slices.Equal(ids, []string{"s1", "s3", "s4"}) {
		t.Errorf("the leader's servers after add s4, remove s2: %v", ids)
	}
	peers, err := c.Peers(ctx)
	if err != nil || len(peers) != 3 {
		t.Errorf("peers as the follower sees them: %+v, %v", peers, err)
	}

	// HTTPS to plain HTTP: the token stays behind.
	var mu sync.Mutex
	var got []string
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprint(w, `[]`)
	}))
	defer plain.Close()
	b, err := pki.DevBundle(t.TempDir(), []string{"s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	redirector := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	startTLS(t, redirector, b)
	if _, err := newClient(t, client.Config{Servers: []string{hostPort(redirector)}, CA: b.CA, Token: adminSecret}).Jobs(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, client.Config{Servers: []string{plain.URL}, Token: adminSecret}).Jobs(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !slices.Equal(got, []string{"", "Bearer " + adminSecret}) {
		t.Errorf("Authorization after HTTPS -> HTTP, then HTTP: %q", got)
	}
	mu.Unlock()

	var loop *httptest.Server
	loop = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, loop.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer loop.Close()
	if _, err := newClient(t, client.Config{Servers: []string{loop.URL}}).Jobs(ctx); !errors.Is(err, client.ErrUnavailable) ||
		!strings.Contains(err.Error(), "stopped after 5 redirects") {
		t.Errorf("a redirect loop: %v", err)
	}
}

// TestTimeout: Timeout bounds a call to a server that never answers.
func TestTimeout(t *testing.T) {
	stop := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hanging.Close()
	defer close(stop)
	_, err := newClient(t, client.Config{Servers: []string{hanging.URL}, Timeout: 100 * time.Millisecond}).Status(context.Background())
	if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a server that never answers: %v", err)
	}
}

// TestRaw: Raw keeps the answer's bytes; the client it came from does
// not.
func TestRaw(t *testing.T) {
	body := `[{"id":"j1","state":"running","gpus":2,"a_field_of_a_newer_server":1}]` + "\n"
	srv := answer(t, http.StatusOK, body)
	c := newClient(t, client.Config{Servers: []string{srv.URL}})
	var raw json.RawMessage
	jobs, err := c.Raw(&raw).Jobs(context.Background())
	if err != nil || len(jobs) != 1 || jobs[0].GPUs != 2 || string(raw) != body {
		t.Errorf("jobs %+v, raw %q, err %v", jobs, raw, err)
	}
	raw = nil
	if _, err := c.Jobs(context.Background()); err != nil || raw != nil {
		t.Errorf("the client Raw came from kept %q (%v)", raw, err)
	}
}

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		servers string
		want    []string
	}{
		{"", []string{client.DefaultServer}},
		{",, ", []string{client.DefaultServer}},
		{"10.0.0.1:8080", []string{"10.0.0.1:8080"}},
		{" 10.0.0.1:8080 , ,http://10.0.0.2:8080,", []string{"10.0.0.1:8080", "http://10.0.0.2:8080"}},
	} {
		t.Setenv(client.EnvServers, tc.servers)
		if got := client.FromEnv().Servers; !slices.Equal(got, tc.want) {
			t.Errorf("%s=%q: servers %q, want %q", client.EnvServers, tc.servers, got, tc.want)
		}
	}
	t.Setenv(client.EnvCA, "/etc/pollux/ca.pem")
	t.Setenv(client.EnvToken, " plx_secret\n")
	t.Setenv(client.EnvClientCert, "c.pem")
	t.Setenv(client.EnvClientKey, "k.pem")
	if got := client.FromEnv(); got.CA != "/etc/pollux/ca.pem" || got.Token != "plx_secret" || got.Cert != "c.pem" || got.Key != "k.pem" {
		t.Errorf("FromEnv: %+v", got)
	}
}
