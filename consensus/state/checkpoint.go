package state

import (
	"fmt"
	"math"
	"time"
)

// Checkpoint is a checkpoint a job's workers saved: the incarnation
// whose workers saved it, the epoch and progress it holds, and when it
// was saved (the worker's clock, seconds since the Unix epoch). The zero
// value (Incarnation 0) is no checkpoint.
type Checkpoint struct {
	Incarnation uint64
	Epoch       int
	Progress    float64
	Time        float64
}

// IsZero reports whether c is no checkpoint.
func (c *Checkpoint) IsZero() bool { return *c == Checkpoint{} }

// after reports whether c is a later checkpoint than prev: of a newer
// incarnation, or of the same one saved later.
func (c *Checkpoint) after(prev *Checkpoint) bool {
	if c.Incarnation != prev.Incarnation {
		return c.Incarnation > prev.Incarnation
	}
	return c.Time > prev.Time
}

// validate checks a checkpoint of job ("" the zero value is fine).
func (c *Checkpoint) validate(job string) error {
	if c.IsZero() {
		return nil
	}
	if c.Incarnation == 0 {
		return invalid("job %q checkpoint of incarnation 0", job)
	}
	if c.Epoch < 0 {
		return invalid("job %q checkpoint at epoch %d", job, c.Epoch)
	}
	if err := checkNonNeg("checkpoint progress", c.Progress); err != nil {
		return err
	}
	return checkNonNeg("checkpoint time", c.Time)
}

func encodeCheckpoint(w *writer, c *Checkpoint) {
	w.uvarint(c.Incarnation)
	w.int(c.Epoch)
	w.f64(c.Progress)
	w.f64(c.Time)
}

func decodeCheckpoint(r *reader) Checkpoint {
	return Checkpoint{Incarnation: r.uvarint(), Epoch: r.int(), Progress: r.f64(), Time: r.f64()}
}

// roundCheckpoints lists the updates of a round whose measurements carry
// a checkpoint, by index.
func roundCheckpoints(us []RoundJob) []int {
	var out []int
	for i := range us {
		if us[i].HasMeas && !us[i].Meas.Checkpoint.IsZero() {
			out = append(out, i)
		}
	}
	return out
}

// encodeRoundCheckpoints writes the checkpoints of the updates at idx
// (a round's last block: each update's index, then its checkpoint).
func encodeRoundCheckpoints(w *writer, us []RoundJob, idx []int) {
	w.uvarint(uint64(len(idx)))
	for _, i := range idx {
		w.uvarint(uint64(i))
		encodeCheckpoint(w, &us[i].Meas.Checkpoint)
	}
}

// decodeRoundCheckpoints reads what encodeRoundCheckpoints wrote into
// the measurements of us.
func decodeRoundCheckpoints(r *reader, us []RoundJob) {
	n := r.length(maxList)
	if n == 0 {
		r.fail("round checkpoints encoded empty (they are left out instead)")
		return
	}
	prev := -1
	for k := 0; k < n && r.err == nil; k++ {
		i := r.uvarint()
		if r.err != nil {
			return
		}
		if i >= uint64(len(us)) || int(i) <= prev {
			r.fail("round checkpoint of update %d (of %d, after %d)", i, len(us), prev)
			return
		}
		prev = int(i)
		u := &us[i]
		if !u.HasMeas {
			r.fail("round checkpoint of job %q, whose update has no measurement", u.ID)
			return
		}
		if u.Meas.Checkpoint = decodeCheckpoint(r); r.err == nil && u.Meas.Checkpoint.IsZero() {
			r.fail("round checkpoint of job %q encoded empty (it is left out instead)", u.ID)
		}
	}
}

// noteCheckpoint records ck, carried by a measurement merged into j at
// time at, as j's last checkpoint if it is a later one than j's (and
// not of an incarnation j has not reached), with its event; the event
// replaces the one of j's last checkpoint if both are of the same
// incarnation.
func noteCheckpoint(s *State, j *Job, ck *Checkpoint, at float64) {
	if ck.IsZero() || ck.Incarnation > j.Incarnation || !ck.after(&j.Checkpoint) {
		return
	}
	if j.Checkpoint.Incarnation == ck.Incarnation {
		s.Events.dropCheckpointed(j.ID)
	}
	j.Checkpoint = *ck
	emit(s, EventCheckpointed, at, j.ID, "", checkpointReason(j, ck))
}

// checkpointReason describes checkpoint ck of job j: "checkpoint at
// epoch 12 of 40 (30 % done), progress 1234.5, incarnation 3, saved at
// 2026-12-06T07:41:02Z".
func checkpointReason(j *Job, ck *Checkpoint) string {
	epoch := fmt.Sprintf("epoch %d", ck.Epoch)
	if n := j.Spec.Epochs; n > 0 {
		epoch = fmt.Sprintf("epoch %d of %d (%.0f %% done)", ck.Epoch, n, math.Min(100, 100*float64(ck.Epoch)/float64(n)))
	}
	sec, frac := math.Modf(ck.Time)
	at := time.Unix(int64(sec), int64(frac*1e9)).UTC().Format(time.RFC3339)
	return fmt.Sprintf("checkpoint at %s, progress %.1f, incarnation %d, saved at %s", epoch, ck.Progress, ck.Incarnation, at)
}
