package launch

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/proc"
	"pollux/testbed/chaos/record"
)

// Worker is a worker process as its own start record describes it.
type Worker struct {
	Node string
	Job  string
	Inc  uint64
	Rank int
	PID  int
	Boot uint64
	GPUs []int
}

// watcher reads the workers' record files as they appear, tracks each
// worker's process group (so that the end of the run kills it whatever
// happened to its agent), and records when it sees one gone that wrote no
// exit.
type watcher struct {
	root  string
	hist  *history.Recorder
	group *proc.Group
	log   *slog.Logger

	scanMu sync.Mutex // one scan at a time
	mu     sync.Mutex
	known  map[string]*watched // by file
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once
}

type watched struct {
	w     Worker
	ended bool
	// alive is the last time the watcher saw the process alive (mono).
	alive int64
}

// scanEvery is how often the watcher looks; a worker's end is recorded at
// most this late.
const scanEvery = 25 * time.Millisecond

func newWatcher(root string, h *history.Recorder, g *proc.Group, log *slog.Logger) *watcher {
	w := &watcher{root: root, hist: h, group: g, log: log, known: map[string]*watched{}, quit: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *watcher) loop() {
	defer close(w.done)
	t := time.NewTicker(scanEvery)
	defer t.Stop()
	for {
		select {
		case <-w.quit:
			return
		case <-t.C:
			w.scan()
		}
	}
}

// scan reads new and open record files and closes the lives of workers
// that are gone.
func (w *watcher) scan() {
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	nodes, err := os.ReadDir(w.root)
	if err != nil {
		return
	}
	for _, n := range nodes {
		files, err := os.ReadDir(filepath.Join(w.root, n.Name()))
		if err != nil {
			continue
		}
		for _, f := range files {
			if strings.HasSuffix(f.Name(), ".jsonl") {
				w.look(n.Name(), filepath.Join(w.root, n.Name(), f.Name()))
			}
		}
	}
}

// look updates one worker file.
func (w *watcher) look(node, path string) {
	w.mu.Lock()
	k := w.known[path]
	w.mu.Unlock()
	if k != nil && k.ended {
		return
	}
	fh, err := os.Open(path)
	if err != nil {
		return
	}
	dec, err := record.Decode(fh, path)
	fh.Close()
	if err != nil && len(dec.Records) == 0 {
		return // not written yet (or malformed: the checker will say so)
	}
	if k == nil {
		s := dec.Records[0]
		k = &watched{w: Worker{Node: node, Job: s.Job, Inc: s.Inc, Rank: s.Rank, PID: s.PID, Boot: s.Boot, GPUs: s.GPUs}}
		// Workers lead their own process group (the node actor starts
		// them with Setpgid).
		w.group.Track(s.PID)
		w.mu.Lock()
		w.known[path] = k
		w.mu.Unlock()
	}
	if _, exited := dec.Find(record.Exit); exited {
		w.end(k, false)
		return
	}
	// Stamped before looking: a process alive when looked at was alive
	// then (it had written its start record before).
	now := mono.Now()
	if !mono.Alive(k.w.PID, k.w.Boot) {
		w.end(k, true)
		return
	}
	w.mu.Lock()
	k.alive = now
	w.mu.Unlock()
}

// end closes a worker's life; gone records that the harness saw it gone.
func (w *watcher) end(k *watched, gone bool) {
	w.mu.Lock()
	if k.ended {
		w.mu.Unlock()
		return
	}
	k.ended = true
	w.mu.Unlock()
	w.group.Untrack(k.w.PID)
	if gone {
		w.mu.Lock()
		alive := k.alive
		w.mu.Unlock()
		if _, err := w.hist.Event(history.Event{Kind: history.WorkerGone, Node: k.w.Node, Job: k.w.Job, Inc: k.w.Inc,
			Rank: k.w.Rank, PID: k.w.PID, Alive: alive}); err != nil {
			w.log.Error("launch: history", "err", err)
		}
	}
}

// running returns the workers alive now, sorted by job, incarnation,
// rank.
func (w *watcher) running() []Worker {
	w.scan()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Worker
	for _, k := range w.known {
		if !k.ended && mono.Alive(k.w.PID, k.w.Boot) {
			out = append(out, k.w)
		}
	}
	slices.SortFunc(out, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.Inc, b.Inc), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Node, b.Node))
	})
	return out
}

// finish waits up to timeout for every worker to be seen ended, then
// kills the survivors' groups (an error names them), waits for them and
// records them gone; the watcher then stops.
func (w *watcher) finish(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var survivors []Worker
	for {
		w.scan()
		survivors = survivors[:0]
		w.mu.Lock()
		for _, k := range w.known {
			if !k.ended {
				survivors = append(survivors, k.w)
			}
		}
		w.mu.Unlock()
		if len(survivors) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(scanEvery)
	}
	var errs []error
	for _, s := range survivors {
		errs = append(errs, fmt.Errorf("%w: worker pid %d of job %s incarnation %d on %s still running %s after its agent stopped: killed",
			ErrCluster, s.PID, s.Job, s.Inc, s.Node, timeout))
		if err := syscall.Kill(-s.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	for deadline = time.Now().Add(5 * time.Second); len(survivors) > 0 && time.Now().Before(deadline); {
		w.scan()
		survivors = slices.DeleteFunc(survivors, func(s Worker) bool { return !mono.Alive(s.PID, s.Boot) })
		time.Sleep(scanEvery)
	}
	w.scan()
	w.stop()
	return errors.Join(errs...)
}

func (w *watcher) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.done
}
