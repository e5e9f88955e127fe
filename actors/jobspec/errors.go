package jobspec

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrTooLarge is returned for a spec over MaxBytes.
	ErrTooLarge = errors.New("jobspec: spec too large")
	// ErrSyntax is returned for a spec that is not one YAML mapping of
	// known fields with values of the right types.
	ErrSyntax = errors.New("jobspec: bad spec syntax")
	// ErrInvalid is returned (inside a *FieldError) for a field whose
	// value is refused.
	ErrInvalid = errors.New("jobspec: invalid field")
)
