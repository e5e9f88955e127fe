package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// ListenerOptions configure NewListener. Zero fields take defaults.
type ListenerOptions struct {
	// Channel names the listener in log lines.
	Channel Channel
	// Logger gets one line per refused connection (default
	// slog.Default()).
	Logger *slog.Logger
	// Gate admits connections to their handshake (default: a gate of
	// Channel with the defaults, HandshakeTimeout and MaxHandshakes, and
	// no members).
	Gate *Gate
	// HandshakeTimeout and MaxHandshakes of the default gate.
	HandshakeTimeout time.Duration
	MaxHandshakes    int
}

// NewListener returns a listener whose Accept returns *tls.Conn whose
// handshake with cfg has completed. Every connection is first admitted
// by the gate (Gate: a cap per source, a cap in total, room for the
// members; a connection past a cap is closed at once), then its
// handshake runs in its own goroutine within the gate's deadline, so a
// slow or silent peer holds no one up. A refused handshake (plaintext, a
// certificate of another CA, expired, of the wrong role...) is logged
// once, naming the peer's address and the error, which names the
// identity the certificate claimed; a plaintext HTTP request gets a 400
// answer saying to use HTTPS. Closing the listener closes the inner one
// and every connection not yet accepted.
func NewListener(inner net.Listener, cfg *tls.Config, o ListenerOptions) net.Listener {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Gate == nil {
		o.Gate = NewGate(GateOptions{Channel: o.Channel, Logger: o.Logger, HandshakeTimeout: o.HandshakeTimeout, MaxHandshakes: o.MaxHandshakes})
	}
	l := &listener{inner: inner, cfg: cfg, o: o, gate: o.Gate, conns: make(chan net.Conn), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.loop()
	return l
}

type listener struct {
	inner  net.Listener
	cfg    *tls.Config
	o      ListenerOptions
	gate   *Gate
	conns  chan net.Conn
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and handshakes, for tests
	once   sync.Once

	mu  sync.Mutex
	err error // why the accept loop ended
}

func (l *listener) loop() {
	defer l.wg.Done()
	for {
		c, err := l.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			select {
			case <-l.done:
			default:
				if !errors.Is(err, net.ErrClosed) {
					// Out of file descriptors and the like: wait, go on.
					l.o.Logger.Warn("pki: accept failed", "channel", l.o.Channel, "err", err)
					select {
					case <-time.After(50 * time.Millisecond):
						continue
					case <-l.done:
					}
				}
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.Close()
			return
		}
		t, err := l.gate.Admit(c.RemoteAddr())
		if err != nil {
			_ = setLinger0(c)
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.handshake(t, t.Conn(c))
	}
}

// setLinger0 makes closing c reset it at once, so a refused connection
// holds no socket in TIME_WAIT or FIN_WAIT on this side.
func setLinger0(c net.Conn) error {
	if tc, ok := c.(*net.TCPConn); ok {
		return tc.SetLinger(0)
	}
	return nil
}

func (l *listener) handshake(t *Ticket, c net.Conn) {
	defer l.wg.Done()
	tc := tls.Server(c, l.cfg)
	ctx, cancel := context.WithTimeout(l.ctx, l.gate.HandshakeTimeout())
	err := tc.HandshakeContext(ctx)
	cancel()
	t.Done()
	if err != nil {
		l.refuse(c, err)
		return
	}
	select {
	case l.conns <- tc:
	case <-l.done:
		tc.Close()
	}
}

// refuse logs a failed handshake and closes the connection; a plaintext
// HTTP request is told to use HTTPS, as net/http does.
func (l *listener) refuse(c net.Conn, err error) {
	var rhe tls.RecordHeaderError
	if errors.As(err, &rhe) && rhe.Conn != nil && looksLikeHTTP(rhe.RecordHeader) {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to a TLS port: use https:// and the cluster CA.\n")
	}
	c.Close()
	select {
	case <-l.done:
		return // closing: not a refusal
	default:
	}
	l.gate.Refuse(c.RemoteAddr(), ReasonHandshake, err)
}

func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH":
		return true
	}
	return false
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil && !errors.Is(l.err, net.ErrClosed) {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting and interrupts the handshakes in progress.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		l.cancel()
		err = l.inner.Close()
	})
	return err
}

func (l *listener) Addr() net.Addr { return l.inner.Addr() }
