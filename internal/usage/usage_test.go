package usage_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"pollux/internal/usage"
)

func TestWrap(t *testing.T) {
	inner := fmt.Errorf("agent: --data-dir: %w", fs.ErrPermission)
	tests := []struct {
		name     string
		err      error
		bad      bool
		message  string
		wrapsErr error
	}{
		{"marked", usage.Wrap(inner), true, inner.Error(), fs.ErrPermission},
		{"formatted", usage.Errorf("server: --retain %v", -1), true, "server: --retain -1", nil},
		{"marked then wrapped", fmt.Errorf("outer: %w", usage.Wrap(inner)), true, "outer: " + inner.Error(), fs.ErrPermission},
		{"not marked", inner, false, inner.Error(), fs.ErrPermission},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, usage.ErrBadSetting); got != tt.bad {
				t.Errorf("marked %v, want %v", got, tt.bad)
			}
			if tt.err.Error() != tt.message {
				t.Errorf("message %q, want %q", tt.err.Error(), tt.message)
			}
			if tt.wrapsErr != nil && !errors.Is(tt.err, tt.wrapsErr) {
				t.Errorf("%v does not wrap %v", tt.err, tt.wrapsErr)
			}
		})
	}
	if usage.Wrap(nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}

func ExampleWrap() {
	err := usage.Wrap(errors.New("server: --interval 0s must be positive"))
	fmt.Println(err, errors.Is(err, usage.ErrBadSetting))
	// Output: server: --interval 0s must be positive true
}
