package attack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/actors/server/api"
	"pollux/cluster/pki"
)

// countingReader yields n bytes of '#' (a YAML comment) and counts what
// was read.
type countingReader struct {
	left int64
	read atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.left))
	for i := range n {
		p[i] = '#'
	}
	r.left -= int64(n)
	r.read.Add(int64(n))
	return n, nil
}

// bigBody posts a 100 MiB job spec: refused if the server answers 413,
// or cuts the upload long before the body's end and logs its 413
// refusal naming the client (a slow server with no limit, or any other
// client error, does not pass).
func bigBody(ctx context.Context, t *target) (string, bool) {
	const size = 100 << 20
	body := &countingReader{left: size}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var local string
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		local = ci.Conn.LocalAddr().String()
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+t.leader.HTTP+api.PathJobs, body)
	if err != nil {
		return err.Error(), false
	}
	req.ContentLength = size
	resp, err := t.http.Do(req)
	sent := body.read.Load()
	switch {
	case err != nil && sent < size:
		cut := fmt.Sprintf("upload cut by the server after %.1f MiB of 100 (%v)", float64(sent)/(1<<20), err)
		line, ok := t.logLine(t.leader, "refused request", "status=413", "peer="+local)
		if !ok {
			return cut + "; but " + t.leader.ID + " logged no 413 refusal naming " + local, false
		}
		return cut + "; " + t.leader.ID + " logged: " + logMsg(line), true
	case err != nil:
		return "the whole body was taken: " + err.Error(), false
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		return fmt.Sprintf("answer %s: %s", resp.Status, strings.TrimSpace(string(msg))), false
	}
	return fmt.Sprintf("%s after %.1f MiB of 100 sent: %s", resp.Status, float64(sent)/(1<<20), strings.TrimSpace(string(msg))), true
}

// slowAPI holds connections to the API that never finish: 100 that
// never start the TLS handshake and 50 that send half a request's
// headers. Refused if a normal request is served while they are held and
// the server resets those past its pre-authentication caps at once and
// closes every other within its handshake (3 s) and header (5 s)
// deadlines.
func slowAPI(ctx context.Context, t *target) (string, bool) {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	begin := time.Now()
	// Connections past the gate's caps are reset at once: the flood
	// gets fewer, which is the point.
	var reset int
	for range 100 {
		c, err := net.DialTimeout("tcp", t.leader.HTTP, 3*time.Second)
		if err != nil {
			if !errors.Is(err, syscall.ECONNRESET) {
				return "cannot connect: " + err.Error(), false
			}
			reset++
			continue
		}
		conns = append(conns, c)
	}
	for range 50 {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", t.leader.HTTP, t.tlsConfig(&t.certs.client, "http/1.1"))
		if err != nil {
			if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
				return "cannot connect over TLS: " + err.Error(), false
			}
			reset++
			continue
		}
		if _, err := c.Write([]byte("GET " + api.PathStatus + " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")); err != nil {
			return "write: " + err.Error(), false
		}
		conns = append(conns, c)
	}
	if _, err := getJSON[api.Status](ctx, t, api.PathStatus); err != nil {
		return "a normal request failed while the slow clients held their connections: " + err.Error(), false
	}
	open := closedBy(conns, begin.Add(20*time.Second))
	if open > 0 {
		return fmt.Sprintf("%d of %d slow connections still open 20 s later", open, len(conns)), false
	}
	return fmt.Sprintf("a normal request was served meanwhile; %d connections reset at once by the gate, the other %d closed by the server within %v",
		reset, len(conns), time.Since(begin).Round(time.Second)), true
}

// closedBy waits until deadline for the peer to close every connection
// and returns how many it did not.
func closedBy(conns []net.Conn, deadline time.Time) int {
	var open atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			buf := make([]byte, 4096)
			for {
				_, err := c.Read(buf)
				if err == nil {
					continue // an answer (a 408, a TLS alert) before the close
				}
				if errors.Is(err, os.ErrDeadlineExceeded) {
					open.Add(1)
				}
				return
			}
		}()
	}
	wg.Wait()
	return int(open.Load())
}

// slowReports fills the victim's agent's report port with 300 silent TLS
// connections and 50 that never finish the handshake. Refused if a
// worker can still report meanwhile (rank 1 of the victim, connecting
// anew, is accepted: the oldest silent connection makes room), the
// victim's established reports go on, and every silent connection is
// closed within the first-report and handshake deadlines.
func slowReports(ctx context.Context, t *target) (string, bool) {
	addr := t.victim[1].reportAddr
	m := t.agentAt(addr)
	if m == nil {
		return "no agent reports at " + addr, false
	}
	j0, found, _, a := t.c.Client().Job(ctx, t.leader, "attack-victim", 5*time.Second)
	if !a.OK() || !found {
		return "cannot read the victim: " + a.Error(), false
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	begin := time.Now()
	for range 50 {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return "cannot connect: " + err.Error(), false
		}
		conns = append(conns, c)
	}
	for range 300 {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, pki.ReportClient(t.pool))
		if err != nil {
			return "cannot connect over TLS: " + err.Error(), false
		}
		conns = append(conns, c)
	}
	// A worker (rank 1, with its token) connects now and reports.
	w := t.victim[1]
	line, err := workerproto.Encode(workerproto.Report{Job: w.job, Incarnation: w.inc, Rank: w.rank, StepTime: 0.1, LocalBatch: 1, Token: w.token})
	if err != nil {
		return err.Error(), false
	}
	wc, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, pki.ReportClient(t.pool))
	if err != nil {
		return "the worker cannot connect while the port is full: " + err.Error(), false
	}
	defer wc.Close()
	local := wc.LocalAddr().String()
	if _, err := wc.Write(line); err != nil {
		return "the worker's report: " + err.Error(), false
	}
	_ = wc.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := wc.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Sprintf("the worker's connection was closed while the port was full: %v", err), false
	}
	if line, refused := t.logLine(m, "peer="+local, "refused"); refused {
		return "the worker's report was refused: " + logMsg(line), false
	}
	open := closedBy(conns, begin.Add(25*time.Second))
	if open > 0 {
		return fmt.Sprintf("%d of %d silent connections still open 25 s later", open, len(conns)), false
	}
	j1, found, _, a := t.c.Client().Job(ctx, t.leader, "attack-victim", 5*time.Second)
	if !a.OK() || !found || !(j1.Progress > j0.Progress) {
		return fmt.Sprintf("the victim's progress stopped at %v (then %v): its reports did not get through", j0.Progress, j1.Progress), false
	}
	evicted, _ := t.logLine(m, "the oldest without an accepted report makes room")
	return fmt.Sprintf("a worker connecting meanwhile reported (%s: %s); the victim's progress went on (%.0f -> %.0f); "+
		"all %d silent connections closed within %v", m.ID, logMsg(evicted), j0.Progress, j1.Progress, len(conns),
		time.Since(begin).Round(time.Second)), true
}
