package node

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"

	"pollux/actors/workerproto"
)

// reportListener accepts worker connections and hands every valid report
// to deliver. Bad lines are logged and dropped; a connection sending an
// oversized line is closed.
type reportListener struct {
	ln      net.Listener
	deliver func(workerproto.Report)
	log     *slog.Logger

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func listenReports(addr string, deliver func(workerproto.Report), log *slog.Logger) (*reportListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &reportListener{ln: ln, deliver: deliver, log: log, conns: map[net.Conn]struct{}{}}
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
