package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/internal/logbuf"
	"pollux/internal/poll"
)

// sendLine opens a connection to addr, writes line and returns the
// connection.
func sendLine(t *testing.T, addr, line string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if line != "" {
		if _, err := io.WriteString(c, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// closedWithin checks that the peer closes c within d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, net.ErrClosed) || isTimeout(err) {
		t.Errorf("connection not closed by the node within %v: %v", d, err)
	}
}

// waitProved waits until n of l's connections have delivered an
// accepted report.
func waitProved(t *testing.T, l *reportListener, n int) {
	t.Helper()
	proved := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		k := 0
		for _, st := range l.conns {
			if st.proved {
				k++
			}
		}
		return k
	}
	if !poll.Wait(3*time.Second, func() bool { return proved() == n }) {
		t.Fatalf("%d connections proved, want %d", proved(), n)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func reportLine(job string, inc uint64, rank int, token string, done bool) string {
	b, err := workerproto.Encode(workerproto.Report{Job: job, Incarnation: inc, Rank: rank, StepTime: 1, LocalBatch: 7,
		Token: token, Done: done})
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// TestReportsNeedTheirRanksToken: a report reaches the run's owner only
// with the token of its job, incarnation and rank, and a done report
// only from rank 0; every refusal closes the connection and is one log
// line naming the peer; nothing is forwarded and the ack says nothing is
// done.
func TestReportsNeedTheirRanksToken(t *testing.T) {
	f := newFixture(t, 2, time.Second)
	if ack := f.assign(1, f.run("a", 4, 2, "serve")); !ack.Ok {
		t.Fatal(ack.Error)
	}
	f.reports(2) // the workers' own, with their tokens
	addr := f.node.ReportAddr()
	tests := []struct {
		name, line, mention string
	}{
		{"no token", reportLine("a", 4, 0, "", false), "no report token"},
		{"no token, done", reportLine("a", 4, 0, "", true), "no report token"},
		{"another rank's token", reportLine("a", 4, 0, f.token("a", 4, 1), true), "wrong report token"},
		{"a made-up token", reportLine("a", 4, 0, "AAAA", false), "wrong report token"},
		{"another incarnation's token", reportLine("a", 4, 0, f.token("a", 3, 0), true), "wrong report token"},
		{"old incarnation", reportLine("a", 3, 0, f.token("a", 3, 0), true), "does not run"},
		{"unknown job", reportLine("b", 4, 0, f.token("b", 4, 0), false), "does not run"},
		{"rank not here", reportLine("a", 4, 2, f.token("a", 4, 2), false), "rank 2"},
		{"done from rank 1", reportLine("a", 4, 1, f.token("a", 4, 1), true), "only rank 0"},
		{"garbage", "\x00\x01garbage", "bad report"},
		{"NaN", strings.Replace(reportLine("a", 4, 0, f.token("a", 4, 0), false), `"step_time":1`, `"step_time":"NaN"`, 1), "bad report"},
	}
	for i, tc := range tests {
		c := sendLine(t, addr, tc.line)
		closedWithin(t, c, 3*time.Second)
		waitCount(t, f.log, "refused worker report", i+1)
		if !strings.Contains(f.log.String(), tc.mention) || !strings.Contains(f.log.String(), "peer="+c.LocalAddr().String()) {
			t.Errorf("%s: no log line naming %q and the peer:\n%s", tc.name, tc.mention, f.log)
		}
	}
	f.quiet(300 * time.Millisecond)
	if rs := runStatus(f.assign(2, f.run("a", 4, 2, "serve")), "a", 4); rs == nil || rs.Done || rs.DoneToken != "" {
		t.Errorf("run after the refusals: %v", rs)
	}
	// A report with its token gets through, and so do the next on the
	// same connection.
	c := sendLine(t, addr, reportLine("a", 4, 1, f.token("a", 4, 1), false))
	if _, err := io.WriteString(c, reportLine("a", 4, 0, f.token("a", 4, 0), false)+"\n"); err != nil {
		t.Fatal(err)
	}
	for _, r := range f.reports(2) {
		if r.LocalBsz != 7 || r.Token != "" {
			t.Errorf("forwarded %v", r)
		}
	}
}

// TestDoneCarriesRank0sToken: the owner and the ack get the token of
// rank 0's done report, for the leader to check.
func TestDoneCarriesRank0sToken(t *testing.T) {
	f := newFixture(t, 1, time.Second)
	f.assign(1, f.run("a", 2, 1, "done"))
	r := f.reports(1)[0]
	if !r.Done || r.Token != f.token("a", 2, 0) {
		t.Errorf("done report %v", r)
	}
	f.next(5 * time.Second) // its exit
	if rs := runStatus(f.assign(2, f.run("a", 2, 1, "done")), "a", 2); rs == nil || !rs.Done || rs.DoneToken != f.token("a", 2, 0) {
		t.Errorf("ack %v", rs)
	}
}

// TestDoneOfAReplacedRunIsRefused: once a run is being stopped (the
// leader moved on), even rank 0's done report with its token does not
// count.
func TestDoneOfAReplacedRunIsRefused(t *testing.T) {
	f := newFixture(t, 1, 3*time.Second)
	f.assign(1, f.run("a", 1, 1, "stubborn"))
	f.reports(1)
	f.assign(2) // a is no longer wanted; its worker ignores SIGTERM
	c := sendLine(t, f.node.ReportAddr(), reportLine("a", 1, 0, f.token("a", 1, 0), true))
	closedWithin(t, c, 3*time.Second)
	waitCount(t, f.log, "no longer current", 1)
	if st := f.status(); len(st.Jobs) != 1 || !st.Jobs[0].Stopping {
		t.Errorf("status %v", st)
	}
	if rs := runStatus(f.assign(3), "a", 1); rs == nil || rs.Done {
		t.Errorf("ack %v", rs)
	}
}

// TestPolicyDeniesRunsInTheAck: what the allow-list does not match, and
// a checkpoint directory outside the root, are denied in the ack with
// the reason (one log line each, however often re-sent), never started
// and not recorded as run; the rest of the assignment runs.
func TestPolicyDeniesRunsInTheAck(t *testing.T) {
	dir := t.TempDir()
	f := newFixtureIn(t, 6, time.Second, dir)
	f.allow = []string{"emulated:serve"}
	f.restartWith(nil)
	good := f.run("good", 1, 1, "serve")
	app := f.run("app", 1, 1, "fail")
	cmd := f.run("cmd", 1, 1, "")
	cmd.Application, cmd.Command = "", []string{"/bin/sh", "-c", "touch /tmp/pwned"}
	out := f.run("out", 1, 1, "serve")
	out.CheckpointDir = "/etc/pollux-test"
	dots := f.run("dots", 1, 1, "serve")
	dots.CheckpointDir = f.root + "/../escape"
	want := map[string]string{"app": "emulated application \"fail\"", "cmd": "command \"/bin/sh\"", "out": "outside the cluster's checkpoint root",
		"dots": `".."`}
	for gen := uint64(1); gen <= 3; gen++ {
		ack := f.assign(gen, good, app, cmd, out, dots)
		if !ack.Ok {
			t.Fatal(ack.Error)
		}
		for job, mention := range want {
			if rs := runStatus(ack, job, 1); rs == nil || !strings.Contains(rs.Denied, mention) || rs.Alive != 0 {
				t.Errorf("generation %d: %s: %v, want denied mentioning %s", gen, job, rs, mention)
			}
		}
		if rs := runStatus(ack, "good", 1); rs == nil || rs.Denied != "" {
			t.Errorf("good run: %v", rs)
		}
	}
	if r := f.reports(1)[0]; r.Job != "good" {
		t.Errorf("report %v", r)
	}
	f.quiet(300 * time.Millisecond)
	if n := strings.Count(f.log.String(), "refusing to run a job"); n != len(want) {
		t.Errorf("%d log lines for %d denials:\n%s", n, len(want), f.log)
	}
	fence, err := loadFencing(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(fence.Latest) != 1 || fence.Latest["good"] != 1 {
		t.Errorf("fencing state records %v, want only the good run", fence.Latest)
	}
	if st := f.status(); len(st.Jobs) != 1 {
		t.Errorf("status %v", st)
	}
	// Without a checkpoint root the node runs nothing new.
	f.root = "" // (send fills it in otherwise)
	ack := f.send(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 4, CheckpointRoot: "",
		Runs: []*pb.RunJob{good, f.run("other", 1, 1, "serve")}})
	if rs := runStatus(ack, "other", 1); !ack.Ok || rs == nil || !strings.Contains(rs.Denied, "no checkpoint root") {
		t.Errorf("without a root: %v", ack)
	}
}

// TestReportPortProbation: a connection that has delivered no accepted
// report yet is closed after ReportFirst, at its first bad line, and
// first when the cap is reached; workers' connections are not.
func TestReportPortProbation(t *testing.T) {
	logs := &logbuf.Buffer{}
	got := make(chan workerproto.Report, 10)
	l, err := listenReports(Config{ReportListen: "127.0.0.1:0", MaxReportConns: 2, ReportFirst: 500 * time.Millisecond,
		ReportIdle: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		func(r workerproto.Report) error {
			if r.Token != "good" {
				return fmt.Errorf("%w: test", errReportRefused)
			}
			got <- r
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	good := reportLine("j", 1, 0, "good", false)
	delivered := func() {
		t.Helper()
		select {
		case <-got:
		case <-time.After(3 * time.Second):
			t.Fatal("report not delivered")
		}
	}
	// Two silent connections fill the cap; a worker's third one makes
	// room by closing the oldest.
	admitted := func(n int) {
		t.Helper()
		conns := func() int {
			l.mu.Lock()
			defer l.mu.Unlock()
			return len(l.conns)
		}
		if !poll.Wait(3*time.Second, func() bool { return conns() >= n }) {
			t.Fatalf("%d connections admitted, want %d", conns(), n)
		}
	}
	c1 := sendLine(t, l.addr(), "")
	admitted(1)
	c2 := sendLine(t, l.addr(), "")
	admitted(2)
	w1 := sendLine(t, l.addr(), good)
	delivered()
	closedWithin(t, c1, time.Second)
	waitCount(t, logs, "the oldest without an accepted report makes room", 1)
	// The other silent one is closed after ReportFirst.
	start := time.Now()
	closedWithin(t, c2, 3*time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("silent connection closed after %v", d)
	}
	// A bad line or a refused report on probation closes at once.
	closedWithin(t, sendLine(t, l.addr(), "garbage"), time.Second)
	closedWithin(t, sendLine(t, l.addr(), reportLine("j", 1, 0, "bad", false)), time.Second)
	waitCount(t, logs, "refused worker report", 2)
	// A worker's bad line is dropped; its connection stays.
	if _, err := io.WriteString(w1, "garbage\n"+good+"\n"); err != nil {
		t.Fatal(err)
	}
	delivered()
	waitCount(t, logs, "dropping bad worker report", 1)
	// ... up to maxBadLines in a row.
	if _, err := io.WriteString(w1, strings.Repeat("garbage\n", maxBadLines)); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, w1, time.Second)
	waitCount(t, logs, "bad lines in a row", 1)
	w1 = sendLine(t, l.addr(), good)
	delivered()
	// Two workers' connections: the cap holds against a third client.
	// (A report is delivered before its connection counts as a worker's:
	// wait for both to count, or the third would evict w2.)
	w2 := sendLine(t, l.addr(), good)
	delivered()
	waitProved(t, l, 2)
	closedWithin(t, sendLine(t, l.addr(), good), time.Second)
	waitCount(t, logs, "refused report connection", 1)
	for _, w := range []net.Conn{w1, w2} {
		if _, err := io.WriteString(w, good+"\n"); err != nil {
			t.Fatal(err)
		}
		delivered()
	}
}

// TestSetAllowCommands: a new allow-list (an agent's SIGHUP) admits the
// runs assigned from then on; a run already started goes on, and a bad
// list changes nothing.
func TestSetAllowCommands(t *testing.T) {
	f := newFixtureIn(t, 4, time.Second, t.TempDir())
	f.allow = []string{"emulated:serve"}
	f.restartWith(nil)
	first := f.run("first", 1, 1, "serve")
	if ack := f.assign(1, first); !ack.Ok || runStatus(ack, "first", 1).GetDenied() != "" {
		t.Fatalf("first run: %v", ack)
	}
	if err := f.node.SetAllowCommands([]string{"emulated:[bad"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad list: %v", err)
	}
	if err := f.node.SetAllowCommands([]string{"emulated:other"}); err != nil {
		t.Fatal(err)
	}
	second := f.run("second", 1, 1, "serve")
	ack := f.assign(2, first, second)
	if rs := runStatus(ack, "second", 1); !ack.Ok || rs == nil || !strings.Contains(rs.Denied, "not in this agent's allow-list") {
		t.Errorf("a run after the list changed: %v", ack)
	}
	if rs := runStatus(ack, "first", 1); rs == nil || rs.Denied != "" {
		t.Errorf("the run started before: %v", rs)
	}
}
