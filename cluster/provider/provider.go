package provider

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Provider adds and removes named machines. Both calls must be
// idempotent: adding a machine that runs, or removing one that is gone,
// succeeds without doing anything. They may block (a boot delay, a slow
// command) until ctx ends.
type Provider interface {
	// Add makes a machine named name join the cluster as an agent of
	// that name.
	Add(ctx context.Context, name string) error
	// Remove stops the machine (its agent stops its workers first) and
	// releases it.
	Remove(ctx context.Context, name string) error
}

// Sentinel errors.
var (
	// ErrConfig is returned for an unusable provider configuration.
	ErrConfig = errors.New("provider: bad configuration")
	// ErrCommand is returned when an operator's command failed every
	// attempt.
	ErrCommand = errors.New("provider: command failed")
	// ErrTimeout is returned when a command or an agent's start did not
	// finish in time.
	ErrTimeout = errors.New("provider: timed out")
	// ErrAgent is returned when a local agent could not be started or
	// stopped.
	ErrAgent = errors.New("provider: agent")
)

// Retry runs op up to attempts times, waiting backoff, then twice as
// long, between failures, until one succeeds or ctx ends. It returns the
// last error.
func Retry(ctx context.Context, attempts int, backoff time.Duration, op func(ctx context.Context) error) error {
	var err error
	for i := range max(attempts, 1) {
		if err = op(ctx); err == nil {
			return nil
		}
		if i == max(attempts, 1)-1 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (and %w)", err, ctx.Err())
		case <-time.After(backoff << i):
		}
	}
	return err
}
