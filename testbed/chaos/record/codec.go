package record

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"pollux/internal/jsonin"
)

// Worker is one worker's file, decoded.
type Worker struct {
	// Node is the directory the file was in: the node it ran on.
	Node string
	// File is the file's path.
	File string
	// Records are its complete records, in order; the first is the start.
	Records []Record
	// Torn says the file ended in an incomplete line (dropped): the
	// worker was killed while writing it.
	Torn bool
}

// Start is the worker's start record.
func (w *Worker) Start() Record { return w.Records[0] }

// Find returns the worker's first record of kind k.
func (w *Worker) Find(k Kind) (Record, bool) {
	for _, r := range w.Records {
		if r.Kind == k {
			return r, true
		}
	}
	return Record{}, false
}

// Decode reads one worker's file from rd (name prefixes errors). The file
// must hold at least one complete record. The first must be a start, the
// others must carry the same identity, appear in time order, and nothing
// may follow an exit; at most one restore, done and exit. An incomplete
// last line (no newline) is dropped and reported as Torn.
func Decode(rd io.Reader, name string) (Worker, error) {
	w := Worker{File: name}
	br := bufio.NewReaderSize(rd, MaxLine)
	seen := map[Kind]bool{}
	for line := 1; ; line++ {
		b, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return w, fmt.Errorf("%w: %s:%d: line longer than %d bytes", ErrMalformed, name, line, MaxLine)
		case err == io.EOF && len(b) == 0:
			if len(w.Records) == 0 {
				return w, fmt.Errorf("%w: %s: no complete record", ErrMalformed, name)
			}
			return w, nil
		case err == io.EOF:
			if len(w.Records) == 0 {
				return w, fmt.Errorf("%w: %s: no complete record", ErrMalformed, name)
			}
			w.Torn = true
			return w, nil
		case err != nil:
			return w, fmt.Errorf("%w: %s:%d: %w", ErrIO, name, line, err)
		}
		r, err := decodeLine(b[:len(b)-1])
		if err != nil {
			return w, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if err := follows(w.Records, seen, r); err != nil {
			return w, fmt.Errorf("%w: %s:%d: %v", ErrMalformed, name, line, err)
		}
		seen[r.Kind] = true
		w.Records = append(w.Records, r)
	}
}

// follows checks that r may come after prev in one worker's file.
func follows(prev []Record, seen map[Kind]bool, r Record) error {
	if len(prev) == 0 {
		if r.Kind != Start {
			return fmt.Errorf("first record is %s, not start", r.Kind)
		}
		return nil
	}
	s, last := prev[0], prev[len(prev)-1]
	switch {
	case r.Job != s.Job || r.Inc != s.Inc || r.Rank != s.Rank || r.PID != s.PID:
		return fmt.Errorf("record of job %s incarnation %d rank %d pid %d in the file of job %s incarnation %d rank %d pid %d",
			r.Job, r.Inc, r.Rank, r.PID, s.Job, s.Inc, s.Rank, s.PID)
	case r.T < last.T:
		return fmt.Errorf("time %d before the previous record's %d", r.T, last.T)
	case r.Kind == Start:
		return errors.New("second start")
	case seen[Exit]:
		return fmt.Errorf("%s after the exit", r.Kind)
	case (r.Kind == Restore || r.Kind == Done) && seen[r.Kind]:
		return fmt.Errorf("second %s", r.Kind)
	}
	return nil
}

func decodeLine(b []byte) (Record, error) {
	var r Record
	if err := jsonin.Decode(b, &r); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return r, r.Validate()
}

// ReadRoot decodes every worker file of a run: root holds one directory
// per node, each holding *.jsonl files. Workers come sorted by node, then
// file name. A root without any file is not an error (nothing ran): the
// checker decides what an empty record means.
func ReadRoot(root string) ([]Worker, error) {
	nodes, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	var out []Worker
	for _, n := range nodes {
		if !n.IsDir() {
			return nil, fmt.Errorf("%w: %s is not a node directory", ErrMalformed, filepath.Join(root, n.Name()))
		}
		files, err := os.ReadDir(filepath.Join(root, n.Name()))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrIO, err)
		}
		for _, f := range files {
			path := filepath.Join(root, n.Name(), f.Name())
			if !f.IsDir() && strings.HasSuffix(f.Name(), ".jsonl"+TempSuffix) {
				continue // its worker died before its start record was complete
			}
			if f.IsDir() || !strings.HasSuffix(f.Name(), ".jsonl") {
				return nil, fmt.Errorf("%w: %s is not a record file", ErrMalformed, path)
			}
			w, err := readFile(path)
			if err != nil {
				return nil, err
			}
			w.Node = n.Name()
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b Worker) int { return strings.Compare(a.File, b.File) })
	return out, nil
}

func readFile(path string) (Worker, error) {
	f, err := os.Open(path)
	if err != nil {
		return Worker{}, fmt.Errorf("%w: %w", ErrIO, err)
	}
	defer f.Close()
	return Decode(f, path)
}
