package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"pollux/actors/server/api"
)

// spreadBurst is the attackers' burst in submit-rate-spread-over-servers.
const spreadBurst = 2

// rateSpread sends the attackers' submissions round robin to every
// server, three times the burst of its quota (burst spreadBurst, a
// token per 90 s): each of the victim's name, so that one the leader
// takes is a 409 from the state and changes nothing. Refused if exactly
// the burst is taken over all servers together, every other one is a
// 429 with Retry-After, and the leader logs one refusal naming the
// token for each (a bucket per server would take the burst on each).
func rateSpread(ctx context.Context, t *target) (string, bool) {
	acc, err := t.tenantAccessor(ctx)
	if err != nil {
		return err.Error(), false
	}
	subs := []string{"consensus: submission refused", "accessor=" + acc}
	before, _ := countLines(t.leader.Log, subs...)
	n := spreadBurst * len(t.c.Servers) * 3 / 2
	var taken, limited int
	var answers []string
	for i := range n {
		m := t.c.Servers[i%len(t.c.Servers)]
		a, err := t.requestTo(ctx, m, t.tokens.submitter, "", http.MethodPost, api.PathJobs, t.appSpec("attack-victim", ""))
		if err != nil {
			return fmt.Sprintf("submission %d via %s: %v", i, m.ID, err), false
		}
		answers = append(answers, fmt.Sprintf("%s:%d", m.ID, a.code))
		switch {
		case a.code == http.StatusConflict && strings.Contains(a.body, "attack-victim"):
			taken++
		case a.code == http.StatusTooManyRequests && a.retryAfter != "" && strings.Contains(a.body, "over all servers"):
			limited++
		default:
			return fmt.Sprintf("submission %d via %s: %d %s (Retry-After %q)", i, m.ID, a.code, a.body, a.retryAfter), false
		}
	}
	how := fmt.Sprintf("%d submissions round robin over %d servers (%s): %d taken, %d refused with 429", n, len(t.c.Servers),
		strings.Join(answers, " "), taken, limited)
	if taken != spreadBurst {
		return fmt.Sprintf("%s; want %d taken, the burst of the whole cluster", how, spreadBurst), false
	}
	got, line := countLines(t.leader.Log, subs...)
	for deadline := time.Now().Add(5 * time.Second); got-before < limited && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		got, line = countLines(t.leader.Log, subs...)
	}
	if got-before != limited {
		return fmt.Sprintf("%s; the leader %s logged %d refusals naming %s, want %d", how, t.leader.ID, got-before, acc, limited), false
	}
	return fmt.Sprintf("%s; %s/%s logged each, the last: %s", how, t.leader.Role, t.leader.ID, logMsg(line)), true
}

// retryFree gives the attackers a quota of one more job than they hold
// and a burst of one, submits a job (one the agents refuse to run) with
// an idempotency key, and retries it with the same key through every
// server: each retry must answer 201 as the first did, spending neither
// the rate token nor the job quota; a new submission after must be
// refused by the rate (429), which shows the bucket was empty while
// the retries passed. The job then ends failed (before the quota is
// restored, so that it holds no slot of the next case's).
func retryFree(ctx context.Context, t *target) (string, bool) {
	const name, key = "attack-retry", "attack-retry-key"
	acc, err := t.tenantAccessor(ctx)
	if err != nil {
		return err.Error(), false
	}
	a, err := t.request(ctx, t.c.AdminToken(), http.MethodGet, api.PathACLQuotas, nil)
	var qs api.Quotas
	if err != nil || a.code != http.StatusOK || json.Unmarshal([]byte(a.body), &qs) != nil {
		return fmt.Sprintf("listing the quotas: %v %d %s", err, a.code, a.body), false
	}
	held := 0
	for _, tq := range qs.Tokens {
		if tq.Accessor == acc {
			held = tq.Jobs
		}
	}
	if err := t.setQuota(ctx, api.SetQuota{Accessor: acc, Quota: api.Quota{Jobs: held + 1, Rate: 0.012, Burst: 1}}); err != nil {
		return err.Error(), false
	}
	how, refused := retryUnderQuota(ctx, t, name, key, held)
	if err := t.setQuota(ctx, api.SetQuota{Accessor: acc}); err != nil {
		return how + "; " + err.Error(), false
	}
	return how, refused
}

// retryUnderQuota is retryFree once the quota is set.
func retryUnderQuota(ctx context.Context, t *target, name, key string, held int) (string, bool) {
	spec := t.commandSpec(name, []string{"/bin/sh", "-c", "true"})
	t.expect[name] = "refuses to run it"
	first, err := t.requestTo(ctx, t.c.Servers[0], t.tokens.submitter, key, http.MethodPost, api.PathJobs, spec)
	if err != nil || first.code != http.StatusCreated {
		return fmt.Sprintf("the first submission: %v %d %s", err, first.code, first.body), false
	}
	var answers []string
	for _, m := range t.c.Servers {
		a, err := t.requestTo(ctx, m, t.tokens.submitter, key, http.MethodPost, api.PathJobs, spec)
		if err != nil {
			return fmt.Sprintf("retry via %s: %v", m.ID, err), false
		}
		if a.code != http.StatusCreated {
			return fmt.Sprintf("with %d jobs held, a quota of %d and a burst of 1, the retry via %s of a committed submission: %d %s (Retry-After %q)",
				held+1, held+1, m.ID, a.code, a.body, a.retryAfter), false
		}
		answers = append(answers, fmt.Sprintf("%s:%d", m.ID, a.code))
	}
	how, refused := tenantSubmit(attackSpec("attack-retry-new"), http.StatusTooManyRequests, "submissions per second", "")(ctx, t)
	if msg, ok := t.waitFailed(ctx, name); !ok {
		return how + "; " + msg, false
	}
	return fmt.Sprintf("first submission 201, %d retries with its key (%s) 201 with the bucket spent and the job quota full; a new submission then: %s",
		len(answers), strings.Join(answers, " "), how), refused
}
