package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/internal/poll"
)

// waitCount waits for the log to hold n lines with s.
func waitCount(t *testing.T, l fmt.Stringer, s string, n int) {
	t.Helper()
	if !poll.Wait(3*time.Second, func() bool { return strings.Count(l.String(), s) >= n }) {
		t.Fatalf("log has %d lines with %q, want %d:\n%s", strings.Count(l.String(), s), s, n, l)
	}
}

// TestReportPortTLSAndLimits: workers reach the report port over TLS
// with the CA they are given; plaintext is refused, connections beyond the
// cap are closed, and silent ones are dropped after the idle time, each
// with one log line naming the peer.
func TestReportPortTLSAndLimits(t *testing.T) {
	b, err := pki.DevBundle(t.TempDir(), nil, []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := b.Credentials("n1")
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := creds.ServerConfig(pki.ChannelReport)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	got := make(chan workerproto.Report, 10)
	l, err := listenReports(Config{ReportListen: "127.0.0.1:0", ReportTLS: srvCfg, ReportCA: b.CA, MaxReportConns: 2,
		ReportFirst: 5 * time.Second, ReportIdle: 400 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		func(r workerproto.Report) error { got <- r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	line, _ := workerproto.Encode(workerproto.Report{Job: "j", Incarnation: 1, StepTime: 1, LocalBatch: 8})
	pool, err := pki.LoadPool(b.CA)
	if err != nil {
		t.Fatal(err)
	}
	dialTLS := func() *tls.Conn {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", l.addr(), pki.ReportClient(pool))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	w1 := dialTLS()
	defer w1.Close()
	if _, err := w1.Write(line); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.Job != "j" {
			t.Errorf("report %+v", r)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("report over TLS not delivered")
	}

	plain, err := net.Dial("tcp", l.addr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = plain.Write(line)
	plain.Close()
	waitCount(t, logs, "refused connection", 1)

	w2 := dialTLS()
	defer w2.Close()
	_, _ = w2.Write(line)
	<-got
	// Two connections of workers open: a third is closed at once.
	w3 := dialTLS()
	_ = w3.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := w3.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("third connection: read %v, want it closed", err)
	}
	w3.Close()
	waitCount(t, logs, "refused report connection", 1)

	// Silent connections are closed after the idle time.
	_ = w1.SetReadDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	if _, err := w1.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("idle connection: read %v, want it closed", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("idle connection closed after %v", d)
	}
	select {
	case r := <-got:
		t.Errorf("unexpected report %+v", r)
	default:
	}
}
