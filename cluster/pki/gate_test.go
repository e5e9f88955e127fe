package pki

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pollux/internal/logbuf"
)

func tcpAddr(s string) net.Addr {
	ap := netip.MustParseAddrPort(s)
	return net.TCPAddrFromAddrPort(ap)
}

// TestGateAdmit: the caps per source, in total, for members and on
// connections held, each refusal counted under its reason and logged
// naming the peer; a ticket ended gives its slot back.
func TestGateAdmit(t *testing.T) {
	members := &AddrSet{}
	members.Set([]netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.2")})
	tests := []struct {
		name   string
		o      GateOptions
		admit  []string // admitted in order, tickets kept
		then   string
		reason string // "" admitted
	}{
		{"per source", GateOptions{PerSource: 2}, []string{"192.0.2.1:1", "192.0.2.1:2"}, "192.0.2.1:3", ReasonPerSource},
		{"another source still in", GateOptions{PerSource: 2}, []string{"192.0.2.1:1", "192.0.2.1:2"}, "192.0.2.2:1", ""},
		{"ipv6 /64 is one source", GateOptions{PerSource: 1}, []string{"[2001:db8::1]:1"}, "[2001:db8::ffff]:1", ReasonPerSource},
		{"another /64", GateOptions{PerSource: 1}, []string{"[2001:db8::1]:1"}, "[2001:db8:0:1::1]:1", ""},
		{"total", GateOptions{MaxHandshakes: 2}, []string{"192.0.2.1:1", "192.0.2.2:1"}, "192.0.2.3:1", ReasonTotal},
		{"members past the total", GateOptions{MaxHandshakes: 2}, []string{"192.0.2.1:1", "192.0.2.2:1"}, "10.0.0.1:1", ""},
		{"mapped member", GateOptions{MaxHandshakes: 1}, []string{"192.0.2.1:1"}, "10.0.0.2:9", ""},
		{"members past the per source", GateOptions{PerSource: 1}, []string{"10.0.0.1:1", "10.0.0.1:2"}, "10.0.0.1:3", ""},
		{"members' room", GateOptions{MemberHandshakes: 2}, []string{"10.0.0.1:1", "10.0.0.1:2"}, "10.0.0.1:3", ReasonMembers},
		{"connections per source", GateOptions{ConnsPerSource: 2}, []string{"192.0.2.1:1", "192.0.2.1:2"}, "192.0.2.1:3", ReasonConnsPerSource},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logbuf.Buffer{}
			tc.o.Channel, tc.o.Logger, tc.o.Member = ChannelAPI, slog.New(slog.NewTextHandler(logs, nil)), members.Contains
			g := NewGate(tc.o)
			var tickets []*Ticket
			for _, a := range tc.admit {
				tk, err := g.Admit(tcpAddr(a))
				if err != nil {
					t.Fatalf("%s refused: %v", a, err)
				}
				tickets = append(tickets, tk)
			}
			tk, err := g.Admit(tcpAddr(tc.then))
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("%s refused: %v", tc.then, err)
				}
				tk.Closed()
			} else {
				if !errors.Is(err, ErrOverload) {
					t.Fatalf("%s: %v, want a refusal for %s", tc.then, err, tc.reason)
				}
				if got := g.Stats().Refused[tc.reason]; got != 1 {
					t.Errorf("refused[%s] = %d, want 1 (%+v)", tc.reason, got, g.Stats())
				}
				if l := logs.Lines("refused connection"); len(l) != 1 || !strings.Contains(l[0], "peer="+tc.then) ||
					!strings.Contains(l[0], "reason="+tc.reason) || !strings.Contains(l[0], "channel=api") {
					t.Errorf("log %q", logs.String())
				}
			}
			// Every slot comes back: the refused address gets in once the
			// others end (their handshakes, and the connections held).
			for _, tk := range tickets {
				tk.Done()
				tk.Closed()
			}
			if tk, err := g.Admit(tcpAddr(tc.then)); err != nil {
				t.Errorf("after the others ended: %v", err)
			} else {
				tk.Closed()
			}
			if s := g.Stats(); s.MemberHandshakes != 0 || s.OtherHandshakes != 0 || len(g.handshakes) != 0 || len(g.conns) != 0 {
				t.Errorf("slots left taken: %+v %v %v", s, g.handshakes, g.conns)
			}
		})
	}
}

// TestGateLogsOncePerSecondPerSource: a flood is a line per source and
// second, with the count of refusals it stands for.
func TestGateLogsOncePerSecondPerSource(t *testing.T) {
	logs := &logbuf.Buffer{}
	g := NewGate(GateOptions{Channel: ChannelRaft, PerSource: 1, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if _, err := g.Admit(tcpAddr("192.0.2.1:1")); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := g.Admit(tcpAddr("192.0.2.1:" + strconv.Itoa(i+2))); err == nil {
			t.Fatal("admitted past the cap")
		}
	}
	if l := logs.Lines("refused connection"); len(l) != 1 || !strings.Contains(l[0], "refused_since_last_line=1") {
		t.Fatalf("lines %q", l)
	}
	if got := g.Stats().Refused[ReasonPerSource]; got != 100 {
		t.Errorf("counted %d refusals, want 100", got)
	}
}

// TestListenerKeepsRoomUnderAFlood: 500 silent connections from one
// address (127.0.0.2) to a listener: at most PerSource of them wait for
// a handshake, the rest are closed at once; a member (127.0.0.1) and
// another address (127.0.0.3) finish their handshakes meanwhile.
func TestListenerKeepsRoomUnderAFlood(t *testing.T) {
	if !loopbackAlias(t) {
		t.Skip("127.0.0.2 is not a local address here")
	}
	f := newFixture(t)
	server := f.creds(Identity{Role: RoleServer, Name: "s0"})
	cfg, _ := server.ServerConfig(ChannelRaft)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	members := &AddrSet{}
	members.Set([]netip.Addr{netip.MustParseAddr("127.0.0.1")})
	logs := &logbuf.Buffer{}
	gate := NewGate(GateOptions{Channel: ChannelRaft, Logger: slog.New(slog.NewTextHandler(logs, nil)), Member: members.Contains,
		MaxHandshakes: 16, PerSource: 4, HandshakeTimeout: 5 * time.Second})
	ln := NewListener(inner, cfg, ListenerOptions{Channel: ChannelRaft, Gate: gate})
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}
	reset := 0
	for range 500 {
		c, err := d.Dial("tcp", addr)
		if errors.Is(err, syscall.ECONNRESET) {
			reset++ // closed by the listener before the dial returned
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	client := f.creds(Identity{Role: RoleServer, Name: "s1"})
	ccfg, _ := client.ClientConfig(ChannelRaft)
	for _, from := range []string{"127.0.0.1", "127.0.0.3"} {
		ok, err := dialFrom(from, addr, ccfg)
		if !ok {
			t.Errorf("from %s while flooded: %v", from, err)
		}
	}
	// Every flood connection but PerSource is closed by the listener.
	open := 0
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			_, err := c.Read(make([]byte, 1))
			if errors.Is(err, os.ErrDeadlineExceeded) {
				mu.Lock()
				open++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if open > 4 {
		t.Errorf("%d flood connections still open, want at most 4 (the per-source cap)", open)
	}
	if got := gate.Stats().Refused[ReasonPerSource]; got < 496 {
		t.Errorf("%d refusals counted, want at least 496", got)
	}
	if l := logs.Lines("peer=127.0.0.2:"); len(l) == 0 || len(l) > 10 {
		t.Errorf("%d log lines about the flood, want a few:\n%s", len(l), logs.String())
	}
}

// loopbackAlias reports whether 127.0.0.2 can be bound (all of 127/8 is
// loopback on Linux).
func loopbackAlias(t *testing.T) bool {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// dialFrom is dial from the local address from.
func dialFrom(from, addr string, cfg *tls.Config) (bool, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	cfg = cfg.Clone()
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		return false, err
	}
	b := make([]byte, 2)
	if _, err := tc.Read(b); err != nil || string(b) != "ok" {
		return false, err
	}
	return true, nil
}
