package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The nfnetlink_queue protocol (linux/netfilter/nfnetlink_queue.h): just
// what a delayer needs. No Go module for it is reachable from this
// project's machines, so it is spoken here directly.
const (
	nfnlSubsysQueue = 3
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5

	nfqnlCfgCmdBind   = 1
	nfqnlCopyMeta     = 1
	nfqaCfgFFailOpen  = 1
	nfAccept          = 1
	queueNum          = 0
	queueMaxLen       = 1 << 15
	netlinkRecvBuffer = 8 << 20
)

// delayer holds every packet queued to it for delay, then accepts it, in
// arrival order.
type delayer struct {
	fd    int
	delay time.Duration
	seq   uint32

	wmu     sync.Mutex // serialises writes
	pending chan held
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	err     error
}

type held struct {
	id uint32
	at time.Time
}

// newDelayer binds queue queueNum of namespace ns.
func newDelayer(ns string, delay time.Duration) (*delayer, error) {
	d := &delayer{delay: delay, pending: make(chan held, queueMaxLen), stop: make(chan struct{})}
	err := inNamespace(ns, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		d.fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, netlinkRecvBuffer)
		_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
		// The reader wakes up this often to see whether it must stop.
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	})
	if err != nil {
		if d.fd > 0 {
			unix.Close(d.fd)
		}
		return nil, fmt.Errorf("%w: nfqueue socket in %s: %w", ErrCommand, ns, err)
	}
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, unix.AF_INET}
	params := binary.BigEndian.AppendUint32(nil, 0xffff) // copy range (unused with meta)
	params = append(params, nfqnlCopyMeta)
	steps := [][]byte{
		attr(nfqaCfgCmd, cmd),
		attr(nfqaCfgParams, params),
		attr(nfqaCfgQueueMax, binary.BigEndian.AppendUint32(nil, queueMaxLen)),
		append(attr(nfqaCfgMask, binary.BigEndian.AppendUint32(nil, nfqaCfgFFailOpen)),
			attr(nfqaCfgFlags, binary.BigEndian.AppendUint32(nil, nfqaCfgFFailOpen))...),
	}
	for _, a := range steps {
		if err := d.request(nfqnlMsgConfig, a); err != nil {
			unix.Close(d.fd)
			return nil, fmt.Errorf("%w: nfqueue config in %s: %w", ErrCommand, ns, err)
		}
	}
	d.wg.Add(2)
	go d.read()
	go d.release()
	return d, nil
}

// attr encodes one netlink attribute, padded to 4 bytes.
func attr(typ uint16, payload []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(payload)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// message is a netlink message of the queue subsystem for queueNum.
func (d *delayer) message(typ uint16, flags uint16, attrs []byte) []byte {
	d.seq++
	b := make([]byte, 0, 20+len(attrs))
	b = binary.NativeEndian.AppendUint32(b, uint32(20+len(attrs)))
	b = binary.NativeEndian.AppendUint16(b, nfnlSubsysQueue<<8|typ)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|flags)
	b = binary.NativeEndian.AppendUint32(b, d.seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, unix.AF_UNSPEC, 0)               // nfgenmsg: family, version
	b = binary.BigEndian.AppendUint16(b, queueNum) // res_id
	return append(b, attrs...)
}

// request sends a message and waits for the kernel's acknowledgement
// (before the reader runs).
func (d *delayer) request(typ uint16, attrs []byte) error {
	if err := unix.Sendto(d.fd, d.message(typ, unix.NLM_F_ACK, attrs), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(d.fd, buf, 0)
	if err != nil {
		return err
	}
	if n < 20 || binary.NativeEndian.Uint16(buf[4:6]) != unix.NLMSG_ERROR {
		return errors.New("no acknowledgement")
	}
	if code := int32(binary.NativeEndian.Uint32(buf[16:20])); code != 0 {
		return unix.Errno(-code)
	}
	return nil
}

// read receives queued packets and hands their ids to release.
func (d *delayer) read() {
	defer d.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		now := time.Now()
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			return
		}
		for b := buf[:n]; len(b) >= 16; {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			if l < 16 || l > len(b) {
				break
			}
			typ := binary.NativeEndian.Uint16(b[4:6])
			if typ == nfnlSubsysQueue<<8|nfqnlMsgPacket && l >= 20 {
				if id, ok := packetID(b[20:l]); ok {
					select {
					case d.pending <- held{id, now}:
					case <-d.stop:
						return
					}
				}
			}
			b = b[(l+3)&^3:]
		}
	}
}

// packetID finds the packet header attribute.
func packetID(attrs []byte) (uint32, bool) {
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs[0:2]))
		typ := binary.NativeEndian.Uint16(attrs[2:4]) & 0x3fff
		if l < 4 || l > len(attrs) {
			return 0, false
		}
		if typ == nfqaPacketHdr && l >= 8 {
			return binary.BigEndian.Uint32(attrs[4:8]), true
		}
		attrs = attrs[(l+3)&^3:]
	}
	return 0, false
}

// release accepts each packet once it has been held for the delay; when
// stopped it accepts everything still held at once.
func (d *delayer) release() {
	defer d.wg.Done()
	for {
		select {
		case h := <-d.pending:
			if wait := time.Until(h.at.Add(d.delay)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-d.stop:
				}
			}
			d.accept(h.id)
		case <-d.stop:
			for {
				select {
				case h := <-d.pending:
					d.accept(h.id)
				default:
					return
				}
			}
		}
	}
}

func (d *delayer) accept(id uint32) {
	v := binary.BigEndian.AppendUint32(nil, nfAccept)
	v = binary.BigEndian.AppendUint32(v, id)
	d.wmu.Lock()
	defer d.wmu.Unlock()
	_ = unix.Sendto(d.fd, d.message(nfqnlMsgVerdict, 0, attr(nfqaVerdictHdr, v)), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// close accepts every held packet and closes the queue. Remove the rules
// that feed it first.
func (d *delayer) close() error {
	d.once.Do(func() {
		close(d.stop)
		done := make(chan struct{})
		go func() { d.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			d.err = fmt.Errorf("%w: nfqueue delayer did not stop", ErrCommand)
		}
		if err := unix.Close(d.fd); err != nil && d.err == nil {
			d.err = fmt.Errorf("%w: %w", ErrCommand, err)
		}
	})
	return d.err
}
