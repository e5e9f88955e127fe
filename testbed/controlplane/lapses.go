package controlplane

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
)

// lapseMark is in the line a node logs when its lease lapses and it
// pauses its workers (actors/node/lease.go), the line an operator
// greps for.
const lapseMark = "LEASE LAPSED"

// lapseCounter passes the nodes' log records on to next and counts
// those that say a lease lapsed, whatever next's level: the bench reads
// the lapses from the nodes' log as an operator would.
type lapseCounter struct {
	next slog.Handler
	n    *atomic.Int64
}

// Enabled implements slog.Handler: a lapse is logged at warn (no worker
// to pause) or error.
func (h lapseCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h lapseCounter) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, lapseMark) {
		h.n.Add(1)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h lapseCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return lapseCounter{next: h.next.WithAttrs(as), n: h.n}
}

// WithGroup implements slog.Handler.
func (h lapseCounter) WithGroup(name string) slog.Handler {
	return lapseCounter{next: h.next.WithGroup(name), n: h.n}
}
