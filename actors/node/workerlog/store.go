package workerlog

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"pollux/actors/jobspec"
)

// Defaults of a Store.
const (
	// DefaultMaxBytes is the disk one worker's log may take: two
	// segments of half of it each.
	DefaultMaxBytes = 16 << 20
	// DefaultMaxTotal is the disk all the store's logs may take before
	// starting a log deletes the least recently written ones.
	DefaultMaxTotal = 1 << 30
	// MaxLine is the longest line kept whole; a longer one is split.
	MaxLine = 16 << 10
	// MinMaxBytes is the smallest cap: each half holds the longest
	// record.
	MinMaxBytes = 4 * MaxLine
	// DefaultReadBytes bounds one Read's answer (see Read's max).
	DefaultReadBytes = 256 << 10
	// MaxTail bounds the lines a Read's tail may ask for.
	MaxTail = 100000
)

// Errors of the store, in one block.
var (
	// ErrNoLog: the store has no log of that worker.
	ErrNoLog = errors.New("workerlog: no such log")
	// ErrBadRequest: a job name, rank or offset that names no log.
	ErrBadRequest = errors.New("workerlog: bad request")
	// ErrClosed: a write to a closed Writer.
	ErrClosed = errors.New("workerlog: writer closed")
	// ErrBusy: a job's log is still being written.
	ErrBusy = errors.New("workerlog: log still being written")
)

// Config configures a Store.
type Config struct {
	// Dir is the store's directory, made mode 0700 if missing.
	Dir string
	// MaxBytes caps each worker's log on disk (default DefaultMaxBytes):
	// when the newest segment reaches half of it, the older segment is
	// deleted and a new one started.
	MaxBytes int64
	// MaxTotal caps the disk of all the logs (default DefaultMaxTotal,
	// at least MaxBytes): starting a log that could pass it deletes the
	// incarnations written least recently first (never one still being
	// written). Logs are otherwise kept until their job is forgotten
	// (Forget: the cluster pruned it).
	MaxTotal int64
	// Now stamps lines (default time.Now).
	Now func() time.Time
}

// Store keeps workers' logs under one directory:
// DIR/JOB/INCARNATION/rank-R.BASE.log, where BASE is the byte offset of
// the segment's first record in the worker's whole log. Directories are
// mode 0700 and files 0600, owned by the agent: workers never get a
// descriptor of their log, only a pipe the agent reads.
type Store struct {
	cfg Config

	mu   sync.Mutex
	open map[Key]*Writer
}

// Key names one worker's log.
type Key struct {
	Job         string
	Incarnation uint64
	Rank        int
}

func (k Key) String() string {
	return fmt.Sprintf("job %s incarnation %d rank %d", k.Job, k.Incarnation, k.Rank)
}

func (k Key) check() error {
	if err := jobspec.CheckName(k.Job); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if k.Rank < 0 {
		return fmt.Errorf("%w: rank %d", ErrBadRequest, k.Rank)
	}
	return nil
}

// Open opens (making it if needed) the store of cfg.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: no directory", ErrBadRequest)
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxBytes < MinMaxBytes {
		return nil, fmt.Errorf("%w: a cap of %d bytes (want at least %d)", ErrBadRequest, cfg.MaxBytes, MinMaxBytes)
	}
	if cfg.MaxTotal <= 0 {
		cfg.MaxTotal = DefaultMaxTotal
	}
	if cfg.MaxTotal < cfg.MaxBytes {
		return nil, fmt.Errorf("%w: a total cap of %d bytes under the cap of one log (%d)", ErrBadRequest, cfg.MaxTotal, cfg.MaxBytes)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("workerlog: %w", err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("workerlog: %w", err)
	}
	return &Store{cfg: cfg, open: map[Key]*Writer{}}, nil
}

// MaxBytes is the cap of each worker's log.
func (s *Store) MaxBytes() int64 { return s.cfg.MaxBytes }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.cfg.Dir }

func (s *Store) incDir(job string, inc uint64) string {
	return filepath.Join(s.cfg.Dir, job, strconv.FormatUint(inc, 10))
}

// Create starts the log of one worker (appending to it if it exists: a
// worker restarted under the same incarnation), first deleting the logs
// written least recently while the store could pass MaxTotal.
func (s *Store) Create(k Key) (*Writer, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	if k.Incarnation == 0 {
		return nil, fmt.Errorf("%w: incarnation 0", ErrBadRequest)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.makeRoom(k)
	if err := s.mkdir(k); err != nil {
		return nil, err
	}
	segs, err := s.segments(k)
	if err != nil {
		return nil, err
	}
	w := &Writer{s: s, key: k}
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		w.base, w.size = last.base, last.size
	}
	if w.f, err = os.OpenFile(segPath(s.incDir(k.Job, k.Incarnation), k.Rank, w.base), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
		return nil, fmt.Errorf("workerlog: %w", err)
	}
	s.open[k] = w
	return w, nil
}

// mkdir makes the job's and the incarnation's directories (0700).
func (s *Store) mkdir(k Key) error {
	for _, d := range []string{filepath.Join(s.cfg.Dir, k.Job), s.incDir(k.Job, k.Incarnation)} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("workerlog: %w", err)
		}
	}
	return nil
}

// incLog is one incarnation's logs on disk: their bytes and when they
// were last written.
type incLog struct {
	job   string
	inc   uint64
	bytes int64
	last  time.Time
}

// usage lists every incarnation's logs. s.mu is held.
func (s *Store) usage() []incLog {
	var out []incLog
	for _, job := range s.jobs() {
		for _, inc := range s.incarnations(job) {
			l := incLog{job: job, inc: inc}
			ents, _ := os.ReadDir(s.incDir(job, inc))
			for _, e := range ents {
				if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
					l.bytes += info.Size()
					if info.ModTime().After(l.last) {
						l.last = info.ModTime()
					}
				}
			}
			out = append(out, l)
		}
	}
	return out
}

// makeRoom deletes the incarnations written least recently, but none
// with an open writer nor k's own, while the logs and a new one of the
// full cap would pass MaxTotal. s.mu is held.
func (s *Store) makeRoom(k Key) {
	logs := s.usage()
	var total int64
	for _, l := range logs {
		total += l.bytes
	}
	if total+s.cfg.MaxBytes <= s.cfg.MaxTotal {
		return
	}
	busy := map[string]bool{filepath.Join(k.Job, strconv.FormatUint(k.Incarnation, 10)): true}
	for ok := range s.open {
		busy[filepath.Join(ok.Job, strconv.FormatUint(ok.Incarnation, 10))] = true
	}
	slices.SortFunc(logs, func(x, y incLog) int { return x.last.Compare(y.last) })
	for _, l := range logs {
		if total+s.cfg.MaxBytes <= s.cfg.MaxTotal {
			return
		}
		if busy[filepath.Join(l.job, strconv.FormatUint(l.inc, 10))] {
			continue
		}
		if os.RemoveAll(s.incDir(l.job, l.inc)) == nil {
			total -= l.bytes
			_ = os.Remove(filepath.Join(s.cfg.Dir, l.job)) // the job's directory, if that was its last incarnation
		}
	}
}

// Jobs lists the jobs the store holds logs of, sorted.
func (s *Store) Jobs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs()
}

// jobs lists the job directories, sorted.
func (s *Store) jobs() []string {
	ents, _ := os.ReadDir(s.cfg.Dir)
	var out []string
	for _, e := range ents {
		if e.IsDir() && jobspec.CheckName(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// Forget deletes every log of job (the cluster pruned it): ErrBusy,
// deleting nothing, while one of them is still being written.
func (s *Store) Forget(job string) error {
	if err := (Key{Job: job}).check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.open {
		if k.Job == job {
			return fmt.Errorf("%w: %s", ErrBusy, k)
		}
	}
	if err := os.RemoveAll(filepath.Join(s.cfg.Dir, job)); err != nil {
		return fmt.Errorf("workerlog: %w", err)
	}
	return nil
}

// incarnations lists the job's incarnations with a directory, oldest
// first.
func (s *Store) incarnations(job string) []uint64 {
	ents, _ := os.ReadDir(filepath.Join(s.cfg.Dir, job))
	var out []uint64
	for _, e := range ents {
		if n, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && n > 0 && e.IsDir() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// segment is one file of a worker's log.
type segment struct {
	path       string
	base, size int64
}

func segPath(dir string, rank int, base int64) string {
	return filepath.Join(dir, fmt.Sprintf("rank-%d.%d.log", rank, base))
}

// segments lists the worker's segments, oldest first.
func (s *Store) segments(k Key) ([]segment, error) {
	dir := s.incDir(k.Job, k.Incarnation)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workerlog: %w", err)
	}
	prefix := fmt.Sprintf("rank-%d.", k.Rank)
	var out []segment
	for _, e := range ents {
		name, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		b, ok := strings.CutSuffix(name, ".log")
		base, err := strconv.ParseInt(b, 10, 64)
		if !ok || err != nil || base < 0 || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, segment{path: filepath.Join(dir, e.Name()), base: base, size: info.Size()})
	}
	slices.SortFunc(out, func(x, y segment) int { return cmp.Compare(x.base, y.base) })
	return out, nil
}

// Writer is one worker's log, written by the agent from the worker's
// stdout and stderr: each line is stamped with the time it was read
// and kept as one record; a line longer than MaxLine is split. Safe
// for concurrent use.
type Writer struct {
	s   *Store
	key Key

	mu         sync.Mutex
	f          *os.File
	base, size int64 // the current segment's offset and size
	partial    []byte
	closed     bool
}

// Write records p's complete lines and keeps a partial last line for
// the next Write (or Close).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			for len(w.partial) >= MaxLine {
				if err := w.record(w.partial[:MaxLine]); err != nil {
					return n, err
				}
				w.partial = append(w.partial[:0], w.partial[MaxLine:]...)
			}
			break
		}
		line := p[:i]
		if len(w.partial) > 0 {
			line = append(w.partial, line...)
		}
		for len(line) > MaxLine {
			if err := w.record(line[:MaxLine]); err != nil {
				return n, err
			}
			line = line[MaxLine:]
		}
		if err := w.record(line); err != nil {
			return n, err
		}
		w.partial = w.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

// record writes one line as a record, rotating first if the segment
// would pass half the cap. w.mu is held.
func (w *Writer) record(line []byte) error {
	rec := appendRecord(nil, w.s.cfg.Now(), line)
	if w.size > 0 && w.size+int64(len(rec)) > w.s.cfg.MaxBytes/2 {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	if _, err := w.f.Write(rec); err != nil {
		return fmt.Errorf("workerlog: %w", err)
	}
	w.size += int64(len(rec))
	return nil
}

// rotate starts a new segment and deletes all but the one before it.
func (w *Writer) rotate() error {
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("workerlog: %w", err)
	}
	w.base, w.size = w.base+w.size, 0
	f, err := os.OpenFile(segPath(w.s.incDir(w.key.Job, w.key.Incarnation), w.key.Rank, w.base), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("workerlog: %w", err)
	}
	w.f = f
	segs, _ := w.s.segments(w.key)
	for _, sg := range segs[:max(0, len(segs)-2)] {
		_ = os.Remove(sg.path)
	}
	return nil
}

// Close records a partial last line and closes the log: Read then says
// Closed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	var err error
	if len(w.partial) > 0 {
		err = w.record(w.partial)
	}
	w.closed = true
	err = errors.Join(err, w.f.Close())
	w.s.mu.Lock()
	if w.s.open[w.key] == w {
		delete(w.s.open, w.key)
	}
	w.s.mu.Unlock()
	return err
}

// appendRecord appends the record of line read at t: the time in
// RFC 3339 with nanoseconds (UTC), a space, the line, a newline.
func appendRecord(b []byte, t time.Time, line []byte) []byte {
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, ' ')
	b = append(b, line...)
	return append(b, '\n')
}

// Line is one line of a log.
type Line struct {
	Time time.Time
	Text string
}

// ParseRecord decodes one record (without its newline). A record
// whose time does not parse is kept whole as the text, with a zero time.
func ParseRecord(rec []byte) Line {
	ts, text, ok := bytes.Cut(rec, []byte{' '})
	if ok {
		if t, err := time.Parse(time.RFC3339Nano, string(ts)); err == nil {
			return Line{Time: t, Text: string(text)}
		}
	}
	return Line{Text: string(rec)}
}

// Chunk is the answer of Read.
type Chunk struct {
	// Incarnation is the one read (the newest, when asked for 0).
	Incarnation uint64
	Lines       []Line
	// Next is the offset to read from next; Skipped the bytes before the
	// oldest kept that the read asked for (rotated away).
	Next, Skipped int64
	// Closed: the worker has exited (or the agent restarted): the log
	// gets no more lines.
	Closed bool
}

// Read reads the log of k (incarnation 0: the newest with a log of that
// rank). tail > 0 starts at the tail-th line from the end; otherwise
// the read starts at offset (0: the oldest line kept). It returns at
// most max bytes of records (0: DefaultReadBytes), but always at least
// one whole record if there is one.
func (s *Store) Read(k Key, offset int64, tail, max int) (Chunk, error) {
	if err := k.check(); err != nil {
		return Chunk{}, err
	}
	if offset < 0 || tail < 0 || tail > MaxTail {
		return Chunk{}, fmt.Errorf("%w: offset %d, tail %d (at most %d)", ErrBadRequest, offset, tail, MaxTail)
	}
	if max <= 0 || max > DefaultReadBytes {
		max = DefaultReadBytes
	}
	s.mu.Lock()
	if k.Incarnation == 0 {
		incs := s.incarnations(k.Job)
		for i := len(incs) - 1; i >= 0 && k.Incarnation == 0; i-- {
			if segs, _ := s.segments(Key{k.Job, incs[i], k.Rank}); len(segs) > 0 {
				k.Incarnation = incs[i]
			}
		}
	}
	segs, err := s.segments(k)
	_, open := s.open[k]
	s.mu.Unlock()
	if err != nil {
		return Chunk{}, err
	}
	if len(segs) == 0 {
		return Chunk{}, fmt.Errorf("%w: %v", ErrNoLog, k)
	}
	c := Chunk{Incarnation: k.Incarnation, Closed: !open}
	if tail > 0 {
		offset = tailOffset(segs, tail)
	}
	if first := segs[0].base; offset < first {
		c.Skipped, offset = first-offset, first
	}
	c.Next = offset
	for _, sg := range segs {
		if offset >= sg.base+sg.size {
			continue
		}
		n, lines, err := readRecords(sg, offset-sg.base, max)
		if errors.Is(err, fs.ErrNotExist) {
			break // rotated away meanwhile: the next read says what was skipped
		}
		if err != nil {
			return c, err
		}
		c.Lines = append(c.Lines, lines...)
		c.Next = offset + n
		// A segment's end without its newline is being written: stop.
		if n < sg.size-(offset-sg.base) || max-int(n) <= 0 {
			break
		}
		max -= int(n)
		offset = sg.base + sg.size
	}
	// A read started past the end (a stale offset after an agent lost
	// its data) starts over at the end.
	if last := segs[len(segs)-1]; c.Next > last.base+last.size {
		c.Next = last.base + last.size
	}
	return c, nil
}

// readRecords reads whole records from sg starting at off, up to max
// bytes (at least one record): the bytes consumed and the lines.
func readRecords(sg segment, off int64, max int) (int64, []Line, error) {
	f, err := os.Open(sg.path)
	if err != nil {
		return 0, nil, fmt.Errorf("workerlog: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(io.NewSectionReader(f, off, sg.size-off), recordBuf)
	var n int64
	var lines []Line
	for {
		rec, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Not a record this store wrote (longer than any): skip it.
			n += int64(len(rec))
			continue
		}
		if err != nil { // io.EOF: a partial record, or none
			return n, lines, nil
		}
		if n > 0 && n+int64(len(rec)) > int64(max) {
			return n, lines, nil
		}
		n += int64(len(rec))
		lines = append(lines, ParseRecord(rec[:len(rec)-1]))
	}
}

// recordBuf holds the longest record: a time stamp and MaxLine bytes.
const recordBuf = MaxLine + 64

// tailOffset is the offset of the tail-th record from the end of segs.
func tailOffset(segs []segment, tail int) int64 {
	var starts []int64 // ring of the last tail record starts
	for _, sg := range segs {
		f, err := os.Open(sg.path)
		if err != nil {
			continue
		}
		r := bufio.NewReaderSize(io.NewSectionReader(f, 0, sg.size), recordBuf)
		pos := sg.base
		for {
			rec, err := r.ReadSlice('\n')
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
			if err == nil {
				if len(starts) == tail {
					starts = starts[1:]
				}
				starts = append(starts, pos)
			}
			pos += int64(len(rec))
		}
		f.Close()
	}
	if len(starts) == 0 {
		return segs[len(segs)-1].base + segs[len(segs)-1].size
	}
	return starts[0]
}
