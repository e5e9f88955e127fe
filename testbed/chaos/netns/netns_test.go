package netns

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"pollux/internal/rootgate"
	"slices"
	"strings"
	"testing"
	"time"
)

// lab is a Net of three members, each with a TCP echo listener and a UDP
// counter of its own.
type lab struct {
	n   *Net
	tcp map[string]net.Listener
	udp map[string]*net.UDPConn
}

func newLab(t *testing.T) *lab {
	t.Helper()
	if err := Available(); err != nil {
		rootgate.Skip(t, "network namespaces unavailable: %v", err)
	}
	ctx := context.Background()
	n, err := New(ctx, []Member{{Name: "a", Labels: map[string]string{"rack": "r1"}}, {Name: "b", Labels: map[string]string{"rack": "r2"}},
		{Name: "c", Labels: map[string]string{"rack": "r1"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		for _, m := range n.members {
			if exists(m.NS) {
				t.Errorf("namespace %s left behind", m.NS)
			}
		}
	})
	l := &lab{n: n, tcp: map[string]net.Listener{}, udp: map[string]*net.UDPConn{}}
	for _, m := range n.members {
		err := inNamespace(m.NS, func() error {
			ln, err := net.Listen("tcp", m.IP.String()+":7000")
			if err != nil {
				return err
			}
			l.tcp[m.Name] = ln
			u, err := net.ListenUDP("udp", &net.UDPAddr{IP: m.IP.AsSlice(), Port: 7001})
			l.udp[m.Name] = u
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		ln := l.tcp[m.Name]
		t.Cleanup(func() { ln.Close(); l.udp[m.Name].Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	return l
}

// connect dials from member from (or the switch, "") to member to and
// returns how long the connection took, or an error.
func (l *lab) connect(from, to string, timeout time.Duration) (time.Duration, error) {
	addr := l.n.byName[to].IP.String() + ":7000"
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	begin := time.Now()
	if from == "" {
		c, err := l.n.Dial(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return time.Since(begin), err
	}
	err := inNamespace(l.n.byName[from].NS, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	return time.Since(begin), err
}

// reach lists the ordered pairs of members that can connect.
func (l *lab) reach(t *testing.T) []string {
	var out []string
	for _, a := range []string{"a", "b", "c"} {
		for _, b := range []string{"a", "b", "c"} {
			if a == b {
				continue
			}
			if _, err := l.connect(a, b, 300*time.Millisecond); err == nil {
				out = append(out, a+b)
			}
		}
		if _, err := l.connect("", a, time.Second); err != nil {
			t.Errorf("the harness cannot reach %s: %v", a, err)
		}
	}
	return out
}

func TestPartitionsAndHeal(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	all := []string{"ab", "ac", "ba", "bc", "ca", "cb"}
	if got := l.reach(t); !slices.Equal(got, all) {
		t.Fatalf("before any fault: %v", got)
	}
	if err := l.n.Partition(ctx, [][]string{{"a"}, {"b", "c"}}); err != nil {
		t.Fatal(err)
	}
	if got := l.reach(t); !slices.Equal(got, []string{"bc", "cb"}) {
		t.Errorf("a isolated: %v", got)
	}
	// Non-transitive: a sees b, b sees c, a does not see c.
	if err := l.n.Block(ctx, [][2]string{{"a", "c"}, {"c", "a"}}); err != nil {
		t.Fatal(err)
	}
	if got := l.reach(t); !slices.Equal(got, []string{"ab", "ba", "bc", "cb"}) {
		t.Errorf("bridge: %v", got)
	}
	if d := l.n.Describe(); d != "a drops from c; c drops from a" {
		t.Errorf("Describe: %q", d)
	}
	// By rack: r1 = {a, c}, r2 = {b}.
	groups := l.n.GroupsBy("rack")
	if !slices.EqualFunc(groups, [][]string{{"a", "c"}, {"b"}}, slices.Equal) {
		t.Fatalf("racks: %v", groups)
	}
	if err := l.n.Partition(ctx, groups); err != nil {
		t.Fatal(err)
	}
	if got := l.reach(t); !slices.Equal(got, []string{"ac", "ca"}) {
		t.Errorf("racks apart: %v", got)
	}
	if err := l.n.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.reach(t); !slices.Equal(got, all) || l.n.Describe() != "healed" {
		t.Errorf("healed: %v, %s", got, l.n.Describe())
	}
	for _, bad := range [][][]string{{{"a"}, {"b"}}, {{"a", "b"}, {"b", "c"}}, {{"a", "b", "c", "zz"}}} {
		if err := l.n.Partition(ctx, bad); !errors.Is(err, ErrConfig) {
			t.Errorf("partition %v: %v", bad, err)
		}
	}
}

func TestDelay(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	base, err := l.connect("a", "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.n.Degrade(ctx, []string{"b"}, 0, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The SYN reaching b is held 200 ms; a's packets to c are not.
	slow, err := l.connect("a", "b", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := l.connect("a", "c", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	harness, err := l.connect("", "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("connect a->b %v before, %v delayed; a->c %v; harness->b %v", base, slow, fast, harness)
	if slow < 200*time.Millisecond || slow > 2*time.Second || fast > 150*time.Millisecond || harness > 150*time.Millisecond {
		t.Errorf("connect times: delayed %v, undelayed %v, harness %v", slow, fast, harness)
	}
	if err := l.n.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := l.connect("a", "b", time.Second); err != nil || d > 150*time.Millisecond {
		t.Errorf("after heal: %v, %v", d, err)
	}
}

func TestLoss(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	if err := l.n.Degrade(ctx, []string{"b"}, 0.3, 0); err != nil {
		t.Fatal(err)
	}
	const sent = 2000
	// Count on the way: a burst would overflow the socket's buffer.
	counted := make(chan int)
	go func() {
		got := 0
		u := l.udp["b"]
		buf := make([]byte, 16)
		for {
			_ = u.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			if _, _, err := u.ReadFrom(buf); err != nil {
				break
			}
			got++
		}
		counted <- got
	}()
	err := inNamespace(l.n.byName["a"].NS, func() error {
		c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: l.n.byName["b"].IP.AsSlice(), Port: 7001})
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range sent {
			if _, err := c.Write([]byte("x")); err != nil {
				return err
			}
			if i%50 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := <-counted
	// 70 % of 2000 is 1400 with a standard deviation of about 20.
	t.Logf("%d of %d datagrams arrived with 30%% loss", got, sent)
	if got < 1280 || got > 1520 {
		t.Errorf("%d of %d arrived, want about 1400", got, sent)
	}
}

func TestSweepAndClose(t *testing.T) {
	if err := Available(); err != nil {
		rootgate.Skip(t, "network namespaces unavailable: %v", err)
	}
	// A namespace named as if left by a dead run.
	dead := "px999999999-1-zz"
	if err := run(context.Background(), "ip", "netns", "add", dead); err != nil {
		t.Fatal(err)
	}
	mine, err := New(context.Background(), []Member{{Name: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := Sweep()
	if err != nil || !slices.Contains(gone, dead) || slices.ContainsFunc(gone, func(s string) bool { return strings.HasPrefix(s, mine.prefix) }) {
		t.Errorf("swept %v, %v", gone, err)
	}
	if err := mine.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{mine.sw, mine.prefix + "-x", dead} {
		if _, err := os.Stat(filepath.Join(nsDir, ns)); err == nil {
			t.Errorf("%s still exists", ns)
		}
	}
	if _, err := New(context.Background(), []Member{{Name: "Bad_Name"}}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad name: %v", err)
	}
}
