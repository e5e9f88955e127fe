package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sentinel errors.
var (
	// ErrUnavailable: this machine or user cannot create network
	// namespaces or lacks a tool; the error says what.
	ErrUnavailable = errors.New("netns: unavailable")
	// ErrConfig: an unusable member list or fault.
	ErrConfig = errors.New("netns: bad configuration")
	// ErrCommand: an ip or iptables command failed.
	ErrCommand = errors.New("netns: command failed")
)

// nsDir is where ip netns keeps its namespaces.
const nsDir = "/var/run/netns"

// Available reports whether network namespaces can be made here: root,
// the ip and iptables-restore commands, and the right to create one.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network namespaces need root (running as uid %d)", ErrUnavailable, os.Geteuid())
	}
	for _, tool := range []string{"ip", "iptables-restore", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			pkg := "iproute2"
			if tool != "ip" {
				pkg = "iptables"
			}
			return fmt.Errorf("%w: no %s command (Debian package %s)", ErrUnavailable, tool, pkg)
		}
	}
	name := fmt.Sprintf("px%d-probe-%d", os.Getpid(), counter.Add(1))
	if err := run(context.Background(), "ip", "netns", "add", name); err != nil {
		return fmt.Errorf("%w: cannot create a network namespace: %w", ErrUnavailable, err)
	}
	return run(context.Background(), "ip", "netns", "del", name)
}

// counter numbers the Nets of this process.
var counter atomic.Int64

// Member is one namespace of a Net.
type Member struct {
	// Name is the member's id (a server or agent id).
	Name string
	// Labels place it (e.g. "rack": "r1"), for GroupsBy.
	Labels map[string]string
	// NS is the namespace's name; IP its address on the LAN.
	NS string
	IP netip.Addr
}

// Net is a virtual LAN of members. Its methods are safe for concurrent
// use.
type Net struct {
	prefix  string
	sw      string
	gateway netip.Addr
	members []*Member
	byName  map[string]*Member

	mu     sync.Mutex
	rules  map[string]*memberRules // per member name
	delays map[string]*delayer
	closed bool
}

// subnet is the LAN of every Net: each Net lives in namespaces of its own,
// so they never meet.
var subnet = netip.MustParsePrefix("10.77.0.0/24")

// New creates the switch and one namespace per member, in order, with
// addresses 10.77.0.1, .2, ... (the switch is .254). On error it deletes
// whatever it made.
func New(ctx context.Context, members []Member) (n *Net, err error) {
	if len(members) == 0 || len(members) > 250 {
		return nil, fmt.Errorf("%w: %d members (1 to 250)", ErrConfig, len(members))
	}
	n = &Net{prefix: fmt.Sprintf("px%d-%d", os.Getpid(), counter.Add(1)), byName: map[string]*Member{},
		rules: map[string]*memberRules{}, delays: map[string]*delayer{}}
	n.sw = n.prefix + "-sw"
	n.gateway = netip.MustParseAddr("10.77.0.254")
	ip := subnet.Addr()
	for _, m := range members {
		if !validName.MatchString(m.Name) || n.byName[m.Name] != nil {
			return nil, fmt.Errorf("%w: member name %q (unique, [a-z0-9]{1,16})", ErrConfig, m.Name)
		}
		ip = ip.Next()
		mm := &Member{Name: m.Name, Labels: m.Labels, NS: n.prefix + "-" + m.Name, IP: ip}
		n.members = append(n.members, mm)
		n.byName[m.Name] = mm
		n.rules[m.Name] = &memberRules{}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
			n = nil
		}
	}()
	cmds := [][]string{
		{"ip", "netns", "add", n.sw},
		{"ip", "-n", n.sw, "link", "set", "lo", "up"},
		{"ip", "-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.sw, "addr", "add", n.gateway.String() + "/24", "dev", "br0"},
		{"ip", "-n", n.sw, "link", "set", "br0", "up"},
	}
	for i, m := range n.members {
		port := "p" + strconv.Itoa(i)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", m.NS},
			[]string{"ip", "-n", m.NS, "link", "set", "lo", "up"},
			[]string{"ip", "-n", n.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", m.NS},
			[]string{"ip", "-n", n.sw, "link", "set", port, "master", "br0", "up"},
			[]string{"ip", "-n", m.NS, "addr", "add", m.IP.String() + "/24", "dev", "eth0"},
			[]string{"ip", "-n", m.NS, "link", "set", "eth0", "up"},
			[]string{"ip", "netns", "exec", m.NS, "iptables", "-N", chain},
			[]string{"ip", "netns", "exec", m.NS, "iptables", "-A", "INPUT", "-j", chain},
		)
	}
	for _, c := range cmds {
		if err := run(ctx, c[0], c[1:]...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

var validName = regexp.MustCompile(`^[a-z0-9]{1,16}$`)

// Members returns the members in order.
func (n *Net) Members() []Member {
	out := make([]Member, len(n.members))
	for i, m := range n.members {
		out[i] = *m
	}
	return out
}

// IP is member name's address.
func (n *Net) IP(name string) (netip.Addr, error) {
	m := n.byName[name]
	if m == nil {
		return netip.Addr{}, fmt.Errorf("%w: no member %q", ErrConfig, name)
	}
	return m.IP, nil
}

// Exec is the command prefix that runs a program in member name's
// namespace (the program keeps its pid: ip netns exec execs it).
func (n *Net) Exec(name string) ([]string, error) {
	m := n.byName[name]
	if m == nil {
		return nil, fmt.Errorf("%w: no member %q", ErrConfig, name)
	}
	return []string{"ip", "netns", "exec", m.NS}, nil
}

// Dial connects from the switch namespace: the harness's way in, never
// partitioned nor degraded. It fits http.Transport.DialContext.
func (n *Net) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNamespace(n.sw, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// inNamespace runs fn on a thread that has entered network namespace ns;
// sockets fn creates stay in ns. The thread then returns to its own
// namespace and to the runtime. Should that fail, the goroutine exits
// still locked and Go ends the thread, so that no other goroutine ever
// runs in ns by accident. (Ending threads has a cost beyond that: a child
// started with Pdeathsig dies when the thread that forked it ends, so the
// common path keeps its thread.)
func inNamespace(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("%w: opening this thread's namespace: %w", ErrCommand, err)
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open(filepath.Join(nsDir, ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("%w: opening namespace %s: %w", ErrCommand, ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("%w: entering namespace %s: %w", ErrCommand, ns, err)
			return
		}
		err = fn()
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Close heals the network, stops the delayers and deletes every
// namespace of the Net. Processes still inside keep theirs alive until
// they exit: stop them first.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	for name, d := range n.delays {
		errs = append(errs, d.close())
		delete(n.delays, name)
	}
	for _, m := range n.members {
		if exists(m.NS) {
			errs = append(errs, run(context.Background(), "ip", "netns", "del", m.NS))
		}
	}
	if exists(n.sw) {
		errs = append(errs, run(context.Background(), "ip", "netns", "del", n.sw))
	}
	return errors.Join(errs...)
}

func exists(ns string) bool {
	_, err := os.Stat(filepath.Join(nsDir, ns))
	return err == nil
}

// stale matches the namespaces of this package: px<pid>-<n>-<member>.
var stale = regexp.MustCompile(`^px([0-9]+)-[a-z0-9]+-[a-z0-9]+$`)

// Sweep deletes the namespaces left behind by runs whose process is gone
// (a harness killed before it could clean up) and returns their names.
func Sweep() ([]string, error) {
	ents, err := os.ReadDir(nsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCommand, err)
	}
	var gone []string
	var errs []error
	for _, e := range ents {
		m := stale.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil || errors.Is(syscall.Kill(pid, 0), syscall.EPERM) {
			continue
		}
		if err := run(context.Background(), "ip", "netns", "del", e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, e.Name())
	}
	slices.Sort(gone)
	return gone, errors.Join(errs...)
}

// run runs a command and wraps its output into the error.
func run(ctx context.Context, name string, args ...string) error {
	return runInput(ctx, "", name, args...)
}

func runInput(ctx context.Context, stdin, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w: %s", ErrCommand, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
