package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"pollux/actors/server/api/client"
)

func TestClientCommandsBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "name: j\napplication: cifar10\ninit_batch_size: 128\n")
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"unknown field", []string{"submit", write("bad.yaml", "name: j\napplication: cifar10\ninit_batch_size: 128\ngpus: 2\n")}, 2},
		{"negative replicas", []string{"submit", write("neg.yaml", "name: j\napplication: cifar10\ninit_batch_size: 128\nmin_replicas: -1\n")}, 2},
		{"missing file", []string{"submit", filepath.Join(dir, "nope.yaml")}, 2},
		{"no server", []string{"submit", good, "--server", "127.0.0.1:1", "--timeout", "2s"}, 1},
		{"jobs, no server", []string{"jobs", "--server", "127.0.0.1:1", "--timeout", "2s"}, 1},
		{"quota: a token's state budget", []string{"acl", "quota", "set", "acc", "--state-budget", "9"}, 2},
		{"quota without whose", []string{"acl", "quota", "set"}, 2},
		{"bad resume_from", []string{"submit", write("resume.yaml", "name: j\napplication: cifar10\ninit_batch_size: 128\nresume_from: J/../x\n")}, 2},
		{"worker without environment", []string{"worker", "--emulate", "cifar10"}, 2},
		{"agent with bad gpus", []string{"agent", "--gpus", "-3"}, 2},
		{"server without TLS files", []string{"server", "--id", "s", "--data-dir", dir, "--peers", "s=127.0.0.1:1=127.0.0.1:2"}, 2},
		{"agent without TLS files", []string{"agent", "--name", "a", "--gpus", "1"}, 2},
		{"insecure with a CA", []string{"agent", "--name", "a", "--gpus", "1", "--insecure", "--ca", good}, 2},
		{"certificate of another role", append([]string{"agent", "--name", "ts0", "--gpus", "1"}, testBundle().Flags("ts0")...), 2},
		{"certificate of another name", append([]string{"agent", "--name", "a9", "--gpus", "1"}, testBundle().Flags("a1")...), 2},
		{"unreadable gossip key", []string{"agent", "--name", "a", "--gpus", "1", "--insecure", "--gossip-key", good}, 2},
		{"client with a bad CA file", []string{"jobs", "--ca", good}, 2},
		{"bootstrap without peers", []string{"server", "--id", "s", "--data-dir", dir, "--bootstrap"}, 2},
		{"relative checkpoint root", []string{"server", "--id", "s", "--data-dir", dir, "--checkpoint-root", "ckpt"}, 2},
		{"cancel, no server", []string{"cancel", "j", "--server", "127.0.0.1:1", "--timeout", "2s"}, 1},
		{"cancel without a job", []string{"cancel"}, 2},
		{"operator, unknown verb", []string{"operator", "raft", "promote"}, 2},
		{"add-server without an address", []string{"operator", "raft", "add-server", "s9"}, 2},
		{"cancel with a bad CA file", []string{"cancel", "j", "--ca", good}, 2},
		{"job with a bad CA file", []string{"job", "j", "--ca", good}, 2},
		{"operator with a bad CA file", []string{"operator", "raft", "list-peers", "--ca", good}, 2},
		{"token of an unknown role", []string{"acl", "token", "create", "--name", "x", "--role", "root"}, 2},
		{"token without a name", []string{"acl", "token", "create", "--role", "read"}, 2},
		{"revoke without an accessor", []string{"acl", "token", "revoke"}, 2},
		{"bootstrap with a missing secret file", []string{"acl", "bootstrap", "--secret-file", filepath.Join(dir, "nope")}, 2},
		{"client certificate without its key", []string{"jobs", "--cert", good}, 2},
		{"client certificate that is no certificate", []string{"jobs", "--cert", good, "--key", good}, 2},
		{"token list, no server", []string{"acl", "token", "list", "--server", "127.0.0.1:1", "--timeout", "2s"}, 1},
	}
	for _, tc := range tests {
		if got := run(tc.args); got != tc.code {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.code)
		}
	}
}

// TestClientEnvironment: the client commands ask the servers of
// $POLLUX_SERVERS unless --server names others, with the token of
// $POLLUX_TOKEN; without it they ask 127.0.0.1:8080. A refusal exits 2,
// a server error 1, and --json prints the server's answer unchanged.
func TestClientEnvironment(t *testing.T) {
	status := `{"leader":"s1","serving":"s2","stale":false,"term":4,"generation":9,"gpus":8,"gpus_used":2,"jobs":{"running":1}}` + "\n"
	var mu sync.Mutex
	var tokens []string
	answer := func(code int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			tokens = append(tokens, r.Header.Get("Authorization"))
			mu.Unlock()
			w.WriteHeader(code)
			fmt.Fprint(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	ok, refusing, failing := answer(http.StatusOK, status), answer(http.StatusForbidden, `{"error":"api: no"}`), answer(http.StatusInternalServerError, "")
	t.Setenv(client.EnvToken, "plx_from-the-environment")

	t.Setenv(client.EnvServers, "")
	if f := newStatusCmd().Flags().Lookup("server"); f.DefValue != "["+client.DefaultServer+"]" {
		t.Errorf("--server default without $%s: %s", client.EnvServers, f.DefValue)
	}
	t.Setenv(client.EnvServers, "http://127.0.0.1:1,"+ok)
	if code, out := runOut("status"); code != 0 || !strings.Contains(out, "leader s1, term 4, generation 9\nGPUs 2 used of 8\n") {
		t.Errorf("status from $%s: %d %s", client.EnvServers, code, out)
	}
	if code, out := runOut("status", "--json"); code != 0 || out != status {
		t.Errorf("status --json: %d %q, want the server's answer %q", code, out, status)
	}
	mu.Lock()
	if len(tokens) != 2 || tokens[0] != "Bearer plx_from-the-environment" || tokens[1] != tokens[0] {
		t.Errorf("tokens sent: %q", tokens)
	}
	mu.Unlock()
	for _, tc := range []struct {
		server string
		code   int
	}{{ok, 0}, {refusing, 2}, {failing, 1}} {
		if code, out := runOut("status", "--server", tc.server); code != tc.code {
			t.Errorf("status --server %s over $%s: exit %d (%s), want %d", tc.server, client.EnvServers, code, out, tc.code)
		}
	}
}
