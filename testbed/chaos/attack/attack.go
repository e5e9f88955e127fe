package attack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pollux/cluster/pki"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

// ErrConfig is returned by Run for unusable options.
var ErrConfig = errors.New("attack: bad options")

// ErrRun is returned when the scenario cannot be carried out (the cluster
// does not start, the victim job never runs).
var ErrRun = errors.New("attack: run")

// Options configure a run.
type Options struct {
	// Exec is the program (and leading arguments) that runs `pollux`;
	// Env is added to every process's environment.
	Exec []string
	Env  []string
	// Dir keeps the run's data and logs; "" uses a temporary directory,
	// removed after a run that passes.
	Dir string
	// TimeScale is the emulated seconds per real second (default 400).
	TimeScale float64
	// LogLevel of the servers and agents (default "warn": refusals are
	// logged at warn).
	LogLevel string
	// Logger receives progress (default: discarded).
	Logger *slog.Logger
	// AllowCommands, if set, is the agents' --allow-command list (a
	// weaker policy than the default lets some attacks through, which
	// the run must then report).
	AllowCommands []string
	// Only, if set, runs only the attacks of these names.
	Only []string
}

// Case is how one attack ended.
type Case struct {
	// Refused: the attack was refused where it should be and changed
	// nothing the observer sees.
	Refused bool `json:"refused"`
	// How says what the attacker saw and what the cluster logged, or
	// what got through.
	How string `json:"how"`
}

// Result is a run's outcome; its JSON is what `pollux chaos --scenario
// attack --json` prints.
type Result struct {
	Attacks   int             `json:"attacks"`
	Refused   int             `json:"refused"`
	Succeeded int             `json:"succeeded"`
	Cases     map[string]Case `json:"cases"`
	// After is why the normal job after the attacks did not complete
	// (nil: it did).
	After error `json:"-"`
	// Dir is the run's directory, when kept.
	Dir string `json:"-"`
	// Elapsed is the run's duration.
	Elapsed time.Duration `json:"-"`
}

// Pass reports whether every attack was refused and the normal job
// completed afterwards.
func (r *Result) Pass() bool {
	return r.Succeeded == 0 && r.Refused == r.Attacks && r.Attacks > 0 && r.After == nil
}

func (o *Options) defaults() error {
	if len(o.Exec) == 0 {
		return fmt.Errorf("%w: Exec is required", ErrConfig)
	}
	if o.TimeScale == 0 {
		o.TimeScale = 400
	}
	if !(o.TimeScale > 0) {
		return fmt.Errorf("%w: time scale %v", ErrConfig, o.TimeScale)
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	for _, name := range o.Only {
		if !slices.ContainsFunc(attacks, func(a attack) bool { return a.name == name }) {
			return fmt.Errorf("%w: no attack %q", ErrConfig, name)
		}
	}
	return nil
}

// Run starts a cluster, runs every attack against it, then runs a normal
// job to completion, and stops the cluster; then it starts two federated
// labs for the peer lab's attacks (fedAttacks) and stops them.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	begin := time.Now()
	dir, keep := o.Dir, o.Dir != ""
	if dir == "" {
		d, err := os.MkdirTemp("", "pollux-attack-")
		if err != nil {
			return nil, fmt.Errorf("attack: %w", err)
		}
		dir = d
	}
	res, err := &Result{Cases: map[string]Case{}}, error(nil)
	if slices.ContainsFunc(attacks, func(a attack) bool { return a.fed == nil && (len(o.Only) == 0 || slices.Contains(o.Only, a.name)) }) {
		res, err = runCluster(ctx, dir, o)
	}
	if res != nil && err == nil {
		err = runFederation(ctx, dir, o, res)
	}
	if res != nil {
		res.Elapsed = time.Since(begin)
		if keep || !res.Pass() || err != nil {
			res.Dir = dir
		}
	}
	if !keep && err == nil && res.Pass() {
		os.RemoveAll(dir)
	}
	return res, err
}

// runCluster starts the attacked cluster, runs the cases on it and a
// normal job after them, and stops it.
func runCluster(ctx context.Context, dir string, o Options) (*Result, error) {
	cat, err := builtin.Catalog()
	if err != nil {
		return nil, fmt.Errorf("attack: %w", err)
	}
	c, err := launch.Start(ctx, launch.Options{Exec: o.Exec, Env: o.Env, Dir: dir, Servers: 3, Agents: 2, GPUsPerAgent: 2,
		Interval: 500 * time.Millisecond, TimeScale: o.TimeScale, RestartCost: 30 * time.Second, Grace: 2 * time.Second,
		LogLevel: o.LogLevel, Network: launch.Loopback, Scenario: "attack", Logger: o.Logger, AgentArgs: allowArgs(o.AllowCommands),
		ServerArgs: []string{"--raft-election-timeout", raftElection.String()}})
	if err != nil {
		return nil, fmt.Errorf("%w: starting the cluster: %w", ErrRun, err)
	}
	res, err := attackCluster(ctx, c, cat, dir, o)
	if serr := c.Stop(); serr != nil && err == nil {
		err = fmt.Errorf("%w: stopping the cluster: %w", ErrRun, serr)
	}
	_ = c.Close()
	return res, err
}

// raftElection is the attacked cluster's Raft election timeout
// (hashicorp/raft's default rather than pollux's 200 ms): a leader change
// during a case fails it, and on a loaded machine a 200 ms timeout elects
// now and then on late heartbeats alone.
const raftElection = time.Second

// allowArgs are the agents' --allow-command flags for patterns.
func allowArgs(patterns []string) []string {
	var args []string
	for _, p := range patterns {
		args = append(args, "--allow-command", p)
	}
	return args
}

// target is what the attacks know of the cluster: its addresses, the
// credentials an attacker may hold, and the victim job.
type target struct {
	c      *launch.Cluster
	cat    testbed.Catalog
	log    *slog.Logger
	dir    string
	root   string // the cluster's checkpoint root
	marker string // a directory attacks try to write into
	leader *launch.Member
	agent  *launch.Member
	http   *http.Client
	pool   *x509.CertPool
	certs  certs
	// forger sends the forged Assigns.
	forger *forger
	// The victim: a long job of two replicas the report attacks aim at.
	victim workers
	// The attackers' API tokens.
	tokens tokens
	// expect are jobs an attack submitted that must end failed with the
	// given reason (anything else about them is a change).
	expect map[string]string
}

func attackCluster(ctx context.Context, c *launch.Cluster, cat testbed.Catalog, dir string, o Options) (*Result, error) {
	leader, _, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRun, err)
	}
	b := c.TLS()
	pool, err := pki.LoadPool(b.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRun, err)
	}
	cs, err := makeCerts(b, leader.ID, c.Agents[0].ID)
	if err != nil {
		return nil, fmt.Errorf("%w: certificates: %w", ErrRun, err)
	}
	t := &target{c: c, cat: cat, log: o.Logger, dir: dir, root: filepath.Join(dir, "checkpoints"), marker: filepath.Join(dir, "pwned"),
		leader: leader, agent: c.Agents[0], http: c.HTTPClient(10 * time.Second), pool: pool, certs: cs, expect: map[string]string{}}
	if err := os.MkdirAll(t.marker, 0o755); err != nil {
		return nil, fmt.Errorf("attack: %w", err)
	}
	if err := t.makeTokens(ctx); err != nil {
		return nil, err
	}
	if err := t.startVictim(ctx); err != nil {
		return nil, err
	}
	t.startForger()
	defer t.stopForger()
	res := &Result{Cases: map[string]Case{}}
	for _, a := range attacks {
		if a.fed != nil || len(o.Only) > 0 && !slices.Contains(o.Only, a.name) {
			continue
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		// A case before this one that got through may have moved the
		// victim; the report attacks aim at its current incarnation.
		if t.victimMoved() {
			if err := t.settleVictim(ctx); err != nil {
				return res, err
			}
		}
		how, refused, victimOnly, err := t.runCase(ctx, a)
		if err != nil {
			return res, err
		}
		if victimOnly {
			// Refused, but the scheduler moved the victim meanwhile:
			// the case runs again once on a settled victim, and fails
			// if anything changes again.
			o.Logger.Warn("attack: the victim moved during the case; running it again", "name", a.name, "how", how)
			if err := t.settleVictim(ctx); err != nil {
				return res, err
			}
			first := how
			if how, refused, _, err = t.runCase(ctx, a); err != nil {
				return res, err
			}
			how += " (run again: during the first run only the victim moved: " + first + ")"
		}
		res.Attacks++
		if refused {
			res.Refused++
		} else {
			res.Succeeded++
		}
		res.Cases[a.name] = Case{Refused: refused, How: how}
		o.Logger.Info("attack", "name", a.name, "refused", refused, "how", how)
	}
	res.After = t.normalJob(ctx)
	return res, nil
}

// runCase runs case a between two observations of the cluster: how it
// went, whether it was refused with nothing changed, and whether it was
// refused and the only change was the victim job moving (which the
// scheduler may do on its own).
func (t *target) runCase(ctx context.Context, a attack) (how string, refused, victimOnly bool, err error) {
	before, err := t.observe(ctx)
	if err != nil {
		return "", false, false, fmt.Errorf("%w: observing before %s: %w", ErrRun, a.name, err)
	}
	how, refused = a.run(ctx, t)
	ended := time.Now()
	after, err := t.observe(ctx)
	if err != nil {
		return how + "; the cluster cannot be observed afterwards: " + err.Error(), false, false, nil
	}
	diff, notes := t.changes(before, after)
	victimOnly = refused && len(diff) > 0
	for _, d := range diff {
		victimOnly = victimOnly && strings.HasPrefix(d, "job attack-victim went from ")
	}
	if len(diff) > 0 {
		refused, how = false, how+"; changed: "+strings.Join(diff, ", ")
	}
	if len(notes) > 0 {
		how += "; " + strings.Join(notes, ", ")
	}
	if why := leaderChange(a, before, after, time.Since(ended)); why != "" {
		refused, victimOnly, how = false, false, how+"; "+why
	}
	return how, refused, victimOnly, nil
}

// leaderChange says why a leader change between before and after fails
// case a ("" if none happened, or a is about availability and the
// cluster served again, served being how long after the case the
// observer read its state, within a's bound).
func leaderChange(a attack, before, after *view, served time.Duration) string {
	if before.leader == after.leader && before.term == after.term {
		return ""
	}
	change := fmt.Sprintf("the leader changed during the case (%s term %d became %s term %d)", before.leader, before.term, after.leader, after.term)
	switch {
	case a.bound == 0:
		return change
	case served > a.bound:
		return fmt.Sprintf("%s and the cluster served again after %v, past the case's bound of %v", change, served.Round(time.Millisecond), a.bound)
	}
	return ""
}

// victimSettled is how many committed allocations the victim must keep
// one incarnation through before the attacks begin.
const victimSettled = 3

// startVictim submits the victim job and waits until it settles.
func (t *target) startVictim(ctx context.Context) error {
	spec, err := t.spec("attack-victim", "imagenet", 2, "")
	if err != nil {
		return err
	}
	if a := t.c.Client().Submit(ctx, t.leader, "attack-victim", spec, 10*time.Second); !a.OK() {
		return fmt.Errorf("%w: submitting the victim job: %v", ErrRun, a)
	}
	return t.settleVictim(ctx)
}

// victimMoved says whether the victim's workers are no longer those the
// attacks know (a case that got through, or the scheduler, restarted it).
func (t *target) victimMoved() bool {
	ws := t.findWorkers("attack-victim")
	return len(ws) != len(t.victim) || len(ws) == 0 || ws[0].inc != t.victim[0].inc || ws[0].pid != t.victim[0].pid
}

// settleVictim waits until both the victim's workers run and the
// scheduler has settled it: a leader's first round places a job greedily
// and the full search after it may move it (a new incarnation), which the
// observer would take for an attack's doing. So the attacks begin once
// the victim has run one incarnation through victimSettled committed
// allocations.
func (t *target) settleVictim(ctx context.Context) error {
	cl := t.c.Client()
	deadline := time.Now().Add(90 * time.Second)
	var inc, since uint64
	for {
		j, found, jerr := cl.JobAny(ctx, "attack-victim")
		st, serr := cl.StatusAny(ctx)
		switch {
		case jerr != nil || serr != nil || !found || j.State != "running":
			inc, since = 0, 0
		case j.Incarnation != inc:
			inc, since = j.Incarnation, st.Generation
		}
		ws := t.findWorkers("attack-victim")
		if inc != 0 && st.Generation >= since+victimSettled && len(ws) == 2 && ws[0].rank == 0 && ws[1].rank == 1 &&
			ws[0].inc == inc && ws[1].inc == inc {
			t.victim = ws
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the victim job's two workers never ran one incarnation through %d allocations (found %d workers, incarnation %d)",
				ErrRun, victimSettled, len(ws), inc)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// spec is a YAML job spec of an emulated application (or, with command,
// that command), with replicas fixed at k (0: adaptive up to the cluster).
func (t *target) spec(name, app string, k int, extra string) ([]byte, error) {
	a := t.cat[app]
	if a == nil {
		return nil, fmt.Errorf("%w: unknown application %s", ErrRun, app)
	}
	l := a.Limits()
	s := fmt.Sprintf("name: %s\napplication: %s\ninit_batch_size: %d\nmax_batch_size: %d\nmin_local_batch_size: %d\n"+
		"max_local_batch_size: %d\naccumulation: %t\n", name, app, l.InitBatch, l.MaxBatch, l.MinLocal, l.MaxLocal, l.Accumulation)
	if k > 0 {
		s += fmt.Sprintf("min_replicas: %d\nmax_replicas: %d\n", k, k)
	}
	return []byte(s + extra), nil
}

// normalJob runs a short job to completion after the attacks: nil if it
// completed.
func (t *target) normalJob(ctx context.Context) error {
	spec, err := t.spec("after-the-attacks", "ncf", 0, "")
	if err != nil {
		return err
	}
	cl := t.c.Client()
	if a := cl.Submit(ctx, t.leader, "after-the-attacks", spec, 10*time.Second); !a.OK() {
		return fmt.Errorf("submitting a normal job after the attacks: %v", a)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		j, found, _, a := cl.Job(ctx, t.leader, "after-the-attacks", 5*time.Second)
		switch {
		case a.OK() && found && j.State == "completed":
			t.log.Info("attack: the normal job completed", "job", j.ID)
			return nil
		case a.OK() && found && slices.Contains([]string{"failed", "cancelled"}, j.State):
			return fmt.Errorf("the normal job after the attacks is %s: %s", j.State, j.Reason)
		case time.Now().After(deadline):
			return fmt.Errorf("the normal job after the attacks did not complete within 3 minutes (last: %+v, %v)", j, a)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// logLine waits up to 5 s for a line of m's log holding every one of
// subs, and returns it.
func (t *target) logLine(m *launch.Member, subs ...string) (string, bool) {
	return t.logLineAfter(m, 0, subs...)
}

// logSize is the length of m's log now (an offset for logLineAfter).
func (t *target) logSize(m *launch.Member) int64 {
	st, err := os.Stat(m.Log)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logLineAfter is logLine for the lines written after offset.
func (t *target) logLineAfter(m *launch.Member, offset int64, subs ...string) (string, bool) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(m.Log)
		if int64(len(b)) >= offset {
			b = b[offset:]
		}
		for _, line := range strings.Split(string(b), "\n") {
			ok := line != ""
			for _, s := range subs {
				ok = ok && strings.Contains(line, s)
			}
			if ok {
				return line, true
			}
		}
		if time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tlsConfig is a client configuration trusting the cluster CA for the
// loopback address, showing cert (nil: none).
func (t *target) tlsConfig(cert *tls.Certificate, protos ...string) *tls.Config {
	cfg := &tls.Config{RootCAs: t.pool, ServerName: "127.0.0.1", NextProtos: protos, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}
