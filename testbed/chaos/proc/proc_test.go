//go:build unix

package proc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"pollux/internal/poll"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envChild switches the test binary into a child process (see TestMain).
const envChild = "PROC_TEST_CHILD"

// TestMain runs the test binary as one of the children the tests start
// when envChild is set: "sleep" prints "ready" and sleeps; "exit3" exits
// with status 3; "spawn" starts a sleeping grandchild (in its own process
// group unless told "spawn-samegroup"), prints its pid and sleeps.
func TestMain(m *testing.M) {
	switch mode := os.Getenv(envChild); mode {
	case "":
		os.Exit(m.Run())
	case "sleep":
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "exit3":
		os.Exit(3)
	case "spawn", "spawn-samegroup":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envChild+"=sleep")
		if mode == "spawn" {
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		time.Sleep(time.Hour)
	default:
		fmt.Fprintln(os.Stderr, "unknown child mode", mode)
		os.Exit(1)
	}
}

func child(name, mode string, stdout io.Writer) Spec {
	return Spec{Name: name, Path: os.Args[0], Env: []string{envChild + "=" + mode}, Stdout: stdout, Stderr: os.Stderr}
}

// startReading starts a child and returns its first line of output.
func startReading(t *testing.T, g *Group, mode string) (*Proc, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := g.Start(child(mode, mode, w))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("reading %s's first line: %v", mode, err)
	}
	return p, strings.TrimSpace(line)
}

func TestExitStatus(t *testing.T) {
	g := ForTest(t)
	p, err := g.Start(child("exit3", "exit3", nil))
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(10 * time.Second)
	if err != nil || st.ExitCode() != 3 {
		t.Fatalf("state %v, err %v", st, err)
	}
	if !p.Exited() {
		t.Error("not marked exited")
	}
	if err := p.Kill(); !errors.Is(err, ErrExited) {
		t.Errorf("kill after exit: %v", err)
	}
}

func TestKillAndTimeout(t *testing.T) {
	g := ForTest(t)
	p, line := startReading(t, g, "sleep")
	if line != "ready" {
		t.Fatalf("child said %q", line)
	}
	if _, err := p.Wait(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("wait on a sleeping child: %v", err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ws := st.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("child ended with %v, want killed by SIGKILL", st)
	}
}

// procState reads the state letter of /proc/pid/stat.
func procState(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Skipf("no procfs: %v", err)
	}
	i := strings.LastIndexByte(string(b), ')')
	return b[i+2]
}

func waitState(t *testing.T, pid int, want func(byte) bool, what string) {
	t.Helper()
	if !poll.Wait(10*time.Second, func() bool { return want(procState(t, pid)) }) {
		t.Fatalf("pid %d never %s (state %c)", pid, what, procState(t, pid))
	}
}

func TestStopCont(t *testing.T) {
	g := ForTest(t)
	p, _ := startReading(t, g, "sleep")
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.PID(), func(s byte) bool { return s == 'T' }, "stopped")
	if err := p.Cont(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.PID(), func(s byte) bool { return s != 'T' }, "resumed")
	// A stopped process still dies of SIGKILL.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.PID(), func(s byte) bool { return s == 'T' }, "stopped")
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// Killing a child kills the grandchildren of its process group.
func TestKillReachesGrandchildren(t *testing.T) {
	g := ForTest(t)
	p, line := startReading(t, g, "spawn-samegroup")
	gc, err := strconv.Atoi(line)
	if err != nil || !Alive(gc) {
		t.Fatalf("grandchild %q not alive (%v)", line, err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := WaitGone(gc, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Close kills everything: running children, a stopped one, and a tracked
// group the harness did not start (the grandchild in its own group stands
// for an orphaned worker).
func TestCloseKillsEverything(t *testing.T) {
	g := NewGroup()
	a, _ := startReading(t, g, "sleep")
	b, _ := startReading(t, g, "sleep")
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	c, line := startReading(t, g, "spawn")
	orphan, err := strconv.Atoi(line)
	if err != nil {
		t.Fatal(err)
	}
	// Killing c alone leaves its grandchild, in another group, running.
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !Alive(orphan) {
		t.Fatal("the orphan died with its parent's group")
	}
	g.Track(orphan)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Proc{a, b, c} {
		if !p.Exited() {
			t.Errorf("%s (pid %d) not reaped", p.Name, p.PID())
		}
	}
	if Alive(orphan) {
		t.Errorf("tracked orphan %d survived Close", orphan)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := g.Start(child("late", "sleep", nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("start after close: %v", err)
	}
}

// A group made by ForTest is closed when the (sub)test ends (t.Cleanup
// runs whether the test passed or failed).
func TestForTestCleansUp(t *testing.T) {
	var p *Proc
	t.Run("inner", func(t *testing.T) {
		p, _ = startReading(t, ForTest(t), "sleep")
	})
	if !p.Exited() || Alive(p.PID()) {
		t.Errorf("child pid %d outlived its test", p.PID())
	}
}

func TestStartError(t *testing.T) {
	g := ForTest(t)
	if _, err := g.Start(Spec{Name: "missing", Path: "/nonexistent/pollux-test"}); err == nil {
		t.Error("started a missing executable")
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	if Alive(0) || Alive(-1) {
		t.Error("pid <= 0 alive")
	}
	// A zombie is not alive: start a child outside any Group, let it
	// exit, and look before reaping it.
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envChild+"=exit3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := WaitGone(cmd.Process.Pid, 10*time.Second); err != nil {
		t.Error(err)
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Errorf("the zombie should still exist until reaped: %v", err)
	}
	_ = cmd.Wait()
	if Alive(cmd.Process.Pid) {
		t.Error("reaped child alive")
	}
	if err := WaitGone(os.Getpid(), 10*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Errorf("WaitGone on this process: %v", err)
	}
}
