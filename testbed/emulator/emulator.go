package emulator

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/cluster/pki"
	"pollux/testbed"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
	"pollux/testbed/fabric"
)

// CheckpointFile is the name of the emulated worker's checkpoint in the
// checkpoint directory.
const CheckpointFile = "emulated.json"

// ErrConfig is returned by Run for an unusable configuration.
var ErrConfig = errors.New("emulator: bad configuration")

// Config configures one emulated worker.
type Config struct {
	Env workerproto.Env
	App testbed.Application
	// TimeScale is simulated seconds per real second (> 0).
	TimeScale float64
	// Tick is the real time between progress updates (default 50 ms).
	Tick time.Duration
	// ReportEvery is the real time between reports (default 250 ms).
	ReportEvery time.Duration
	// RestartCost is the simulated time a (re)start takes before training
	// makes progress, like a real job loading data and its checkpoint.
	RestartCost time.Duration
	// Deliver, if set, receives the reports instead of the TCP connection
	// to Env.ReportAddr (a worker running inside the node's process).
	Deliver func(workerproto.Report)
	// AllRanks makes every rank report, not only rank 0.
	AllRanks bool
	Logger   *slog.Logger
	// Record, if set, receives the worker's own account of its restore,
	// checkpoints and completion (package record). A record that cannot
	// be written fails the worker: an observer must not lose events.
	Record *record.Writer
	// Hold, if set, pauses a worker that runs inside another process as
	// SIGSTOP pauses a process: the worker calls it before it restores,
	// before every step of training and before every checkpoint, and it
	// blocks while the worker is paused (the paused time makes no
	// progress). An error (the worker was killed) ends the worker at once,
	// writing nothing.
	Hold func() error
	// Links, if set, is the network of racks the workers of this process
	// share (package fabric, the simulator's link model); Rack is the
	// rack of the worker's node in it. The first worker of each node
	// joins it for its node, every worker waits until all the job's
	// nodes have joined (the collective's rendezvous), and what the
	// uplinks add at the moment is added to every synchronised step. Nil:
	// the cluster is one rack.
	Links *fabric.Links
	Rack  int
}

// Checkpoint is what the emulated worker saves.
type Checkpoint struct {
	Job string `json:"job"`
	// Incarnation is the incarnation of the worker that wrote it (0 in a
	// fresh state).
	Incarnation uint64  `json:"incarnation,omitempty"`
	Epoch       int     `json:"epoch"`
	Progress    float64 `json:"progress"`
	Done        bool    `json:"done"`
}

// Run trains until the application's epochs are done (it then sends a
// done report, checkpoints and returns) or until ctx is cancelled (it then
// checkpoints and returns). It also checkpoints at every epoch boundary. Only rank 0 reports and checkpoints. The
// returned checkpoint is the state at return.
func Run(ctx context.Context, cfg Config) (Checkpoint, error) {
	if err := cfg.Env.Validate(); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.App == nil || !(cfg.TimeScale > 0) || math.IsInf(cfg.TimeScale, 0) {
		return Checkpoint{}, fmt.Errorf("%w: application %v, time scale %v", ErrConfig, cfg.App, cfg.TimeScale)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 50 * time.Millisecond
	}
	if cfg.ReportEvery <= 0 {
		cfg.ReportEvery = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &worker{cfg: cfg, lead: cfg.Env.Rank == 0}
	if cfg.Env.ReportCA != "" {
		pool, err := pki.LoadPool(cfg.Env.ReportCA)
		if err != nil {
			return Checkpoint{}, fmt.Errorf("%w: %s: %w", ErrConfig, workerproto.EnvReportCA, err)
		}
		w.tls = pki.ReportClient(pool)
	}
	defer w.closeConn()
	w.setup()
	if !(w.iter > 0) || math.IsInf(w.iter, 0) {
		return Checkpoint{}, fmt.Errorf("%w: %s has iteration time %v on %v", ErrConfig, cfg.App.Name(), w.iter, w.placement)
	}
	if cfg.Links != nil {
		leave, err := w.join()
		if err != nil {
			return Checkpoint{}, err
		}
		defer leave()
	}
	// Start-up comes first and the checkpoint is read at its end, as a
	// real trainer loads it after initialising: a predecessor still
	// saving on another machine has had the restart time to finish.
	sleepErr := w.sleep(ctx, time.Duration(float64(cfg.RestartCost)/cfg.TimeScale))
	if err := w.hold(); err != nil {
		return Checkpoint{}, err
	}
	t0 := mono.Now()
	st, fresh, err := restore(cfg.Env.CheckpointDir, cfg.Env.JobID)
	if err != nil {
		return Checkpoint{}, err
	}
	if w.lead {
		if err := cfg.Record.Restore(t0, fresh, st.Incarnation, st.Epoch, st.Progress); err != nil {
			return Checkpoint{}, err
		}
	}
	w.st = st
	if sleepErr != nil {
		return w.st, nil // stopped while starting: the checkpoint is untouched
	}
	if !w.st.Done {
		if err := w.train(ctx); err != nil {
			return w.st, w.save()
		}
	}
	if w.lead {
		if err := cfg.Record.Done(w.st.Epoch, w.st.Progress); err != nil {
			return w.st, err
		}
	}
	w.report(true)
	return w.st, w.save()
}

type worker struct {
	cfg  Config
	lead bool
	st   Checkpoint

	placement      []int
	step, sync     float64 // true times of one micro-step and its sync part
	iter           float64 // one iteration
	link           string  // the incarnation's name in Config.Links
	bytes          float64 // of gradients synchronised per step
	extra          float64 // what the uplinks add to a synchronised step now
	batch          float64 // total batch M
	conn           net.Conn
	tls            *tls.Config // nil: plaintext reports
	lastReportTime time.Time
	saved          workerproto.SavedCheckpoint // the last this incarnation saved
}

// setup derives the true timing of the configuration in the environment:
// K workers spread as evenly as possible over N nodes.
func (w *worker) setup() {
	e := w.cfg.Env
	p := make([]int, e.NumNodes)
	for i := range p {
		p[i] = e.WorldSize / e.NumNodes
		if i < e.WorldSize%e.NumNodes {
			p[i]++
		}
	}
	w.placement = testbed.NormalizePlacement(p)
	m := float64(e.AtomicBatch)
	w.step, w.sync = w.cfg.App.StepTimes(w.placement, m)
	w.iter = w.step + float64(e.AccumSteps)*(w.step-w.sync)
	w.batch = float64(e.WorldSize) * m * float64(e.AccumSteps+1)
}

// join joins the worker's node to Config.Links (the first worker of
// the node does, for it).
func (w *worker) join() (leave func(), err error) {
	e := w.cfg.Env
	b, ok := fabric.GradientBytes(w.cfg.App.Name())
	if !ok {
		return nil, fmt.Errorf("%w: application %q has no gradient size for the network across racks", ErrConfig, w.cfg.App.Name())
	}
	w.bytes, w.link = b, fmt.Sprintf("%s@%d", e.JobID, e.Incarnation)
	if e.LocalRank != 0 {
		return func() {}, nil
	}
	leave, err = w.cfg.Links.Join(w.link, w.cfg.Rack)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return leave, nil
}

// rendezvous waits until all the job's nodes have joined Config.Links,
// as a collective waits for all its ranks.
func (w *worker) rendezvous(ctx context.Context) error {
	if w.cfg.Links == nil {
		return nil
	}
	tick := time.NewTicker(w.cfg.Tick)
	defer tick.Stop()
	for w.cfg.Links.Nodes(w.link) < w.cfg.Env.NumNodes {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := w.hold(); err != nil {
				return err
			}
		}
	}
	return nil
}

// crossRacks sets what the uplinks add to a synchronised step now.
func (w *worker) crossRacks() {
	if w.cfg.Links != nil {
		w.extra, _ = w.cfg.Links.Extra(w.link, w.bytes)
	}
}

func (w *worker) train(ctx context.Context) error {
	if err := w.rendezvous(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(w.cfg.Tick)
	defer tick.Stop()
	last := time.Now()
	w.crossRacks()
	w.report(false)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			held := time.Now()
			if err := w.hold(); err != nil {
				return err
			}
			now := time.Now()
			last = last.Add(now.Sub(held)) // no progress while paused
			epoch := w.st.Epoch
			w.crossRacks()
			w.advance(now.Sub(last).Seconds() * w.cfg.TimeScale)
			last = now
			if w.st.Done {
				return nil
			}
			if w.st.Epoch != epoch {
				// Checkpoint at every epoch boundary, as trainers do, so
				// a worker killed without warning loses at most an epoch.
				if err := w.save(); err != nil {
					w.cfg.Logger.Warn("emulator: epoch checkpoint", "err", err)
				}
			}
			// (half a tick early rather than a whole tick late)
			if now.Sub(w.lastReportTime) >= w.cfg.ReportEvery-w.cfg.Tick/2 {
				w.report(false)
				w.lastReportTime = now
			}
		}
	}
}

// advance makes sim seconds of training progress, crossing epoch
// boundaries (where the gradient statistics, hence the gain, change).
func (w *worker) advance(sim float64) {
	app := w.cfg.App
	for sim > 0 && !w.st.Done {
		gain := app.GradStats(w.batch, w.st.Epoch).Gain(w.batch, float64(w.cfg.Env.InitBatch))
		rate := gain / (w.iter + w.extra) // progress per simulated second
		end := app.EpochEnd(w.st.Epoch + 1)
		need := (end - w.st.Progress) / rate
		if need > sim {
			w.st.Progress += rate * sim
			return
		}
		sim -= need
		w.st.Progress = end
		w.st.Epoch++
		w.st.Done = w.st.Epoch >= app.MaxEpochs()
	}
}

// report sends one report (rank 0 only). Failures are logged: reports are
// measurements and losing one is harmless.
func (w *worker) report(final bool) {
	w.lastReportTime = time.Now()
	if !w.lead && !w.cfg.AllRanks {
		return
	}
	e := w.cfg.Env
	g := w.cfg.App.GradStats(w.batch, w.st.Epoch)
	rep := workerproto.Report{
		Job: e.JobID, Incarnation: e.Incarnation, Rank: e.Rank,
		StepTime: w.step + w.extra, SyncTime: w.sync + w.extra, GradSqr: math.Max(g.GradSqr, 0), GradVar: math.Max(g.GradVar, 0),
		Epoch: w.st.Epoch, Progress: w.st.Progress, LocalBatch: e.AtomicBatch, AccumSteps: e.AccumSteps,
		Done: final && w.st.Done && w.lead, Token: e.ReportToken, Checkpoint: w.saved,
	}
	if w.cfg.Deliver != nil {
		w.cfg.Deliver(rep)
		return
	}
	line, err := workerproto.Encode(rep)
	if err != nil {
		w.cfg.Logger.Error("emulator: cannot encode report", "err", err)
		return
	}
	if w.conn == nil {
		c, err := w.dial(e.ReportAddr)
		if err != nil {
			w.cfg.Logger.Warn("emulator: cannot reach report address", "addr", e.ReportAddr, "err", err)
			return
		}
		w.conn = c
	}
	_ = w.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := w.conn.Write(line); err != nil {
		w.cfg.Logger.Warn("emulator: report lost", "err", err)
		w.closeConn()
	}
}

// dial connects to the report address: over TLS, checking that the
// agent holds an agent certificate of the CA for that address, unless
// the environment names no CA.
func (w *worker) dial(addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: time.Second}
	if w.tls == nil {
		return d.Dial("tcp", addr)
	}
	return tls.DialWithDialer(d, "tcp", addr, w.tls)
}

func (w *worker) closeConn() {
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
}

// hold waits while the worker is paused (Config.Hold).
func (w *worker) hold() error {
	if w.cfg.Hold == nil {
		return nil
	}
	return w.cfg.Hold()
}

func (w *worker) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// save writes the checkpoint (rank 0 only), as this incarnation's, and
// records it.
func (w *worker) save() error {
	if !w.lead {
		return nil
	}
	if err := w.hold(); err != nil {
		return err
	}
	w.st.Incarnation = w.cfg.Env.Incarnation
	t0 := mono.Now()
	if err := Save(w.cfg.Env.CheckpointDir, w.st); err != nil {
		return err
	}
	w.saved = workerproto.SavedCheckpoint{Epoch: w.st.Epoch, Progress: w.st.Progress, SavedAt: float64(time.Now().UnixNano()) / 1e9}
	return w.cfg.Record.Checkpoint(t0, w.st.Epoch, w.st.Progress, w.st.Done)
}

// Save writes c atomically into dir (a temporary file, then rename).
func Save(dir string, c Checkpoint) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("emulator: checkpoint dir: %w", err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("emulator: encoding checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(dir, CheckpointFile+".tmp*")
	if err != nil {
		return fmt.Errorf("emulator: writing checkpoint: %w", err)
	}
	_, werr := tmp.Write(b)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("emulator: writing checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, CheckpointFile)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("emulator: writing checkpoint: %w", err)
	}
	return nil
}

// Restore reads the checkpoint of job from dir; a missing checkpoint is a
// fresh start. A checkpoint of another job, or one that does not decode,
// is an error (never silently restarted from zero).
func Restore(dir, job string) (Checkpoint, error) {
	c, _, err := restore(dir, job)
	return c, err
}

// restore is Restore that also says whether there was no checkpoint.
func restore(dir, job string) (c Checkpoint, fresh bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{Job: job}, true, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("emulator: reading checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Checkpoint{}, false, fmt.Errorf("emulator: checkpoint %s: %w", filepath.Join(dir, CheckpointFile), err)
	}
	if c.Job != job || c.Epoch < 0 || !(c.Progress >= 0) || math.IsInf(c.Progress, 0) {
		return Checkpoint{}, false, fmt.Errorf("emulator: checkpoint of job %q at epoch %d, progress %v does not fit job %q", c.Job, c.Epoch, c.Progress, job)
	}
	return c, false, nil
}
