package failover

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain doubles as a member process: the benchmark under test starts
// this binary with POLLUX_FAILOVER_MEMBER=1 and the member's flags.
func TestMain(m *testing.M) {
	if os.Getenv("POLLUX_FAILOVER_MEMBER") == "1" {
		os.Exit(member(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func member(args []string) int {
	fs := flag.NewFlagSet("consensus-member", flag.ContinueOnError)
	var o MemberOptions
	fs.StringVar(&o.ID, "id", "", "")
	fs.StringVar(&o.Dir, "dir", "", "")
	fs.StringVar(&o.Raft, "raft", "", "")
	fs.StringVar(&o.HTTP, "http", "", "")
	fs.StringVar(&o.Peers, "peers", "", "")
	fs.BoolVar(&o.Bootstrap, "bootstrap", false, "")
	fs.DurationVar(&o.Heartbeat, "heartbeat", 0, "")
	fs.DurationVar(&o.Election, "election", 0, "")
	fs.DurationVar(&o.Lease, "lease", 0, "")
	fs.StringVar(&o.CA, "ca", "", "")
	fs.StringVar(&o.Cert, "cert", "", "")
	fs.StringVar(&o.Key, "key", "", "")
	fs.BoolVar(&o.Insecure, "insecure", false, "")
	if len(args) == 0 || args[0] != "consensus-member" || fs.Parse(args[1:]) != nil {
		return 2
	}
	if err := RunMember(o, os.Stdin, os.Stderr); err != nil {
		return 1
	}
	return 0
}

func testMember(args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "POLLUX_FAILOVER_MEMBER=1")
	return cmd
}

// TestBenchFailover runs the benchmark over TLS with its plaintext
// baseline.
func TestBenchFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster, twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	o := Options{Servers: 3, Trials: 2, Allocs: 300, Batch: 64, Baseline: true,
		Heartbeat: 200 * time.Millisecond, Election: 200 * time.Millisecond, Lease: 100 * time.Millisecond, Member: testMember}
	rep, err := Run(ctx, o, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.TLS || rep.Plaintext == nil || rep.Plaintext.TLS || rep.TLSCost == nil {
		t.Fatalf("want a TLS run with a plaintext baseline: %+v", rep)
	}
	for _, r := range []Report{rep, *rep.Plaintext} {
		checkReport(t, o, r)
	}
	if c := rep.TLSCost; c.MedianRatio != rep.MedianS/rep.Plaintext.MedianS || c.AllocsRatio != rep.AllocsPerS/rep.Plaintext.AllocsPerS {
		t.Errorf("cost of TLS %+v does not compare %+v with %+v", c, rep, rep.Plaintext)
	}
}

func checkReport(t *testing.T, o Options, rep Report) {
	t.Helper()
	if rep.Trials != 2 || len(rep.SamplesS) != 2 || rep.Allocations != 300 || !(rep.AllocsPerS > 0) {
		t.Fatalf("report %+v", rep)
	}
	// A killed leader cannot be replaced before the followers' shortest
	// timeout, the lease's (consensus: leaderloss.go), and the benchmark
	// gives up after 30 s.
	for _, s := range rep.SamplesS {
		if s < o.Lease.Seconds() || s > 30 {
			t.Fatalf("failover sample %.3f s outside [%.1f, 30]", s, o.Lease.Seconds())
		}
	}
	if !(rep.MinS <= rep.MedianS && rep.MedianS <= rep.P95S && rep.P95S <= rep.MaxS) {
		t.Fatalf("order statistics out of order: %+v", rep)
	}
}

func TestValidate(t *testing.T) {
	good := Options{Servers: 3, Trials: 1, Batch: 1, Heartbeat: time.Second, Election: time.Second, Lease: time.Second, Member: testMember}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Options){
		"two servers":    func(o *Options) { o.Servers = 2 },
		"no trial":       func(o *Options) { o.Trials = 0 },
		"zero batch":     func(o *Options) { o.Batch = 0 },
		"long lease":     func(o *Options) { o.Lease = 2 * time.Second },
		"no member":      func(o *Options) { o.Member = nil },
		"fast heartbeat": func(o *Options) { o.Heartbeat = time.Millisecond },
	} {
		o := good
		edit(&o)
		if err := o.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ParsePeers("s0=a=b,bad"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "bad") {
		t.Errorf("ParsePeers: %v", err)
	}
	member := MemberOptions{Peers: "s0=127.0.0.1:1=127.0.0.1:2", Insecure: true}
	if err := member.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*MemberOptions){
		"neither TLS nor insecure": func(o *MemberOptions) { o.Insecure = false },
		"TLS and insecure":         func(o *MemberOptions) { o.CA, o.Cert, o.Key = "ca", "cert", "key" },
		"no key":                   func(o *MemberOptions) { o.Insecure, o.CA, o.Cert = false, "ca", "cert" },
		"bad peers":                func(o *MemberOptions) { o.Peers = "s0" },
	} {
		o := member
		edit(&o)
		if err := o.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("member %s: %v", name, err)
		}
	}
}
