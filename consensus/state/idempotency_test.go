package state

import (
	"bytes"
	"errors"
	"testing"
)

// TestIdempotentRetries applies a keyed request twice, as a client that
// retries on another server after the first attempt committed does: the
// retry must be a no-op, and only the retry (same key, same submitter).
func TestIdempotentRetries(t *testing.T) {
	submit := func(id, by, key string) *SubmitJob {
		return &SubmitJob{ID: id, Spec: ownedSpec(""), SubmitTime: 9, Submitter: by, Owned: true, Key: key}
	}
	tests := []struct {
		name  string
		first Command
		again Command
		want  error // of again
	}{
		{name: "submit retried", first: submit("k1", "acc-alice", "key-1"), again: submit("k1", "acc-alice", "key-1")},
		{name: "submit with another key", first: submit("k1", "acc-alice", "key-1"), again: submit("k1", "acc-alice", "key-2"), want: ErrJobExists},
		{name: "submit without a key", first: submit("k1", "acc-alice", "key-1"), again: submit("k1", "acc-alice", ""), want: ErrJobExists},
		{name: "unkeyed submit twice", first: submit("k1", "acc-alice", ""), again: submit("k1", "acc-alice", ""), want: ErrJobExists},
		{name: "another submitter's same key", first: submit("k1", "acc-alice", "key-1"), again: submit("k1", "acc-bob", "key-1"), want: ErrJobExists},
		{name: "cancel retried", first: &CancelJob{ID: "alices", By: "acc-alice", Time: 9, Key: "c-1"},
			again: &CancelJob{ID: "alices", By: "acc-alice", Time: 10, Key: "c-1"}},
		{name: "cancel with another key", first: &CancelJob{ID: "alices", By: "acc-alice", Time: 9, Key: "c-1"},
			again: &CancelJob{ID: "alices", By: "acc-alice", Time: 10, Key: "c-2"}, want: ErrJobFinished},
		{name: "cancel without a key", first: &CancelJob{ID: "alices", By: "acc-alice", Time: 9, Key: "c-1"},
			again: &CancelJob{ID: "alices", By: "acc-alice", Time: 10}, want: ErrJobFinished},
		{name: "unkeyed cancel twice", first: &CancelJob{ID: "alices", By: "acc-alice", Time: 9},
			again: &CancelJob{ID: "alices", By: "acc-alice", Time: 10}, want: ErrJobFinished},
		{name: "cancel key of a completed job", first: &FinishJob{ID: "alices", State: Completed, Time: 9},
			again: &CancelJob{ID: "alices", By: "acc-alice", Time: 10, Key: "c-1"}, want: ErrJobFinished},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := aclFSM(t)
			a.must(t, 1, tt.first)
			before := EncodeState(a.state())
			err := a.apply(t, 1, tt.again)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if !bytes.Equal(before, EncodeState(a.state())) {
				t.Fatal("the second request changed the state")
			}
		})
	}
}

// TestIdempotencyKeysRecorded checks the job records both keys, through a
// snapshot, and that the keys round-trip through the command encoding.
func TestIdempotencyKeysRecorded(t *testing.T) {
	a := aclFSM(t)
	sub := &SubmitJob{ID: "k1", Spec: ownedSpec(""), SubmitTime: 9, Submitter: "acc-alice", Owned: true, Key: "key-1"}
	can := &CancelJob{ID: "k1", By: "acc-alice", Time: 10, Key: "c-1"}
	a.must(t, 1, sub, can)
	s, err := DecodeState(EncodeState(a.state()))
	if err != nil {
		t.Fatal(err)
	}
	if j := s.Jobs["k1"]; j.SubmitKey != "key-1" || j.CancelKey != "c-1" {
		t.Fatalf("job %+v", j)
	}
	for _, c := range []Command{sub, can} {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if b2, _ := Encode(d); !bytes.Equal(b, b2) {
			t.Errorf("%T does not round-trip: %+v", c, d)
		}
	}
	// Unkeyed commands keep their old encoding: the key is left out.
	old := &CancelJob{ID: "k1", By: "acc-alice", Time: 10}
	b1, _ := Encode(old)
	b2, _ := Encode(can)
	if !bytes.Equal(b1, b2[:len(b1)]) || len(b2) != len(b1)+1+len("c-1") {
		t.Errorf("keyed cancel %x, unkeyed %x", b2, b1)
	}
	for _, bad := range []Command{
		&SubmitJob{ID: "k2", Spec: testSpec(), SubmitTime: 9, Key: "key-1"},
		&SubmitJob{ID: "k2", Spec: ownedSpec(""), SubmitTime: 9, Owned: true, Key: "a key"},
		&CancelJob{ID: "k1", Key: "a\x00key"},
	} {
		if _, err := Encode(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}
