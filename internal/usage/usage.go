package usage

import (
	"errors"
	"fmt"
)

// ErrBadSetting is what errors.Is finds in an error marked by Wrap.
var ErrBadSetting = errors.New("bad setting")

// Wrap marks err as caused by a bad setting; the message stays err's.
// Wrap(nil) is nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return bad{err}
}

// Errorf is Wrap(fmt.Errorf(format, args...)).
func Errorf(format string, args ...any) error { return bad{fmt.Errorf(format, args...)} }

// bad is an error marked by Wrap.
type bad struct{ err error }

func (e bad) Error() string   { return e.err.Error() }
func (e bad) Unwrap() []error { return []error{e.err, ErrBadSetting} }
