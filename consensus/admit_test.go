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
// clock.
func TestSubmissionRateClusterWide(t *testing.T) {
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
	ctx := ctxT(t, 20*time.Second)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(leader.srv.single(ctx, &state.InitCluster{ID: "0123456789abcdef0123456789abcdef", CheckpointRoot: "/ckpt"}))
	must(leader.srv.single(ctx, &state.BootstrapACL{Token: state.Token{Accessor: "acc-admin", Name: "boot", Role: state.RoleAdmin, Hash: state.HashSecret("s-admin"), CreateTime: 1}}))
	for _, tok := range []state.Token{
		{Accessor: "acc-alice", Name: "alice", Role: state.RoleSubmit, Hash: state.HashSecret("s-alice"), CreateTime: 2},
		{Accessor: "acc-bob", Name: "bob", Role: state.RoleSubmit, Hash: state.HashSecret("s-bob"), CreateTime: 2},
	} {
		must(leader.srv.single(ctx, &state.CreateToken{Token: tok, By: "acc-admin"}))
	}
	const burst = 4
	must(leader.srv.single(ctx, &state.SetQuota{Quota: state.Quota{Rate: 0.5, Burst: burst}, By: "acc-admin"}))
	submit := func(via *member, who, id, key string) error {
		spec := testSpec()
		spec.CheckpointDir = ""
		return via.srv.single(ctx, &state.SubmitJob{ID: id, Spec: spec, SubmitTime: 3, Submitter: who, Owned: true, Key: key})
	}
	// Round robin over all three servers: the burst, then refusals.
	for i := range burst {
		if err := submit(c.members[i%3], "acc-alice", fmt.Sprint("a", i), fmt.Sprint("k", i)); err != nil {
			t.Fatalf("submission %d via %s: %v", i, c.members[i%3].id, err)
		}
	}
	for _, via := range c.members {
		err := submit(via, "acc-alice", "a-past-"+string(via.id), "kp-"+string(via.id))
		wait, ok := RetryAfter(err)
		if !errors.Is(err, ErrRateLimited) || !ok || wait <= 0 || wait > 2*time.Second {
			t.Errorf("past the burst via %s: %v (retry after %v, %v), want ErrRateLimited within 2 s", via.id, err, wait, ok)
		}
	}
	refusals := logs[leader.id].Lines(`"consensus: submission refused"`, `"accessor":"acc-alice"`)
	if len(refusals) != 3 {
		t.Errorf("the leader logged %d refusals naming acc-alice, want 3: %q", len(refusals), refusals)
	}
	for _, f := range c.followers(leader) {
		if l := logs[f.id].Lines(`"consensus: submission refused"`); len(l) != 0 {
			t.Errorf("follower %s logged a refusal: %q", f.id, l)
		}
	}
	// A retry (same id, key and submitter) of a committed submission,
	// through any server, takes no token and answers as the first did.
	for _, via := range c.members {
		if err := submit(via, "acc-alice", "a0", "k0"); err != nil {
			t.Errorf("retry via %s: %v", via.id, err)
		}
	}
	if err := submit(c.members[1], "acc-bob", "b0", "kb"); err != nil {
		t.Errorf("another submitter: %v", err)
	}
	st, err := leader.srv.Read(ctx)
	must(err)
	if u := st.UsageOf("acc-alice"); u.Jobs != burst {
		t.Errorf("alice holds %d jobs, want %d", u.Jobs, burst)
	}
	for id := range st.Jobs {
		if strings.HasPrefix(id, "a-past") {
			t.Errorf("a refused submission %s reached the state", id)
		}
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if err := submit(c.members[2], "acc-alice", "a-later", "k-later"); err != nil {
		t.Errorf("after the refill: %v", err)
	}
}

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
