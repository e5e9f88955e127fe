package cluster

import (
	"net"
	"testing"
	"time"
)

func newTestTransport(t *testing.T) *packetTransport {
	t.Helper()
	tr, err := newPacketTransport("127.0.0.1", 0, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown() })
	return tr
}

// Each packet memberlist gets is its own copy, of its own size: the
// buffer they are read into is reused, so a packet still being handled
// must not change when the next arrives.
func TestPacketTransportCopiesEachPacket(t *testing.T) {
	tr := newTestTransport(t)
	c, err := net.Dial("udp", tr.udp.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := []string{"a longer first packet", "second"}
	var got [][]byte
	for _, s := range sent {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-tr.PacketCh():
			if p.From.String() != c.LocalAddr().String() {
				t.Errorf("packet from %v, sent from %v", p.From, c.LocalAddr())
			}
			if p.Timestamp.IsZero() {
				t.Error("packet without a time stamp")
			}
			got = append(got, p.Buf)
		case <-time.After(10 * time.Second):
			t.Fatalf("packet %q not received", s)
		}
	}
	for i, s := range sent {
		if string(got[i]) != s {
			t.Errorf("packet %d reads %q after the next arrived, sent %q", i, got[i], s)
		}
	}
}

// A stream dialled through the transport arrives on the other's
// StreamCh.
func TestPacketTransportStreams(t *testing.T) {
	a, b := newTestTransport(t), newTestTransport(t)
	conn, err := a.DialTimeout(b.tcp.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("push-pull")); err != nil {
		t.Fatal(err)
	}
	select {
	case in := <-b.StreamCh():
		defer in.Close()
		buf := make([]byte, 9)
		_ = in.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := in.Read(buf); err != nil || string(buf) != "push-pull" {
			t.Errorf("read %q, %v", buf, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream not accepted")
	}
}

func TestPacketTransportAdvertise(t *testing.T) {
	tr := newTestTransport(t)
	port := tr.tcp.Addr().(*net.TCPAddr).Port
	tests := []struct {
		addr     string
		port     int
		wantIP   string
		wantPort int
		wantErr  bool
	}{
		{"", 0, "127.0.0.1", port, false},
		{"10.1.2.3", 7946, "10.1.2.3", 7946, false},
		{"", 7000, "127.0.0.1", 7000, false},
		{"not-an-ip", 0, "", 0, true},
		{"0.0.0.0", 0, "", 0, true},
	}
	for _, tt := range tests {
		ip, p, err := tr.FinalAdvertiseAddr(tt.addr, tt.port)
		if (err != nil) != tt.wantErr {
			t.Errorf("FinalAdvertiseAddr(%q, %d): error %v, want one: %v", tt.addr, tt.port, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && (ip.String() != tt.wantIP || p != tt.wantPort) {
			t.Errorf("FinalAdvertiseAddr(%q, %d) = %v:%d, want %s:%d", tt.addr, tt.port, ip, p, tt.wantIP, tt.wantPort)
		}
	}
}

// Shutdown closes both listeners (the port is free again) and may be
// called twice.
func TestPacketTransportShutdown(t *testing.T) {
	tr, err := newPacketTransport("127.0.0.1", 0, quiet())
	if err != nil {
		t.Fatal(err)
	}
	port := tr.tcp.Addr().(*net.TCPAddr).Port
	if err := tr.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(); err != nil {
		t.Fatal(err)
	}
	again, err := newPacketTransport("127.0.0.1", port, quiet())
	if err != nil {
		t.Fatalf("port %d not free after Shutdown: %v", port, err)
	}
	again.Shutdown()
	if _, err := newPacketTransport("127.0.0.1.5", 0, quiet()); err == nil {
		t.Error("a bad bind address was accepted")
	}
}
