package workerlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/actors/pb"
)

// clock is a fixed clock that advances by a millisecond per reading.
type clock struct{ t time.Time }

func (c *clock) now() time.Time {
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func newStore(t *testing.T, max int64) *Store {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)}
	s, err := Open(Config{Dir: filepath.Join(t.TempDir(), "logs"), MaxBytes: max, Keep: 3, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func texts(ls []Line) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.Text)
	}
	return out
}

func TestWriteRead(t *testing.T) {
	long := strings.Repeat("x", MaxLine+5)
	for _, tc := range []struct {
		name   string
		writes []string
		close  bool
		tail   int
		want   []string
	}{
		{"lines", []string{"a\nb\n"}, false, 0, []string{"a", "b"}},
		{"split writes", []string{"he", "llo\nwor", "ld\n"}, false, 0, []string{"hello", "world"}},
		{"partial kept until close", []string{"a\nb"}, false, 0, []string{"a"}},
		{"partial written at close", []string{"a\nb"}, true, 0, []string{"a", "b"}},
		{"empty lines", []string{"\n\n"}, false, 0, []string{"", ""}},
		{"long line split", []string{long + "\n"}, false, 0, []string{long[:MaxLine], long[MaxLine:]}},
		{"tail", []string{"1\n2\n3\n4\n"}, false, 2, []string{"3", "4"}},
		{"tail beyond", []string{"1\n2\n"}, false, 10, []string{"1", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, 0)
			k := Key{"job-1", 1, 0}
			w, err := s.Create(k)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.writes {
				if _, err := w.Write([]byte(p)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.close {
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			}
			c, err := s.Read(k, 0, tc.tail, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := texts(c.Lines); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("lines %q, want %q", got, tc.want)
			}
			if c.Closed != tc.close {
				t.Fatalf("closed %v, want %v", c.Closed, tc.close)
			}
			// Reading on from Next gives nothing new.
			if c2, err := s.Read(k, c.Next, 0, 0); err != nil || len(c2.Lines) != 0 || c2.Next != c.Next {
				t.Fatalf("read from next: %+v, %v", c2, err)
			}
		})
	}
}

func TestFollowSeesNewLine(t *testing.T) {
	s := newStore(t, 0)
	k := Key{"job", 2, 1}
	w, _ := s.Create(k)
	fmt.Fprintln(w, "first")
	c, err := s.Read(k, 0, 0, 0)
	if err != nil || len(c.Lines) != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	fmt.Fprintln(w, "second")
	c2, err := s.Read(k, c.Next, 0, 0)
	if err != nil || len(c2.Lines) != 1 || c2.Lines[0].Text != "second" || c2.Closed {
		t.Fatalf("%+v %v", c2, err)
	}
	if !c2.Lines[0].Time.After(c.Lines[0].Time) {
		t.Fatalf("times %v, %v", c.Lines[0].Time, c2.Lines[0].Time)
	}
}

func TestRotationCapsDisk(t *testing.T) {
	const max = 4 * MaxLine
	s := newStore(t, max)
	k := Key{"chatty", 1, 0}
	w, _ := s.Create(k)
	line := strings.Repeat("y", 100)
	for i := range 5000 {
		fmt.Fprintf(w, "%05d %s\n", i, line)
	}
	var total int64
	files, _ := filepath.Glob(filepath.Join(s.Dir(), "chatty", "1", "*"))
	for _, f := range files {
		st, _ := os.Stat(f)
		total += st.Size()
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", f, st.Mode().Perm())
		}
	}
	if total > max || len(files) > 2 {
		t.Fatalf("%d bytes in %d files, cap %d", total, len(files), max)
	}
	c, err := s.Read(k, 0, 0, 0)
	if err != nil || c.Skipped == 0 {
		t.Fatalf("skipped %d, %v", c.Skipped, err)
	}
	// The newest line is kept.
	c, err = s.Read(k, 0, 1, 0)
	if err != nil || len(c.Lines) != 1 || !strings.HasPrefix(c.Lines[0].Text, "04999 ") {
		t.Fatalf("tail %+v %v", texts(c.Lines), err)
	}
	// Reading from the oldest kept to the end passes segment borders
	// without a gap.
	off, n, prev := int64(0), 0, -1
	for {
		c, err := s.Read(k, off, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range c.Lines {
			var i int
			fmt.Sscanf(l.Text, "%d", &i)
			if prev >= 0 && i != prev+1 {
				t.Fatalf("line %d after %d", i, prev)
			}
			prev, n = i, n+1
		}
		if c.Next == off {
			break
		}
		off = c.Next
	}
	if prev != 4999 || n < 10 {
		t.Fatalf("read %d lines up to %d", n, prev)
	}
}

func TestEarlierIncarnationKept(t *testing.T) {
	s := newStore(t, 0)
	w1, _ := s.Create(Key{"j", 1, 0})
	fmt.Fprintln(w1, "inc one")
	w1.Close()
	w2, _ := s.Create(Key{"j", 2, 0})
	fmt.Fprintln(w2, "inc two")
	c, err := s.Read(Key{"j", 1, 0}, 0, 0, 0)
	if err != nil || texts(c.Lines)[0] != "inc one" || !c.Closed {
		t.Fatalf("%+v %v", c, err)
	}
	c, err = s.Read(Key{"j", 0, 0}, 0, 0, 0)
	if err != nil || c.Incarnation != 2 || texts(c.Lines)[0] != "inc two" || c.Closed {
		t.Fatalf("newest: %+v %v", c, err)
	}
	// Keep is 3: a fifth incarnation prunes the first two.
	for inc := uint64(3); inc <= 5; inc++ {
		w, _ := s.Create(Key{"j", inc, 0})
		w.Close()
	}
	if _, err := s.Read(Key{"j", 1, 0}, 0, 0, 0); !errors.Is(err, ErrNoLog) {
		t.Fatalf("incarnation 1 after pruning: %v", err)
	}
	// Incarnation 2's writer is open: never pruned under it.
	if _, err := s.Read(Key{"j", 2, 0}, 0, 0, 0); err != nil {
		t.Fatalf("open incarnation 2 pruned: %v", err)
	}
}

func TestPermissions(t *testing.T) {
	s := newStore(t, 0)
	w, _ := s.Create(Key{"perm", 1, 0})
	fmt.Fprintln(w, "secret")
	for _, d := range []string{s.Dir(), filepath.Join(s.Dir(), "perm"), filepath.Join(s.Dir(), "perm", "1")} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", d, st.Mode().Perm(), err)
		}
	}
}

func TestBadRequests(t *testing.T) {
	s := newStore(t, 0)
	for _, tc := range []struct {
		name   string
		k      Key
		off    int64
		tail   int
		create bool
		want   error
	}{
		{"path in job", Key{"../x", 1, 0}, 0, 0, false, ErrBadRequest},
		{"empty job", Key{"", 1, 0}, 0, 0, false, ErrBadRequest},
		{"negative rank", Key{"j", 1, -1}, 0, 0, false, ErrBadRequest},
		{"negative offset", Key{"j", 1, 0}, -1, 0, false, ErrBadRequest},
		{"huge tail", Key{"j", 1, 0}, 0, MaxTail + 1, false, ErrBadRequest},
		{"no log", Key{"j", 1, 0}, 0, 0, false, ErrNoLog},
		{"create incarnation 0", Key{"j", 0, 0}, 0, 0, true, ErrBadRequest},
		{"create path", Key{"a/b", 1, 0}, 0, 0, true, ErrBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.create {
				_, err = s.Create(tc.k)
			} else {
				_, err = s.Read(tc.k, tc.off, tc.tail, 0)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAnswer(t *testing.T) {
	s := newStore(t, 0)
	w, _ := s.Create(Key{"a", 1, 3})
	w.Write([]byte("ok\xff\n"))
	got := Answer("n1", s, &pb.LogRead{Job: "a", Rank: 3})
	if !got.Found || got.Incarnation != 1 || len(got.Lines) != 1 || got.Lines[0].Text != "ok\uFFFD" || got.Node != "n1" {
		t.Fatalf("%v", got)
	}
	if got := Answer("n1", s, &pb.LogRead{Job: "a", Rank: 4}); got.Found || got.Error != "" {
		t.Fatalf("missing rank: %v", got)
	}
	if got := Answer("n1", s, &pb.LogRead{Job: "../a"}); got.Error == "" {
		t.Fatalf("bad job: %v", got)
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add([]byte("2026-12-06T01:00:00.001Z hello"))
	f.Add([]byte("not a time"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, rec []byte) {
		// Any bytes decode; a record the store makes decodes to its line.
		_ = ParseRecord(rec)
		if bytes.IndexByte(rec, '\n') >= 0 {
			return
		}
		at := time.Unix(0, int64(len(rec))*1e9+7).UTC()
		r := appendRecord(nil, at, rec)
		if l := ParseRecord(r[:len(r)-1]); !l.Time.Equal(at) || l.Text != string(rec) {
			t.Fatalf("%q -> %v %q", rec, l.Time, l.Text)
		}
	})
}
