package history

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Clock reads the time since a history's epoch.
type Clock interface{ Now() time.Duration }

// Monotonic is the harness clock: CLOCK_MONOTONIC minus Epoch. On Linux
// CLOCK_MONOTONIC is one system-wide clock (time since boot, not stepped
// by NTP or by setting the date), so every process on the machine that
// reads it with the same Epoch gets timestamps comparable with every
// other's: an event recorded after another, in real time, never carries
// an earlier timestamp.
type Monotonic struct {
	// Epoch is the CLOCK_MONOTONIC reading the history counts from.
	Epoch time.Duration
}

// ReadMonotonic returns the current CLOCK_MONOTONIC reading.
func ReadMonotonic() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("history: clock_gettime(CLOCK_MONOTONIC): %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// NewEpoch returns a Monotonic clock whose epoch is now: the harness calls
// it once per run and hands the epoch to its children (see Env).
func NewEpoch() (Monotonic, error) {
	now, err := ReadMonotonic()
	return Monotonic{Epoch: now}, err
}

// Now returns the time since the epoch. CLOCK_MONOTONIC cannot fail once
// ReadMonotonic has succeeded (NewEpoch and FromEnv read it first), so a
// failed read is reported as the epoch itself.
func (m Monotonic) Now() time.Duration {
	now, err := ReadMonotonic()
	if err != nil {
		return 0
	}
	return now - m.Epoch
}

// The environment through which the harness hands the history to the
// processes it starts.
const (
	// EnvFile is the path of the history file to append to.
	EnvFile = "POLLUX_HISTORY_FILE"
	// EnvEpoch is the epoch, in nanoseconds of CLOCK_MONOTONIC (decimal).
	EnvEpoch = "POLLUX_HISTORY_EPOCH"
)

// Env returns the environment entries ("NAME=value") that make FromEnv in
// a child open the history file at path with this clock's epoch.
func (m Monotonic) Env(path string) []string {
	return []string{EnvFile + "=" + path, EnvEpoch + "=" + strconv.FormatInt(int64(m.Epoch), 10)}
}

// FromEnv opens the history named by the environment for recorder src
// ("server/s1", "agent/n2"), with a Monotonic clock at the given epoch.
// Without EnvFile it returns a nil Recorder and no error: recording is
// then a no-op, so components record unconditionally.
func FromEnv(src string) (*Recorder, error) {
	path := os.Getenv(EnvFile)
	if path == "" {
		return nil, nil
	}
	epoch, err := strconv.ParseInt(os.Getenv(EnvEpoch), 10, 64)
	if err != nil || epoch < 0 {
		return nil, fmt.Errorf("%w: %s=%q is not a CLOCK_MONOTONIC reading in nanoseconds", ErrEnv, EnvEpoch, os.Getenv(EnvEpoch))
	}
	if _, err := ReadMonotonic(); err != nil {
		return nil, err
	}
	return Open(path, src, Monotonic{Epoch: time.Duration(epoch)})
}
