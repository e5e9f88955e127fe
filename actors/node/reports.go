package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"pollux/actors/workerproto"
	"pollux/cluster/pki"
)

// Limits of the report port.
const (
	// DefaultMaxReportConns bounds the report connections open at once.
	DefaultMaxReportConns = 256
	// DefaultReportIdle closes a report connection silent for that long
	// (a worker reports every few seconds and reconnects when cut off).
	DefaultReportIdle = 2 * time.Minute
)

// reportListener accepts worker connections (over TLS unless insecure)
// and hands every valid report to deliver. Bad lines are logged and
// dropped; a connection sending an oversized line, silent for the idle
// time, or beyond the connection cap is closed.
type reportListener struct {
	ln      net.Listener
	deliver func(workerproto.Report)
	log     *slog.Logger
	max     int
	idle    time.Duration

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func listenReports(cfg Config, deliver func(workerproto.Report)) (*reportListener, error) {
	ln, err := net.Listen("tcp", cfg.ReportListen)
	if err != nil {
		return nil, err
	}
	if cfg.ReportTLS != nil {
		ln = pki.NewListener(ln, cfg.ReportTLS, pki.ListenerOptions{Channel: pki.ChannelReport, Logger: cfg.Logger})
	}
	l := &reportListener{ln: ln, deliver: deliver, log: cfg.Logger, max: cfg.MaxReportConns, idle: cfg.ReportIdle,
		conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *reportListener) addr() string {
	if l == nil {
		return ""
	}
	return l.ln.Addr().String()
}

func (l *reportListener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.conns == nil { // closed
			l.mu.Unlock()
			c.Close()
			return
		}
		if len(l.conns) >= l.max {
			l.mu.Unlock()
			l.log.Warn("node: refused report connection", "channel", pki.ChannelReport, "peer", c.RemoteAddr().String(),
				"err", fmt.Sprintf("%d report connections open, the most allowed", l.max))
			c.Close()
			continue
		}
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.serve(c)
	}
}

func (l *reportListener) serve(c net.Conn) {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
		c.Close()
	}()
	rd := workerproto.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(l.idle))
		r, err := rd.Next()
		switch {
		case err == nil:
			l.deliver(r)
		case errors.Is(err, workerproto.ErrBadReport):
			l.log.Warn("node: dropping bad worker report", "from", c.RemoteAddr().String(), "err", err)
		case errors.Is(err, io.EOF):
			return
		default:
			l.log.Warn("node: closing report connection", "from", c.RemoteAddr().String(), "err", err)
			return
		}
	}
}

func (l *reportListener) close() {
	if l == nil {
		return
	}
	l.ln.Close()
	l.mu.Lock()
	for c := range l.conns {
		c.Close()
	}
	l.conns = nil
	l.mu.Unlock()
	l.wg.Wait()
}
