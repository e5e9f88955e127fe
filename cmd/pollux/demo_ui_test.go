package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pollux/cluster/pki"
	"pollux/testbed/demo"
	"pollux/testbed/launch"
)

// TestDemoUIKeepsTheDashboardUp runs the emulated demo with --ui (its
// workload on 3 servers and 2 agents) as `pollux demo --ui` does, with
// a cancellation for Ctrl-C: it prints "dashboard: URL" with a read
// token, `chromium --headless --dump-dom URL` (trusting the servers'
// keys it prints) shows the cluster, the cluster stays up after the
// workload, and the cancellation stops every process it started.
func TestDemoUIKeepsTheDashboardUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo's cluster and workload")
	}
	needChromium(t)
	dir := t.TempDir()
	pr, pw := io.Pipe()
	var mu sync.Mutex
	var lines []string
	read := make(chan struct{}, 1)
	scanned := make(chan struct{}) // closed once the demo's output has ended and been read
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			select {
			case read <- struct{}{}:
			default:
			}
		}
	}()
	// ended is closed when the demo has returned (demoErr).
	ended := make(chan struct{})
	var demoErr error
	var stderr bytes.Buffer
	// waitLine returns the first line with prefix, waiting up to within,
	// and fails at once if the demo ends without printing it.
	waitLine := func(prefix string, within time.Duration) (string, []string) {
		t.Helper()
		deadline := time.After(within)
		for {
			mu.Lock()
			for i, l := range lines {
				if strings.HasPrefix(l, prefix) {
					rest := append([]string(nil), lines[i:]...)
					mu.Unlock()
					return l, rest
				}
			}
			all := strings.Join(lines, "\n")
			mu.Unlock()
			select {
			case <-read:
			case <-time.After(200 * time.Millisecond):
			case <-scanned:
				mu.Lock()
				found := slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
				all = strings.Join(lines, "\n")
				mu.Unlock()
				if found {
					continue
				}
				<-ended
				t.Fatalf("the demo ended (%v) with no line %q; it printed:\n%s\nstderr:\n%s", demoErr, prefix, all, stderr.String())
			case <-deadline:
				t.Fatalf("no line %q within %v; the demo printed:\n%s", prefix, within, all)
			}
		}
	}
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	done := make(chan error, 1)
	go func() {
		defer close(ended)
		demoErr = demo.Emulated(ctx, demo.Options{Cluster: launch.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}, Dir: dir,
			Servers: 3, Agents: 2, GPUsPerAgent: 4, TimeScale: 1000}, Spread: 3 * time.Second, Timeout: 3 * time.Minute, UI: true}, pw, &stderr)
		pw.Close()
		done <- demoErr
	}()

	// Longer than the demo's own bounds on starting the cluster (60 s to
	// bootstrap the tokens, 60 s for the agents' GPUs): on a loaded
	// machine the demo fails on its own with a reason before this does.
	line, rest := waitLine("dashboard: ", 150*time.Second)
	dash := strings.TrimPrefix(line, "dashboard: ")
	u, err := url.Parse(dash)
	frag, _ := url.ParseQuery(u.Fragment)
	if err != nil || u.Scheme != "https" || u.Path != "/ui/login" || u.RawQuery != "" || !strings.HasPrefix(frag.Get("token"), "plx_") {
		t.Fatalf("dashboard URL %q (%v)", dash, err)
	}
	// The hint is the line after the URL (the reader may not have split
	// it off yet when the URL's line is seen).
	hint, _ := waitLine("(the servers' certificates", 10*time.Second)
	if len(rest) > 1 && rest[1] != hint || !strings.Contains(hint, "--ignore-certificate-errors-spki-list=") {
		t.Fatalf("no browser hint right after the URL: %q, then %q", rest, hint)
	}
	pins := strings.Fields(strings.SplitN(hint, "--ignore-certificate-errors-spki-list=", 2)[1])[0]
	dctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The page shows the cluster as a browser sees it. A dump taken while
	// the servers elect a leader (the machine is loaded) shows the stale
	// banner: up to three dumps, each in a fresh profile, until one shows
	// a healthy cluster.
	var dom []byte
	wants := []string{`data-node="a0"`, `data-node="a1"`, `id="grid"`, `data-health="ok"`}
	for try := range 3 {
		cmd := exec.CommandContext(dctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+filepath.Join(t.TempDir(), "profile"),
			"--ignore-certificate-errors-spki-list="+pins, "--dump-dom", dash)
		// Its own TMPDIR, which Chromium leaves its org.chromium.Chromium.*
		// directory in.
		cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
		if dom, err = cmd.Output(); err != nil {
			t.Fatalf("chromium --dump-dom: %v", err)
		}
		missing := slices.DeleteFunc(slices.Clone(wants), func(w string) bool { return bytes.Contains(dom, []byte(w)) })
		if len(missing) == 0 {
			break
		}
		if try == 2 || !slices.Equal(missing, []string{`data-health="ok"`}) {
			t.Errorf("the dumped page lacks %q:\n%.3000s", missing, dom)
			break
		}
		t.Logf("dump %d shows no healthy cluster yet (%.200s); again", try+1, bannerOf(dom))
		time.Sleep(2 * time.Second)
	}
	if bytes.Contains(dom, []byte(frag.Get("token"))) {
		t.Error("the dumped page holds the token")
	}

	// After the workload the cluster stays up: its dashboard answers.
	waitLine("the workload is done", 3*time.Minute)
	client := caClient(t, filepath.Join(dir, "tls", pki.CAFile))
	resp, err := client.Get("https://" + u.Host + "/ui/")
	if err != nil {
		t.Fatalf("the dashboard after the workload: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the dashboard without a token after the workload: %s, want 401", resp.Status)
	}
	// The line the demo prints points the CLI at the cluster: evaluated
	// in a shell, `pollux status` works without any flag.
	exports, _ := waitLine("export POLLUX_SERVERS=", time.Second)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POLLUX_") {
			env = append(env, kv)
		}
	}
	sh := exec.Command("sh", append([]string{"-c", exports + ` && exec "$@" status`, "sh"}, selfExec...)...)
	sh.Env = append(env, "POLLUX_TEST_PROCESS=1")
	if out, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(out), "leader") {
		t.Errorf("pollux status after %s: %v\n%s", exports, err, out)
	}
	select {
	case err := <-done:
		t.Fatalf("the demo ended before it was interrupted: %v", err)
	case <-time.After(2 * time.Second):
	}

	// Ctrl-C stops every process.
	interrupt()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the demo after the interruption: %v (%s)", err, stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the demo did not stop within 90 s of the interruption")
	}
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		c.Close()
		t.Errorf("the dashboard's server still listens at %s", u.Host)
	}
	if left := processesUnder(t, dir); len(left) > 0 {
		t.Errorf("processes of the demo still running: %v", left)
	}
}

// caClient is an HTTPS client trusting the CA in file.
func caClient(t *testing.T, file string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", file)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// bannerOf is the dumped page's banner element, for the log.
func bannerOf(dom []byte) []byte {
	if i := bytes.Index(dom, []byte(`id="banner"`)); i >= 0 {
		return dom[i:]
	}
	return nil
}
