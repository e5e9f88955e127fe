package consensus

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger returns an hclog.Logger for Raft that forwards every
// message at or above level to l, with its fields as attributes.
func newHCLogger(l *slog.Logger, level slog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "raft",
		Level:      hcLevel(level),
		JSONFormat: true,
		Output:     slogWriter{l},
	})
}

func hcLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	}
	return hclog.Error
}

// slogWriter receives hclog's JSON lines.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			w.l.Warn(line)
			continue
		}
		level := slog.LevelInfo
		switch m["@level"] {
		case "trace", "debug":
			level = slog.LevelDebug
		case "warn":
			level = slog.LevelWarn
		case "error":
			level = slog.LevelError
		}
		msg, _ := m["@message"].(string)
		attrs := make([]any, 0, 2*len(m))
		for k, v := range m {
			if !strings.HasPrefix(k, "@") {
				attrs = append(attrs, k, v)
			}
		}
		w.l.Log(context.Background(), level, "raft: "+msg, attrs...)
	}
	return len(p), nil
}
