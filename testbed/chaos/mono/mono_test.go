package mono

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestNowIsMonotonic(t *testing.T) {
	a := Now()
	time.Sleep(2 * time.Millisecond)
	b := Now()
	if b-a < int64(2*time.Millisecond) {
		t.Errorf("readings %d then %d after a 2 ms sleep", a, b)
	}
	if got := Seconds(a+1500*int64(time.Millisecond), a); got != "1.500s" {
		t.Errorf("Seconds = %q", got)
	}
}

func TestStartTicksAndAlive(t *testing.T) {
	self, err := StartTicks(os.Getpid())
	if err != nil || self == 0 {
		t.Fatalf("own start time %d, %v", self, err)
	}
	if !Alive(os.Getpid(), self) || !Alive(os.Getpid(), 0) {
		t.Error("this process is not alive")
	}
	if Alive(os.Getpid(), self+1) {
		t.Error("a pid with another start time (reused) counts as alive")
	}
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	ticks, err := StartTicks(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !Alive(cmd.Process.Pid, ticks) {
		t.Error("child not alive")
	}
	_ = cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	// Not reaped yet: a zombie counts as gone.
	for Alive(cmd.Process.Pid, ticks) {
		if time.Now().After(deadline) {
			t.Fatal("killed child still alive")
		}
		time.Sleep(time.Millisecond)
	}
	_ = cmd.Wait()
	if _, err := StartTicks(cmd.Process.Pid); !errors.Is(err, ErrProc) {
		t.Errorf("reaped child: %v", err)
	}
}

func TestParseStartTicks(t *testing.T) {
	line := "42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10\n"
	if v, err := parseStartTicks([]byte(line)); err != nil || v != 987654 {
		t.Errorf("got %d, %v", v, err)
	}
	for _, bad := range []string{"", "42 name S 1", "42 (x) S 1 2 3", "42 (x) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 -5 1"} {
		if _, err := parseStartTicks([]byte(bad)); !errors.Is(err, ErrProc) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
