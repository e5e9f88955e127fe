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
	s, err := Open(Config{Dir: filepath.Join(t.TempDir(), "logs"), MaxBytes: max, Now: c.now})
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
	// However many incarnations follow, none is deleted before its job
	// is forgotten.
	for inc := uint64(3); inc <= 40; inc++ {
		w, _ := s.Create(Key{"j", inc, 0})
		w.Close()
	}
	for _, inc := range []uint64{1, 2, 40} {
		if _, err := s.Read(Key{"j", inc, 0}, 0, 0, 0); err != nil {
			t.Fatalf("incarnation %d of 40: %v", inc, err)
		}
	}
}

// TestForget: a job's logs go when it is forgotten (the cluster pruned
// it), all its incarnations and ranks, and nothing else; never while one
// of them is being written.
func TestForget(t *testing.T) {
	s := newStore(t, 0)
	for _, k := range []Key{{"done", 1, 0}, {"done", 2, 0}, {"done", 2, 1}, {"other", 1, 0}} {
		w, err := s.Create(k)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(w, "line of", k)
		w.Close()
	}
	open, _ := s.Create(Key{"live", 3, 0})
	fmt.Fprintln(open, "still running")
	if got := strings.Join(s.Jobs(), " "); got != "done live other" {
		t.Fatalf("jobs %q", got)
	}
	for _, tc := range []struct {
		name, job string
		err       error
		gone      []Key
		kept      []Key
	}{
		{"a finished job", "done", nil, []Key{{"done", 1, 0}, {"done", 2, 0}, {"done", 2, 1}}, []Key{{"other", 1, 0}, {"live", 3, 0}}},
		{"again", "done", nil, nil, []Key{{"other", 1, 0}}},
		{"a job never run here", "never", nil, nil, []Key{{"other", 1, 0}}},
		{"a log being written", "live", ErrBusy, nil, []Key{{"live", 3, 0}}},
		{"a bad name", "../other", ErrBadRequest, nil, []Key{{"other", 1, 0}}},
		{"an empty name", "", ErrBadRequest, nil, []Key{{"other", 1, 0}}},
	} {
		if err := s.Forget(tc.job); !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: Forget(%q) = %v, want %v", tc.name, tc.job, err, tc.err)
		}
		for _, k := range tc.gone {
			if _, err := s.Read(k, 0, 0, 0); !errors.Is(err, ErrNoLog) {
				t.Errorf("%s: %s still readable (%v)", tc.name, k, err)
			}
		}
		for _, k := range tc.kept {
			if c, err := s.Read(k, 0, 0, 0); err != nil || len(c.Lines) == 0 {
				t.Errorf("%s: %s lost: %+v %v", tc.name, k, c, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "done")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the forgotten job's directory: %v", err)
	}
	// Once its writer is closed, the live job's logs go too.
	open.Close()
	if err := s.Forget("live"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Jobs(), " "); got != "other" {
		t.Errorf("jobs after forgetting: %q", got)
	}
}

// TestTotalCap: starting a log that could take the store past MaxTotal
// deletes the incarnations written least recently first, never one
// being written, and only as many as it must.
func TestTotalCap(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)}
	s, err := Open(Config{Dir: filepath.Join(t.TempDir(), "logs"), MaxBytes: MinMaxBytes, MaxTotal: 2 * MinMaxBytes, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 1000)
	write := func(k Key, lines int, close bool, age time.Duration) *Writer {
		t.Helper()
		w, err := s.Create(k)
		if err != nil {
			t.Fatal(err)
		}
		for range lines {
			fmt.Fprintln(w, line)
		}
		if close {
			w.Close()
		}
		// Written age ago: the least recently written go first.
		at := time.Now().Add(-age)
		segs, _ := s.segments(k)
		for _, sg := range segs {
			if err := os.Chtimes(sg.path, at, at); err != nil {
				t.Fatal(err)
			}
		}
		return w
	}
	exists := func(k Key) bool {
		_, err := s.Read(k, 0, 0, 0)
		return err == nil
	}
	// About 29 KB each: a and b and a new log's cap (64 KiB) fit in 128 KiB.
	write(Key{"a", 1, 0}, 28, true, 5*time.Hour)
	write(Key{"b", 1, 0}, 28, true, 4*time.Hour)
	write(Key{"c", 1, 0}, 28, true, 3*time.Hour)
	if !exists(Key{"a", 1, 0}) || !exists(Key{"b", 1, 0}) || !exists(Key{"c", 1, 0}) {
		t.Fatal("a log deleted while the store had room")
	}
	// d needs room: the oldest, a, goes, and only a.
	d := write(Key{"d", 1, 0}, 28, false, 10*time.Hour)
	if exists(Key{"a", 1, 0}) || !exists(Key{"b", 1, 0}) || !exists(Key{"c", 1, 0}) {
		t.Fatalf("after d: a %v b %v c %v, want only a gone", exists(Key{"a", 1, 0}), exists(Key{"b", 1, 0}), exists(Key{"c", 1, 0}))
	}
	// e needs room: d is the least recently written but still open, so
	// b goes (and c, the next, only if it must: it need not).
	write(Key{"e", 1, 0}, 1, true, 0)
	if !exists(Key{"d", 1, 0}) || exists(Key{"b", 1, 0}) || !exists(Key{"c", 1, 0}) {
		t.Fatalf("after e: d %v b %v c %v, want d and c kept", exists(Key{"d", 1, 0}), exists(Key{"b", 1, 0}), exists(Key{"c", 1, 0}))
	}
	d.Close()
	if _, err := Open(Config{Dir: filepath.Join(t.TempDir(), "x"), MaxBytes: 2 * MinMaxBytes, MaxTotal: MinMaxBytes}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("a total cap under one log's: %v", err)
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
