package controlplane

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLapseCounterCountsWhatTheLogSays: every lapse the nodes log is
// counted, at warn and at error, also when the log shows only errors;
// other lines are not, and the log still gets exactly what its level
// lets through.
func TestLapseCounterCountsWhatTheLogSays(t *testing.T) {
	var out bytes.Buffer
	var n atomic.Int64
	log := slog.New(lapseCounter{next: slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelError}), n: &n}).With("node", "n0001")
	for _, l := range []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelError, "node: LEASE LAPSED: no renewal from the leader; workers paused"},
		{slog.LevelWarn, "node: LEASE LAPSED: no renewal from the leader; workers paused"},
		{slog.LevelWarn, "node: lease renewed: workers resumed"},
		{slog.LevelInfo, "node: LEASE LAPSED: at info, which the nodes never log"},
		{slog.LevelError, "node: refusing assignment"},
	} {
		log.Log(t.Context(), l.level, l.msg)
	}
	if got := n.Load(); got != 2 {
		t.Errorf("counted %d lapses, want 2 (the warn and the error)", got)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "LEASE LAPSED") || !strings.Contains(lines[1], "refusing assignment") ||
		!strings.Contains(lines[0], "node=n0001") {
		t.Errorf("the log got %q, want the two errors with their attributes", lines)
	}
}
