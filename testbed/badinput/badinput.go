package badinput

import (
	"errors"
	"fmt"
)

// marked is an error caused by bad input.
type marked struct{ error }

func (m marked) Unwrap() error { return m.error }

// Mark marks err as caused by bad input; its message is unchanged. Mark
// of nil is nil.
func Mark(err error) error {
	if err == nil {
		return nil
	}
	return marked{err}
}

// Errorf is fmt.Errorf marked as bad input.
func Errorf(format string, a ...any) error { return Mark(fmt.Errorf(format, a...)) }

// Is reports whether err, or an error it wraps, was marked as bad input.
func Is(err error) bool {
	var m marked
	return errors.As(err, &m)
}
