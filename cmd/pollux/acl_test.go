package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
	"pollux/cluster/pki"
	"pollux/testbed/launch"
)

// bootstrapTokens makes the first admin token of a server started by a
// test (not by the launcher) with `pollux acl bootstrap`, retrying until
// a leader takes it, and returns its secret.
func bootstrapTokens(t *testing.T, httpAddr string) string {
	t.Helper()
	b := testBundle()
	cert, key, err := b.Files(pki.DevClient)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := api.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out := runOut("acl", "bootstrap", "--server", httpAddr, "--ca", b.CA, "--cert", cert, "--key", key,
			"--secret-file", file, "--timeout", "5s")
		if code == 0 {
			return secret
		}
		if time.Now().After(deadline) {
			t.Fatalf("acl bootstrap: exit %d: %s", code, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTokensOnACluster runs 3 servers as processes and checks, through
// the CLI and raw HTTP as a user would: a read token cannot submit; a
// submit token cancels its own jobs and not another's, an admin any; a
// revoked token is refused through a follower at once (the state
// machine checks writes in log order) and by every server once it has
// applied the revocation, also after the leader is killed; the
// bootstrap cannot be made twice; malformed, huge and unknown tokens
// get a clear 401, one log line naming the peer, and change nothing.
func TestTokensOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a multi-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, launch.Options{Dir: dir,
		Servers: 3, NoAgents: true, Interval: 500 * time.Millisecond, LogLevel: "warn"})
	defer c.finish()
	if fi, err := os.Stat(c.TokenFile()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin token file: %v %v", fi, err)
	}
	leader, _, err := c.Leader(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var followers []*launch.Member
	for _, m := range c.Servers {
		if m != leader {
			followers = append(followers, m)
		}
	}
	// cli runs a client command against the given servers with a token.
	cli := func(secret string, servers []*launch.Member, args ...string) (int, string) {
		t.Helper()
		args = append(args, clientFlags(c.Cluster, secret, servers)...)
		code, out := runOut(args...)
		t.Logf("pollux %v: exit %d: %s", args[:len(args)-6], code, strings.TrimSpace(out))
		return code, out
	}
	admin := c.AdminToken()
	all := c.Servers
	create := func(name, role string) string {
		t.Helper()
		code, out := cli(admin, followers, "acl", "token", "create", "--name", name, "--role", role, "--json")
		var tok api.Token
		if code != 0 || json.Unmarshal([]byte(out), &tok) != nil || tok.Secret == "" || tok.Role != role {
			t.Fatalf("create %s: %d %s", name, code, out)
		}
		return tok.Secret
	}
	jobs := func() []api.Job {
		t.Helper()
		code, out := cli(admin, []*launch.Member{leader}, "jobs", "--json")
		var js []api.Job
		if code != 0 || json.Unmarshal([]byte(out), &js) != nil {
			t.Fatalf("jobs: %d %s", code, out)
		}
		return js
	}
	spec := func(name string) string {
		f := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(f, []byte("name: "+name+"\napplication: cifar10\ninit_batch_size: 128\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}

	// No token, and an unknown one: refused with what to do.
	if code, out := cli("", all, "jobs"); code != 2 || !strings.Contains(out, "401") || !strings.Contains(out, client.EnvToken) {
		t.Errorf("jobs without a token: %d %s", code, out)
	}
	alice, bob, reader := create("alice", "submit"), create("bob", "submit"), create("grafana", "read")
	if code, out := cli(admin, all, "acl", "token", "create", "--name", "x", "--role", "root"); code != 2 || !strings.Contains(out, "read, submit or admin") {
		t.Errorf("unknown role: %d %s", code, out)
	}

	// A read token reads but cannot submit.
	if code, out := cli(reader, followers, "submit", spec("by-reader")); code != 2 || !strings.Contains(out, "403") || !strings.Contains(out, "role read") {
		t.Errorf("read token submits: %d %s", code, out)
	}
	if len(jobs()) != 0 {
		t.Fatal("a refused submission made a job")
	}
	if code, _ := cli(reader, followers, "operator", "raft", "list-peers"); code != 2 {
		t.Errorf("read token lists the Raft peers: %d", code)
	}
	if code, _ := cli(admin, followers, "operator", "raft", "list-peers"); code != 0 {
		t.Errorf("admin lists the Raft peers: %d", code)
	}

	// Submitters and cancels (no agents: the jobs stay pending).
	if code, out := cli(alice, followers, "submit", spec("alices")); code != 0 {
		t.Fatalf("alice submits: %d %s", code, out)
	}
	if code, out := cli(bob, all, "submit", spec("bobs")); code != 0 {
		t.Fatalf("bob submits: %d %s", code, out)
	}
	code, out := cli(reader, []*launch.Member{leader}, "job", "alices", "--json")
	var j api.Job
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j.Submitter != "alice" || j.SubmitterAccessor == "" {
		t.Errorf("alice's job as a reader sees it: %d %s", code, out)
	}
	if code, out := cli(bob, followers, "cancel", "alices"); code != 2 || !strings.Contains(out, "403") || !strings.Contains(out, "alice") {
		t.Errorf("bob cancels alice's job: %d %s", code, out)
	}
	if code, _ := cli(reader, all, "cancel", "alices"); code != 2 {
		t.Errorf("reader cancels: %d", code)
	}
	for _, j := range jobs() {
		if j.State != "pending" {
			t.Errorf("after refused cancels job %s is %s", j.ID, j.State)
		}
	}
	if code, out := cli(alice, followers, "cancel", "alices"); code != 0 {
		t.Errorf("alice cancels her job: %d %s", code, out)
	}
	if code, out := cli(admin, followers, "cancel", "bobs"); code != 0 {
		t.Errorf("the admin cancels bob's job: %d %s", code, out)
	}

	// Revocation: through a follower, a write with the revoked token is
	// refused at once, whatever the follower has applied yet.
	temp := create("temp", "submit")
	if code, out := cli(temp, followers[:1], "submit", spec("temp1")); code != 0 {
		t.Fatalf("temp submits: %d %s", code, out)
	}
	code, out = cli(admin, []*launch.Member{leader}, "acl", "token", "self", "--json")
	var self api.Token
	if code != 0 || json.Unmarshal([]byte(out), &self) != nil || !self.Bootstrap || self.Role != "admin" {
		t.Errorf("admin self: %d %s", code, out)
	}
	code, out = cli(admin, []*launch.Member{leader}, "acl", "token", "list", "--json")
	var toks []api.Token
	if code != 0 || json.Unmarshal([]byte(out), &toks) != nil || len(toks) != 5 || strings.Contains(out, "plx_") {
		t.Fatalf("token list: %d %s", code, out)
	}
	tempAcc := toks[4].Accessor
	if code, out := cli(admin, []*launch.Member{leader}, "acl", "token", "revoke", tempAcc); code != 0 {
		t.Fatalf("revoke: %d %s", code, out)
	}
	for _, f := range followers {
		if code, out := cli(temp, []*launch.Member{f}, "submit", spec("temp-"+f.ID)); code != 2 || !strings.Contains(out, "revoked") {
			t.Errorf("revoked token submits through %s: %d %s", f.ID, code, out)
		}
	}
	// Every server refuses it once it has applied the revocation (seen
	// in its own token listing).
	revokedOn := func(m *launch.Member) bool {
		_, out := cli(admin, []*launch.Member{m}, "acl", "token", "list", "--json")
		var ts []api.Token
		_ = json.Unmarshal([]byte(out), &ts)
		for _, tk := range ts {
			if tk.Accessor == tempAcc {
				return tk.Revoked
			}
		}
		return false
	}
	for _, m := range all {
		deadline := time.Now().Add(10 * time.Second)
		for !revokedOn(m) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never applied the revocation", m.ID)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if code, out := cli(temp, []*launch.Member{m}, "jobs"); code != 2 || !strings.Contains(out, "401") {
			t.Errorf("revoked token reads from %s: %d %s", m.ID, code, out)
		}
	}
	if code, _ := cli(admin, all, "acl", "token", "revoke", tempAcc); code != 2 {
		t.Errorf("revoking twice: %d", code)
	}

	// Malformed, huge and unknown tokens: 401, one log line naming the
	// peer, nothing changed, nobody crashed.
	before := jobs()
	raw := c.TLS()
	hc, err := raw.HTTPClient(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	target := followers[0]
	t.Logf("bad tokens go to %s, a follower", target.ID)
	for name, header := range map[string]string{
		"malformed":      "Token " + alice,
		"empty bearer":   "Bearer ",
		"huge":           "Bearer plx_" + strings.Repeat("x", 60<<10),
		"unknown":        "Bearer plx_unknownunknownunknownunknownunknown1",
		"non-ASCII":      "Bearer plx_\xc3\xbcnic\xc3\xb6de-0123456789abcdefghijkl",
		"revoked, again": "Bearer " + temp,
	} {
		logBefore := refusals(t, all...)
		req, _ := http.NewRequest(http.MethodPost, "https://"+target.HTTP+api.PathJobs, strings.NewReader("name: evil\napplication: cifar10\ninit_batch_size: 128\n"))
		req.Header.Set("Authorization", header)
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && !(name == "huge" && resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge) {
			t.Errorf("%s: %d %s, want 401", name, resp.StatusCode, body)
			continue
		}
		if resp.StatusCode == http.StatusUnauthorized {
			deadline := time.Now().Add(5 * time.Second)
			for refusals(t, all...) == logBefore && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			// (A follower sends an unknown token to the leader, which
			// refuses it.)
			if n := refusals(t, all...) - logBefore; n != 1 {
				t.Errorf("%s: %d refusal log lines, want 1", name, n)
			}
			for _, m := range all {
				b, _ := os.ReadFile(m.Log)
				for _, l := range strings.Split(string(b), "\n") {
					if strings.Contains(l, "api: refused request") && (!strings.Contains(l, "peer=127.0.0.1:") || len(l) > 4096) {
						t.Errorf("%s: a refusal's log line does not name the peer (or is huge): %.300s", name, l)
					}
				}
			}
		}
		t.Logf("%s: %d %s", name, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if after := jobs(); len(after) != len(before) {
		t.Errorf("jobs before the bad tokens %d, after %d", len(before), len(after))
	}

	// Failover: the new leader authorises the same way, and the
	// bootstrap is not made twice.
	if err := c.Kill(leader, "", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Leader(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if code, out := cli(temp, followers, "jobs"); code != 2 || !strings.Contains(out, "revoked") {
		t.Errorf("revoked token after failover: %d %s", code, out)
	}
	if code, out := cli(alice, followers, "submit", spec("after-failover")); code != 0 {
		t.Errorf("alice after failover: %d %s", code, out)
	}
	cert, key, _ := c.TLS().Files(pki.DevClient)
	code, out = runOut("acl", "bootstrap", "--server", followers[0].HTTP, "--ca", c.TLS().CA, "--cert", cert, "--key", key)
	if code != 2 || !strings.Contains(out, "already") {
		t.Errorf("second bootstrap after failover: %d %s", code, out)
	}
	if code, out := runOut("acl", "bootstrap", "--server", followers[0].HTTP, "--ca", c.TLS().CA); code != 2 || !strings.Contains(out, "client certificate") {
		t.Errorf("bootstrap without a client certificate: %d %s", code, out)
	}
	for _, m := range followers {
		if !m.Serving() {
			t.Errorf("%s is not serving after the bad requests", m.ID)
		}
	}
}

// refusals counts the token refusals in the logs of ms.
func refusals(t *testing.T, ms ...*launch.Member) int {
	t.Helper()
	n := 0
	for _, m := range ms {
		b, err := os.ReadFile(m.Log)
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), "api: refused request")
	}
	return n
}
