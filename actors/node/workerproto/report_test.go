package workerproto

import (
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

const good = `{"job":"j1","incarnation":3,"rank":0,"step_time":0.5,"sync_time":0.1,"grad_sqr":2,"grad_var":40,"epoch":1,"progress":120.5,"local_bsz":64,"accum_steps":1}`

func TestDecodeGood(t *testing.T) {
	r, err := Decode([]byte(good + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Report{Job: "j1", Incarnation: 3, StepTime: 0.5, SyncTime: 0.1, GradSqr: 2, GradVar: 40,
		Epoch: 1, Progress: 120.5, LocalBatch: 64, AccumSteps: 1}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
}

// TestDecodeCheckpoint: a report may carry the latest checkpoint its
// worker saved, and it survives an encoding.
func TestDecodeCheckpoint(t *testing.T) {
	r, err := Decode([]byte(ckpt(`{"epoch":1,"progress":120.5,"saved_at":1796000000.25}`)))
	if err != nil {
		t.Fatal(err)
	}
	want := SavedCheckpoint{Epoch: 1, Progress: 120.5, SavedAt: 1796000000.25}
	if r.Checkpoint != want {
		t.Fatalf("checkpoint %+v, want %+v", r.Checkpoint, want)
	}
	line, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := Decode(line); err != nil || back.Checkpoint != want {
		t.Fatalf("re-decoded %+v, %v", back, err)
	}
}

// ckpt is the good report with a checkpoint field of value v.
func ckpt(v string) string { return strings.Replace(good, `"rank":0`, `"rank":0,"checkpoint":`+v, 1) }

func TestDecodeRejects(t *testing.T) {
	sub := func(old, new string) string { return strings.Replace(good, old, new, 1) }
	tests := []struct {
		name, line, mention string
		want                error
	}{
		{"not json", "hello", "", ErrBadReport},
		{"array", "[1,2]", "", ErrBadReport},
		{"unknown field", sub(`"rank":0`, `"rank":0,"loss":1`), "loss", ErrBadReport},
		{"trailing", good + " {}", "trailing", ErrBadReport},
		{"nan string", sub(`"step_time":0.5`, `"step_time":"NaN"`), "step_time", ErrBadReport},
		{"huge number", sub(`"grad_var":40`, `"grad_var":1e400`), "", ErrBadReport},
		{"zero step", sub(`"step_time":0.5`, `"step_time":0`), "step_time", ErrBadReport},
		{"negative sync", sub(`"sync_time":0.1`, `"sync_time":-0.1`), "sync_time", ErrBadReport},
		{"sync above step", sub(`"sync_time":0.1`, `"sync_time":0.6`), "exceeds", ErrBadReport},
		{"negative grad", sub(`"grad_sqr":2`, `"grad_sqr":-2`), "grad_sqr", ErrBadReport},
		{"negative progress", sub(`"progress":120.5`, `"progress":-1`), "progress", ErrBadReport},
		{"negative epoch", sub(`"epoch":1`, `"epoch":-1`), "epoch", ErrBadReport},
		{"zero batch", sub(`"local_bsz":64`, `"local_bsz":0`), "local_bsz", ErrBadReport},
		{"negative accum", sub(`"accum_steps":1`, `"accum_steps":-1`), "accum_steps", ErrBadReport},
		{"negative rank", sub(`"rank":0`, `"rank":-1`), "rank", ErrBadReport},
		{"negative incarnation", sub(`"incarnation":3`, `"incarnation":-3`), "", ErrBadReport},
		{"bad job", sub(`"job":"j1"`, `"job":"../etc"`), "job", ErrBadReport},
		{"missing job", sub(`"job":"j1",`, ``), "job", ErrBadReport},
		{"huge token", sub(`"rank":0`, `"rank":0,"token":"`+strings.Repeat("t", MaxTokenBytes+1)+`"`), "token", ErrBadReport},
		{"token not a string", sub(`"rank":0`, `"rank":0,"token":7`), "token", ErrBadReport},
		{"checkpoint unknown field", ckpt(`{"epoch":1,"progress":2,"saved_at":3,"path":"/x"}`), "path", ErrBadReport},
		{"checkpoint negative epoch", ckpt(`{"epoch":-1,"progress":2,"saved_at":3}`), "checkpoint epoch", ErrBadReport},
		{"checkpoint negative progress", ckpt(`{"epoch":1,"progress":-2,"saved_at":3}`), "checkpoint progress", ErrBadReport},
		{"checkpoint without time", ckpt(`{"epoch":1,"progress":2}`), "saved_at", ErrBadReport},
		{"checkpoint not an object", ckpt(`7`), "checkpoint", ErrBadReport},
		{"too long", good[:len(good)-1] + `,"x":"` + strings.Repeat("a", MaxLineBytes) + `"}`, "", ErrLineTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.line))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

func TestEncodeRefusesNonFinite(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1} {
		r, _ := Decode([]byte(good))
		r.GradVar = v
		if _, err := Encode(r); !errors.Is(err, ErrBadReport) {
			t.Errorf("Encode with grad_var %v = %v, want ErrBadReport", v, err)
		}
	}
}

func TestReaderSkipsBadLines(t *testing.T) {
	in := good + "\n\n" + "garbage\n" + strings.Replace(good, `"epoch":1`, `"epoch":2`, 1) + "\n"
	rd := NewReader(strings.NewReader(in))
	var epochs []int
	var bad int
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, ErrBadReport) {
			bad++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		epochs = append(epochs, r.Epoch)
	}
	if bad != 1 || len(epochs) != 2 || epochs[0] != 1 || epochs[1] != 2 {
		t.Errorf("got epochs %v and %d bad lines, want [1 2] and 1", epochs, bad)
	}
}

func TestReaderEndsOnLongLine(t *testing.T) {
	rd := NewReader(strings.NewReader(strings.Repeat("x", 3*MaxLineBytes) + "\n" + good + "\n"))
	if _, err := rd.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("Next = %v, want ErrLineTooLong", err)
	}
}

// FuzzDecode checks that no line panics and that every accepted report
// survives an Encode/Decode round trip unchanged.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(strings.Replace(good, `"rank":0`, `"rank":0,"token":"abc","done":true`, 1)))
	f.Add([]byte(`{"job":"a","step_time":1e-300,"local_bsz":1}`))
	f.Add([]byte(`{"job":"a","step_time":-0,"local_bsz":1}`))
	f.Add([]byte(strings.Replace(good, `"rank":0`, `"rank":0,"checkpoint":{"epoch":1,"progress":120.5,"saved_at":1796000000.5}`, 1)))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := Decode(line)
		if err != nil {
			return
		}
		b, err := Encode(r)
		if err != nil {
			t.Fatalf("Encode of accepted %+v: %v", r, err)
		}
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode of %q: %v", b, err)
		}
		if again != r {
			t.Fatalf("round trip changed %+v into %+v", r, again)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	line := []byte(good)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(line); err != nil {
			b.Fatal(err)
		}
	}
}
