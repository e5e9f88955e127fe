package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pollux/actors/node/workerproto"
	"pollux/internal/logbuf"
)

// EnvRequireTorch set to 1 (CI does) turns the skip of the torch tests on
// a machine without torch into a failure.
const EnvRequireTorch = "POLLUX_REQUIRE_TORCH"

var (
	installOnce sync.Once
	installed   Layout
	installErr  error
	pythonErr   error
)

// library skips t in -short mode, skips it (or, with
// POLLUX_REQUIRE_TORCH=1, fails it) when Python lacks torch or sklearn,
// and otherwise returns the installed library.
func library(t *testing.T) Layout {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real PyTorch workers")
	}
	installOnce.Do(func() {
		if pythonErr = CheckPython(context.Background()); pythonErr != nil {
			return
		}
		dir, err := os.MkdirTemp("", "pollux-worker-lib-")
		if err != nil {
			installErr = err
			return
		}
		installed, installErr = Install(dir)
	})
	if pythonErr != nil {
		if os.Getenv(EnvRequireTorch) == "1" {
			t.Fatalf("%v (%s=1)", pythonErr, EnvRequireTorch)
		}
		t.Skipf("skipped: %v", pythonErr)
	}
	if installErr != nil {
		t.Fatal(installErr)
	}
	return installed
}

func TestMain(m *testing.M) {
	code := m.Run()
	if installed.Dir != "" {
		os.RemoveAll(installed.Dir)
	}
	os.Exit(code)
}

// timedReport is a decoded report and when it arrived.
type timedReport struct {
	workerproto.Report
	at time.Time
}

// sink is a report listener on 127.0.0.1 decoding with workerproto, as
// the node agent does. Any line the decoder refuses fails the test.
type sink struct {
	t  *testing.T
	ln net.Listener

	mu      sync.Mutex
	reports []timedReport
	conns   int
}

func newSink(t *testing.T) *sink { return newTLSSink(t, nil) }

// newTLSSink is a sink serving TLS with cfg (nil: plain TCP).
func newTLSSink(t *testing.T, cfg *tls.Config) *sink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	s := &sink{t: t, ln: ln}
	t.Cleanup(func() { ln.Close() })
	go s.accept()
	return s
}

func (s *sink) addr() string { return s.ln.Addr().String() }

func (s *sink) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *sink) serve(c net.Conn) {
	defer c.Close()
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			s.t.Logf("report connection refused: %v", err)
			return
		}
	}
	rd := workerproto.NewReader(c)
	for {
		r, err := rd.Next()
		switch {
		case err == nil:
			s.mu.Lock()
			s.reports = append(s.reports, timedReport{r, time.Now()})
			s.mu.Unlock()
		case errors.Is(err, workerproto.ErrBadReport):
			s.t.Errorf("the Go decoder refused a report: %v", err)
		default:
			if !errors.Is(err, io.EOF) {
				s.t.Errorf("report stream: %v", err)
			}
			return
		}
	}
}

func (s *sink) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// all returns the reports received so far, optionally only those of one
// incarnation.
func (s *sink) all(inc ...uint64) []timedReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []timedReport
	for _, r := range s.reports {
		if len(inc) == 0 || r.Incarnation == inc[0] {
			out = append(out, r)
		}
	}
	return out
}

// run is the configuration of one job incarnation started by the tests.
type run struct {
	job         string
	incarnation uint64
	replicas    int
	nodes       int // the replicas' machines (0: 1)
	initBatch   int
	atomicBatch int
	accumSteps  int
	dir         string // checkpoint directory
	reportAddr  string
	script      string   // the example script (empty: train_digits.py)
	args        []string // after the script
	extraEnv    []string
	cpus        []int // every rank's cores (nil: one core each, round robin)
}

// worker is one started worker process.
type worker struct {
	rank   int
	cmd    *exec.Cmd
	out    *logbuf.Buffer
	done   chan struct{}
	err    error
	killed bool
}

// start launches the replicas of r (see envOf). Every process is stopped
// at the end of the test.
func start(t *testing.T, l Layout, r run) []*worker {
	t.Helper()
	port := 0
	if r.replicas > 1 {
		port = freePort(t)
	}
	var ws []*worker
	for rank := 0; rank < r.replicas; rank++ {
		e := envOf(r, rank)
		e.MasterPort = max(port, 1)
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
		script := r.script
		if script == "" {
			script = l.Digits
		}
		cmd := exec.Command(Python, append([]string{script}, r.args...)...)
		cmd.Env = append(append(cleanEnv(), e.Environ()...), r.extraEnv...)
		w := &worker{rank: rank, cmd: cmd, out: &logbuf.Buffer{}, done: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = w.out, w.out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { w.err = cmd.Wait(); close(w.done) }()
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-w.done
		})
		ws = append(ws, w)
	}
	return ws
}

// envOf is the environment of one rank of r, pinned to one core of this
// machine (round robin) as an agent's CPU slot would be.
func envOf(r run, rank int) workerproto.Env {
	cpus := cpuSet()
	e := workerproto.Env{
		JobID: r.job, Incarnation: r.incarnation, Rank: rank, LocalRank: rank,
		WorldSize: r.replicas, NumNodes: max(r.nodes, 1), MasterAddr: "127.0.0.1", MasterPort: 1,
		InitBatch: r.initBatch, AtomicBatch: r.atomicBatch, AccumSteps: r.accumSteps, Gain: 1,
		CheckpointDir: r.dir, ReportAddr: r.reportAddr,
		CPUs: []int{cpus[rank%len(cpus)]},
	}
	if r.cpus != nil {
		e.CPUs = r.cpus
	}
	return e
}

// cleanEnv is this process's environment without the protocol's variables
// (a test run inside a worker must not leak them).
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "POLLUX_") || k == "OMP_NUM_THREADS" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// wait waits for every worker to exit, at most d, and fails the test if
// one exits non-zero (showing its output).
func wait(t *testing.T, ws []*worker, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for _, w := range ws {
		select {
		case <-w.done:
		case <-deadline:
			t.Fatalf("rank %d still running after %v; output:\n%s", w.rank, d, tail(w.out.String()))
		}
		if w.err != nil && !w.killed {
			t.Fatalf("rank %d: %v; output:\n%s", w.rank, w.err, tail(w.out.String()))
		}
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// readSummary reads the progress summary the library writes with every
// checkpoint.
func readSummary(dir string) (Progress, error) { return ReadProgress(dir) }

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// cpuSet lists the CPUs this process may run on.
func cpuSet() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return []int{0}
	}
	var out []int
	for c := 0; c < len(set)*64 && len(out) < set.Count(); c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return []int{0}
	}
	return out
}
