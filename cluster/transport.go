package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// packetTransport is memberlist's network transport for a crowded pool
// (Config.Crowded): TCP for streams and UDP for packets on one port,
// like memberlist's NetTransport, except that it receives every packet
// into one buffer and hands memberlist a copy of its own size.
// NetTransport allocates (and the runtime clears) a fresh 64 KiB buffer
// for each packet; with hundreds of members in one process that was a
// tenth to a third of the process's CPU (docs/benchmarks.md, "The trap
// is a gossip storm"), and more in a storm, when it hurts most.
type packetTransport struct {
	tcp     *net.TCPListener
	udp     *net.UDPConn
	packets chan *memberlist.Packet
	streams chan net.Conn
	log     *slog.Logger

	done     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// Sizes of the UDP path: the largest packet memberlist reads (as
// NetTransport's) and the receive buffer asked of the kernel.
const (
	maxPacket     = 64 << 10
	udpReadBuffer = 2 << 20
)

// newPacketTransport listens on addr:port (port 0: one the kernel
// picks, the same for TCP and UDP).
func newPacketTransport(addr string, port int, log *slog.Logger) (*packetTransport, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return nil, fmt.Errorf("%w: gossip bind address %q is not an IP address", ErrConfig, addr)
	}
	tries := 1
	if port == 0 {
		tries = 10 // the UDP port may be taken where the TCP one was free
	}
	var err error
	for range tries {
		var tcp *net.TCPListener
		if tcp, err = net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port}); err != nil {
			continue
		}
		var udp *net.UDPConn
		if udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: tcp.Addr().(*net.TCPAddr).Port}); err != nil {
			tcp.Close()
			continue
		}
		// The largest buffer the kernel grants: a member starved for a
		// moment then loses fewer packets.
		for size := udpReadBuffer; size >= 64<<10 && udp.SetReadBuffer(size) != nil; size /= 2 {
		}
		t := &packetTransport{tcp: tcp, udp: udp, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn),
			log: log, done: make(chan struct{})}
		t.wg.Add(2)
		go t.accept()
		go t.receive()
		return t, nil
	}
	return nil, fmt.Errorf("%w: gossip listener on %s port %d: %w", ErrConfig, addr, port, err)
}

// FinalAdvertiseAddr implements memberlist.Transport: the configured
// address and port, or those it listens on.
func (t *packetTransport) FinalAdvertiseAddr(addr string, port int) (net.IP, int, error) {
	bound := t.tcp.Addr().(*net.TCPAddr)
	ip := bound.IP
	if addr != "" {
		if ip = net.ParseIP(addr); ip == nil {
			return nil, 0, fmt.Errorf("cluster: advertise address %q is not an IP address", addr)
		}
	}
	if ip.IsUnspecified() {
		return nil, 0, fmt.Errorf("cluster: listening on %v: name an address to advertise", bound.IP)
	}
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	if port == 0 {
		port = bound.Port
	}
	return ip, port, nil
}

// WriteTo implements memberlist.Transport.
func (t *packetTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *packetTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	to, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, to)
	return time.Now(), err
}

// PacketCh implements memberlist.Transport.
func (t *packetTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport.
func (t *packetTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *packetTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

// StreamCh implements memberlist.Transport.
func (t *packetTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown implements memberlist.Transport: it closes both listeners
// and waits for their goroutines. It may be called more than once.
func (t *packetTransport) Shutdown() error {
	t.stopOnce.Do(func() {
		close(t.done)
		t.tcp.Close()
		t.udp.Close()
	})
	t.wg.Wait()
	return nil
}

func (t *packetTransport) stopping() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// accept hands memberlist the connections of other members.
func (t *packetTransport) accept() {
	defer t.wg.Done()
	const maxDelay = time.Second
	delay := time.Duration(0)
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.stopping() || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), maxDelay)
			t.log.Warn("cluster: accepting a gossip stream", "err", err, "retry_in", delay)
			select {
			case <-t.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		select {
		case t.streams <- conn:
		case <-t.done:
			conn.Close()
			return
		}
	}
}

// receive reads packets into one buffer and hands memberlist a copy of
// each, of its size.
func (t *packetTransport) receive() {
	defer t.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, from, err := t.udp.ReadFrom(buf)
		at := time.Now()
		if err != nil {
			if t.stopping() || errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("cluster: reading a gossip packet", "err", err)
			continue
		}
		if n == 0 {
			continue // memberlist ignores empty packets too
		}
		p := &memberlist.Packet{Buf: append([]byte(nil), buf[:n]...), From: from, Timestamp: at}
		select {
		case t.packets <- p:
		case <-t.done:
			return
		}
	}
}
