package fedlab

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestLogLinesAndLineTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	log := `time=2024-05-01T10:00:00.5Z level=INFO msg="federation: lease" op=reclaim reason=need
time=2024-05-01T10:00:01Z level=INFO msg="federation: lease" op=grant
time=bad level=INFO msg="federation: lease" op=reclaim reason=rebalance
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		subs []string
		want int
	}{
		{[]string{"federation: lease"}, 3},
		{[]string{"op=reclaim"}, 2},
		{[]string{"op=reclaim", "reason=need"}, 1},
		{[]string{"no such"}, 0},
	} {
		if got := LogLines(path, tc.subs...); len(got) != tc.want {
			t.Errorf("LogLines(%q) = %d lines, want %d", tc.subs, len(got), tc.want)
		}
	}
	if got := LogLines(filepath.Join(t.TempDir(), "absent.log"), "x"); len(got) != 0 {
		t.Errorf("an absent log has lines %q", got)
	}
	lines := LogLines(path, "federation: lease")
	at, ok := LineTime(lines[0])
	if want := time.Date(2024, 5, 1, 10, 0, 0, 5e8, time.UTC); !ok || !at.Equal(want) {
		t.Errorf("LineTime = %v, %v; want %v", at, ok, want)
	}
	if _, ok := LineTime(lines[2]); ok {
		t.Error("a bad time= field parsed")
	}
	if slices.Contains(lines, "") {
		t.Error("an empty line matched")
	}
}
