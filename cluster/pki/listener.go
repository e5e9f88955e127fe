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

// Listener defaults.
const (
	// DefaultHandshakeTimeout bounds one TLS handshake.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxHandshakes bounds the handshakes in progress at once.
	DefaultMaxHandshakes = 256
)

// ListenerOptions configure NewListener. Zero fields take defaults.
type ListenerOptions struct {
	// Channel names the listener in log lines.
	Channel Channel
	// Logger gets one line per refused connection (default
	// slog.Default()).
	Logger *slog.Logger
	// HandshakeTimeout (default DefaultHandshakeTimeout) and
	// MaxHandshakes (default DefaultMaxHandshakes).
	HandshakeTimeout time.Duration
	MaxHandshakes    int
}

// NewListener returns a listener whose Accept returns *tls.Conn whose
// handshake with cfg has completed. Handshakes run in their own
// goroutines, at most MaxHandshakes at once (more are closed at once)
// and each within HandshakeTimeout, so a slow or silent peer holds no
// one up. A refused handshake (plaintext, a certificate of another CA,
// expired, of the wrong role...) is logged once, naming the peer's
// address and the error, which names the identity the certificate
// claimed; a plaintext HTTP request gets a 400 answer saying to use
// HTTPS. Closing the listener closes the inner one and every connection
// not yet accepted.
func NewListener(inner net.Listener, cfg *tls.Config, o ListenerOptions) net.Listener {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxHandshakes <= 0 {
		o.MaxHandshakes = DefaultMaxHandshakes
	}
	l := &listener{inner: inner, cfg: cfg, o: o, conns: make(chan net.Conn), done: make(chan struct{}),
		sem: make(chan struct{}, o.MaxHandshakes)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.loop()
	return l
}

type listener struct {
	inner  net.Listener
	cfg    *tls.Config
	o      ListenerOptions
	conns  chan net.Conn
	done   chan struct{}
	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and handshakes, for tests
	once   sync.Once

	mu         sync.Mutex
	err        error // why the accept loop ended
	overloaded int   // refusals for overload since the last log line
	lastLog    time.Time
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
		select {
		case l.sem <- struct{}{}:
		default:
			c.Close()
			l.overload(c)
			continue
		}
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// overload logs refusals for too many handshakes at most once a second.
func (l *listener) overload(c net.Conn) {
	l.mu.Lock()
	l.overloaded++
	n := l.overloaded
	now := time.Now()
	if now.Sub(l.lastLog) < time.Second {
		l.mu.Unlock()
		return
	}
	l.overloaded, l.lastLog = 0, now
	l.mu.Unlock()
	l.o.Logger.Warn("pki: refused connection", "channel", l.o.Channel, "peer", c.RemoteAddr().String(),
		"err", "too many TLS handshakes in progress", "refused_since_last_line", n)
}

func (l *listener) handshake(c net.Conn) {
	defer l.wg.Done()
	tc := tls.Server(c, l.cfg)
	ctx, cancel := context.WithTimeout(l.ctx, l.o.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	<-l.sem
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
	l.o.Logger.Warn("pki: refused connection", "channel", l.o.Channel, "peer", c.RemoteAddr().String(), "err", err.Error())
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
