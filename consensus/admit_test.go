package consensus

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/consensus/state"
	"pollux/internal/logbuf"
)

// TestSubmissionRateClusterWide: a submitter that spreads its
// submissions over every server gets its burst once, not once per
// server: the leader, where every submission passes, refuses the rest
// (ErrRateLimited with the wait, forwarded too) and logs the submitter;
// a retry of a submission that committed takes no token; another
// submitter's bucket is its own; the bucket refills with the leader's
// clock. A leader change starts full buckets (as documented): a run
// that saw one is run again on a new cluster.
func TestSubmissionRateClusterWide(t *testing.T) {
	for attempt := 1; ; attempt++ {
		problems, stable := rateScenario(t)
		if stable {
			for _, p := range problems {
				t.Error(p)
			}
			return
		}
		if attempt == 5 {
			t.Fatalf("the leader changed in each of %d runs (a loaded machine?); the last run's problems: %q", attempt, problems)
		}
		t.Logf("run %d: the leader changed during the run; again", attempt)
	}
}

// rateScenario runs TestSubmissionRateClusterWide once on a new cluster
// and returns what went wrong, and whether one leader served the whole
// run (if not, the problems say nothing).
func rateScenario(t *testing.T) (problems []string, stable bool) {
	var (
		mu   sync.Mutex
		now  = time.Unix(1000, 0)
		logs = map[raft.ServerID]*logbuf.Buffer{}
	)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	c := newCluster(t, 3, func(id raft.ServerID) Config {
		cfg := testConfig(id)
		// Slow elections: one leader for the whole run on a loaded
		// machine.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		cfg.WriteTimeout = 10 * time.Second
		mu.Lock()
		if logs[id] == nil {
			logs[id] = &logbuf.Buffer{}
		}
		cfg.Logger = slog.New(slog.NewJSONHandler(logs[id], nil))
		mu.Unlock()
		cfg.Now = clock
		return cfg
	})
	leader := c.leader(c.members...)
	term, _ := leader.srv.Leadership()
	defer func() {
		now, ok := leader.srv.Leadership()
		stable = ok && now == term
	}()
	ctx := ctxT(t, 30*time.Second)
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, cmd := range []state.Command{
		&state.InitCluster{ID: "0123456789abcdef0123456789abcdef", CheckpointRoot: "/ckpt"},
		&state.BootstrapACL{Token: state.Token{Accessor: "acc-admin", Name: "boot", Role: state.RoleAdmin, Hash: state.HashSecret("s-admin"), CreateTime: 1}},
		&state.CreateToken{Token: state.Token{Accessor: "acc-alice", Name: "alice", Role: state.RoleSubmit, Hash: state.HashSecret("s-alice"), CreateTime: 2}, By: "acc-admin"},
		&state.CreateToken{Token: state.Token{Accessor: "acc-bob", Name: "bob", Role: state.RoleSubmit, Hash: state.HashSecret("s-bob"), CreateTime: 2}, By: "acc-admin"},
		&state.SetQuota{Quota: state.Quota{Rate: 0.5, Burst: burst}, By: "acc-admin"},
	} {
		if err := leader.srv.single(ctx, cmd); err != nil {
			fail("setting up (%T): %v", cmd, err)
			return problems, stable
		}
	}
	submit := func(via *member, who, id, key string) error {
		spec := testSpec()
		spec.CheckpointDir = ""
		return via.srv.single(ctx, &state.SubmitJob{ID: id, Spec: spec, SubmitTime: 3, Submitter: who, Owned: true, Key: key})
	}
	// Round robin over all three servers: the burst, then refusals.
	for i := range burst {
		if err := submit(c.members[i%3], "acc-alice", fmt.Sprint("a", i), fmt.Sprint("k", i)); err != nil {
			fail("submission %d via %s: %v", i, c.members[i%3].id, err)
			return problems, stable
		}
	}
	for _, via := range c.members {
		err := submit(via, "acc-alice", "a-past-"+string(via.id), "kp-"+string(via.id))
		wait, ok := RetryAfter(err)
		if !errors.Is(err, ErrRateLimited) || !ok || wait <= 0 || wait > 2*time.Second {
			fail("past the burst via %s: %v (retry after %v, %v), want ErrRateLimited within 2 s", via.id, err, wait, ok)
		}
	}
	refusals := logs[leader.id].Lines(`"consensus: submission refused"`, `"accessor":"acc-alice"`)
	if len(refusals) != 3 {
		fail("the leader logged %d refusals naming acc-alice, want 3: %q", len(refusals), refusals)
	}
	for _, f := range c.followers(leader) {
		if l := logs[f.id].Lines(`"consensus: submission refused"`); len(l) != 0 {
			fail("follower %s logged a refusal: %q", f.id, l)
		}
	}
	// A retry (same id, key and submitter) of a committed submission,
	// through any server, takes no token and answers as the first did.
	for _, via := range c.members {
		if err := submit(via, "acc-alice", "a0", "k0"); err != nil {
			fail("retry via %s: %v", via.id, err)
		}
	}
	if err := submit(c.members[1], "acc-bob", "b0", "kb"); err != nil {
		fail("another submitter: %v", err)
	}
	st, err := leader.srv.Read(ctx)
	if err != nil {
		fail("read: %v", err)
		return problems, stable
	}
	if u := st.UsageOf("acc-alice"); u.Jobs != burst {
		fail("alice holds %d jobs, want %d", u.Jobs, burst)
	}
	for id := range st.Jobs {
		if strings.HasPrefix(id, "a-past") {
			fail("a refused submission %s reached the state", id)
		}
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if err := submit(c.members[2], "acc-alice", "a-later", "k-later"); err != nil {
		fail("after the refill: %v", err)
	}
	return problems, stable
}

// burst is the submitters' burst in TestSubmissionRateClusterWide.
const burst = 4

// TestRetryAfter reads the wait of a refusal, direct or forwarded.
func TestRetryAfter(t *testing.T) {
	direct := &RateError{Accessor: "acc", Name: "n", Rate: 1, Burst: 1, Wait: 1500 * time.Millisecond}
	tests := []struct {
		name string
		err  error
		wait time.Duration
		ok   bool
	}{
		{"direct", direct, 1500 * time.Millisecond, true},
		{"wrapped", fmt.Errorf("api: %w", direct), 1500 * time.Millisecond, true},
		{"forwarded", &remoteError{msg: direct.Error(), sentinel: ErrRateLimited}, 1500 * time.Millisecond, true},
		{"forwarded without a wait", &remoteError{msg: "consensus: submitter past its submission rate", sentinel: ErrRateLimited}, 0, true},
		{"forwarded garbled", &remoteError{msg: "x; retry in soon", sentinel: ErrRateLimited}, 0, true},
		{"another error", ErrNoSpace, 0, false},
		{"nil", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if wait, ok := RetryAfter(tt.err); wait != tt.wait || ok != tt.ok {
				t.Errorf("RetryAfter = %v, %v; want %v, %v", wait, ok, tt.wait, tt.ok)
			}
		})
	}
}
