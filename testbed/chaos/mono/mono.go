package mono

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ErrProc is returned by StartTicks when /proc does not describe the
// process (it is gone, or /proc is not mounted).
var ErrProc = errors.New("mono: no such process in /proc")

// Now returns CLOCK_MONOTONIC in nanoseconds. The clock cannot fail on
// Linux once the vDSO is mapped; should it, Now panics rather than hand
// out a timestamp that would make an invariant check lie.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("mono: clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}

// Seconds formats a monotonic reading relative to epoch as seconds.
func Seconds(t, epoch int64) string {
	return strconv.FormatFloat(time.Duration(t-epoch).Seconds(), 'f', 3, 64) + "s"
}

// StartTicks returns when process pid started, in clock ticks since boot
// (field 22 of /proc/<pid>/stat): with the pid it names one process for
// the life of the machine, although pids are reused.
func StartTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("%w: %d: %w", ErrProc, pid, err)
	}
	return parseStartTicks(b)
}

// parseStartTicks reads field 22 of a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may hold spaces and parentheses, so
// fields are counted after the last ')'.
func parseStartTicks(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: malformed stat line", ErrProc)
	}
	fields := bytes.Fields(stat[i+1:])
	// After the name: state is field 3, so start time (22) is index 19.
	if len(fields) < 20 {
		return 0, fmt.Errorf("%w: stat line with %d fields after the name", ErrProc, len(fields))
	}
	v, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: start time %q: %w", ErrProc, fields[19], err)
	}
	return v, nil
}

// Alive reports whether pid is a live process that started at ticks: one
// that exists, is not a zombie (a zombie holds no resources; it only waits
// to be reaped) and is not another process that reuses the pid. ticks 0
// skips the identity check.
func Alive(pid int, ticks uint64) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	switch b[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	if ticks == 0 {
		return true
	}
	got, err := parseStartTicks(b)
	return err == nil && got == ticks
}
