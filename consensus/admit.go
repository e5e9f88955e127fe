package consensus

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"pollux/consensus/state"
)

// RateError is a submission refused by its submitter's token bucket on
// the leader; it wraps ErrRateLimited.
type RateError struct {
	Accessor, Name string
	Rate           float64
	Burst          int
	// Wait is how long until the bucket admits a submission.
	Wait time.Duration
}

// retryMarker ends a RateError's text, followed by Wait: what a follower
// reads back from the leader's answer (RetryAfter).
const retryMarker = "; retry in "

func (e *RateError) Error() string {
	return fmt.Sprintf("%v: token %s (%s) submits faster than its quota of %v submissions per second (burst %d), over all servers (pollux acl quota)%s%v",
		ErrRateLimited, e.Accessor, e.Name, e.Rate, e.Burst, retryMarker, e.Wait)
}

func (e *RateError) Unwrap() error { return ErrRateLimited }

// RetryAfter is how long a submission refused with ErrRateLimited should
// wait, here or as the leader said it through forwarding; ok is false for
// any other error.
func RetryAfter(err error) (wait time.Duration, ok bool) {
	var re *RateError
	if errors.As(err, &re) {
		return re.Wait, true
	}
	if !errors.Is(err, ErrRateLimited) {
		return 0, false
	}
	msg := err.Error()
	i := strings.LastIndex(msg, retryMarker)
	if i < 0 {
		return 0, true
	}
	d, perr := time.ParseDuration(strings.TrimSpace(msg[i+len(retryMarker):]))
	if perr != nil || d < 0 {
		return 0, true
	}
	return d, true
}

// admit takes a token from the bucket of the submitter of b, an encoded
// command, if b is a submission that is not a retry of one that
// committed; past the bucket it refuses b with a RateError and one log
// line naming the submitter. Every other command, a server's own
// submission (no submitter) and an undecodable one (the state machine
// refuses it) pass.
func (s *Server) admit(b []byte, now time.Time) error {
	if !state.IsSubmission(b) {
		return nil
	}
	c, err := state.Decode(b)
	sub, ok := c.(*state.SubmitJob)
	if err != nil || !ok || sub.Submitter == "" {
		return nil
	}
	var (
		q      state.Quota
		name   string
		replay bool
	)
	s.fsm.Read(func(st *state.State) {
		q, replay = st.Quotas.Of(sub.Submitter), st.Replays(sub)
		if t, ok := st.ACL.Token(sub.Submitter); ok {
			name = t.Name
		}
	})
	if replay {
		return nil
	}
	wait := s.limits.Reserve(sub.Submitter, q.Rate, q.Burst, now)
	if wait == 0 {
		return nil
	}
	re := &RateError{Accessor: sub.Submitter, Name: name, Rate: q.Rate, Burst: q.Burst, Wait: max(wait.Round(time.Millisecond), time.Millisecond)}
	s.log.Warn("consensus: submission refused", "accessor", sub.Submitter, "token", name, "job", sub.ID,
		"rate", q.Rate, "burst", q.Burst, "retry_in", re.Wait.String(), "reason", "past the submitter's token bucket on the leader")
	return re
}
