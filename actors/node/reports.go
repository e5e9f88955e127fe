package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/cluster/pki"
)

// Limits of the report port.
const (
	// DefaultMaxReportConns bounds the report connections open at once.
	DefaultMaxReportConns = 256
	// DefaultReportFirst is how long a new connection has to deliver its
	// first accepted report (workers connect when they have a report to
	// send, so it comes at once).
	DefaultReportFirst = 10 * time.Second
	// DefaultReportIdle closes a report connection without an accepted
	// report for that long (a worker reports every few seconds and
	// reconnects when cut off).
	DefaultReportIdle = 2 * time.Minute
	// maxBadLines closes a worker's connection after that many bad lines
	// in a row (each is logged).
	maxBadLines = 16
)

// reportListener accepts worker connections (over TLS unless insecure)
// and hands every valid report to deliver, which checks its token.
//
// A connection is on probation until it delivers a report that deliver
// accepts: it has ReportFirst to do so, its first bad or refused line
// closes it, and when the connection cap is reached the oldest one on
// probation is closed to make room for a new one. A connection that has
// proved itself (a worker) is closed when it is silent for ReportIdle
// (only accepted reports count), on an oversized line, on a refused
// report or after maxBadLines malformed lines in a row; its malformed
// lines are dropped and logged. So a client that
// knows no token holds a connection for at most ReportFirst and cannot
// keep workers out by filling the cap.
type reportListener struct {
	ln      net.Listener
	deliver func(workerproto.Report) error
	log     *slog.Logger
	max     int
	first   time.Duration
	idle    time.Duration

	mu    sync.Mutex
	conns map[net.Conn]*reportConn // nil once closed
	wg    sync.WaitGroup
}

type reportConn struct {
	opened time.Time
	proved bool // delivered an accepted report
}

func listenReports(cfg Config, deliver func(workerproto.Report) error) (*reportListener, error) {
	ln, err := net.Listen("tcp", cfg.ReportListen)
	if err != nil {
		return nil, err
	}
	if cfg.ReportTLS != nil {
		ln = pki.NewListener(ln, cfg.ReportTLS, pki.ListenerOptions{Channel: pki.ChannelReport, Logger: cfg.Logger, Gate: cfg.ReportGate})
	}
	l := &reportListener{ln: ln, deliver: deliver, log: cfg.Logger, max: cfg.MaxReportConns, first: cfg.ReportFirst,
		idle: cfg.ReportIdle, conns: map[net.Conn]*reportConn{}}
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
		if !l.admit(c) {
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.serve(c)
	}
}

// admit registers c, closing the oldest connection on probation if the
// cap is reached; it reports false if c must be closed instead.
func (l *reportListener) admit(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil { // closed
		return false
	}
	if len(l.conns) >= l.max {
		var oldest net.Conn
		for o, st := range l.conns {
			if !st.proved && (oldest == nil || st.opened.Before(l.conns[oldest].opened)) {
				oldest = o
			}
		}
		if oldest == nil {
			l.log.Warn("node: refused report connection", "channel", pki.ChannelReport, "peer", c.RemoteAddr().String(),
				"err", fmt.Sprintf("%d report connections of workers open, the most allowed", l.max))
			return false
		}
		l.log.Warn("node: closed report connection", "channel", pki.ChannelReport, "peer", oldest.RemoteAddr().String(),
			"err", fmt.Sprintf("%d report connections open, the most allowed: the oldest without an accepted report makes room", l.max))
		oldest.Close()
		delete(l.conns, oldest)
	}
	l.conns[c] = &reportConn{opened: time.Now()}
	return true
}

func (l *reportListener) serve(c net.Conn) {
	defer l.wg.Done()
	l.mu.Lock()
	st := l.conns[c]
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		if l.conns[c] == st {
			delete(l.conns, c)
		}
		l.mu.Unlock()
		c.Close()
	}()
	if st == nil {
		return // evicted or closed already
	}
	peer := c.RemoteAddr().String()
	proved, bad := false, 0
	_ = c.SetReadDeadline(time.Now().Add(l.first))
	rd := workerproto.NewReader(c)
	for {
		r, err := rd.Next()
		if err == nil {
			err = l.deliver(r)
		}
		switch {
		case err == nil:
			bad = 0
			if !proved {
				proved = true
				l.mu.Lock()
				st.proved = true
				l.mu.Unlock()
			}
			_ = c.SetReadDeadline(time.Now().Add(l.idle))
		case errors.Is(err, workerproto.ErrBadReport) && proved && bad < maxBadLines-1:
			bad++
			l.log.Warn("node: dropping bad worker report", "channel", pki.ChannelReport, "peer", peer, "err", err)
		case errors.Is(err, io.EOF):
			return
		case errors.Is(err, errReportRefused):
			l.log.Warn("node: refused worker report", "channel", pki.ChannelReport, "peer", peer,
				"job", r.Job, "incarnation", r.Incarnation, "rank", r.Rank, "done", r.Done, "err", err)
			return
		case errors.Is(err, workerproto.ErrBadReport):
			why := "no accepted report on this connection yet"
			if proved {
				why = fmt.Sprintf("%d bad lines in a row", maxBadLines)
			}
			l.log.Warn("node: refused worker report", "channel", pki.ChannelReport, "peer", peer,
				"err", fmt.Errorf("%w (closing: %s)", err, why))
			return
		default:
			l.log.Warn("node: closing report connection", "channel", pki.ChannelReport, "peer", peer, "err", err)
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
