package fedlab

import (
	"os"
	"strings"
	"time"

	"pollux/internal/logbuf"
)

// LogLines are the lines of the log file at path that contain every one
// of subs.
func LogLines(path string, subs ...string) []string {
	b, _ := os.ReadFile(path)
	return logbuf.Matching(string(b), subs...)
}

// LineTime is the time= field of a log line.
func LineTime(line string) (time.Time, bool) {
	_, rest, _ := strings.Cut(line, "time=")
	ts, _, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339Nano, ts)
	return at, err == nil
}
