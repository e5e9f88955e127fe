package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"pollux/consensus/state"
)

// PathACLQuotas lists the quotas (GET) and sets one (POST SetQuota).
const PathACLQuotas = "/v1/acl/quotas"

// Quota is a submitter's quota as the API shows and takes it (a zero
// field: the default).
type Quota struct {
	Jobs      int     `json:"jobs"`
	SpecBytes int64   `json:"spec_bytes"`
	Rate      float64 `json:"rate"`
	Burst     int     `json:"burst"`
}

func quotaOf(q state.Quota) Quota {
	return Quota{Jobs: q.Jobs, SpecBytes: q.SpecBytes, Rate: q.Rate, Burst: q.Burst}
}

func (q Quota) state() state.Quota {
	return state.Quota{Jobs: q.Jobs, SpecBytes: q.SpecBytes, Rate: q.Rate, Burst: q.Burst}
}

// SetQuota is the body of POST PathACLQuotas: the quota of the token
// Accessor or, with an empty Accessor, the cluster's defaults and its
// state budget (bytes of job specs; 0: the built-in one). A zero quota
// for a token gives it the defaults again.
type SetQuota struct {
	Accessor    string `json:"accessor,omitempty"`
	Quota       Quota  `json:"quota"`
	StateBudget int64  `json:"state_budget,omitempty"`
}

// TokenQuota is one token's quota (Quota, in effect; Own, what an admin
// set for it, if anything) and what it holds.
type TokenQuota struct {
	Accessor  string `json:"accessor"`
	Name      string `json:"name"`
	Quota     Quota  `json:"quota"`
	Own       *Quota `json:"own,omitempty"`
	Jobs      int    `json:"jobs"`
	SpecBytes int64  `json:"spec_bytes"`
}

// Quotas is the answer of GET PathACLQuotas: the default quota in effect,
// the state budget and what the state holds against it, and every live
// token's quota.
type Quotas struct {
	Default     Quota `json:"default"`
	StateBudget int64 `json:"state_budget"`
	// StateBytes is what the state holds against the budget: the bytes
	// of its job specs and of its events (EventBytes of them).
	StateBytes int64        `json:"state_bytes"`
	EventBytes int64        `json:"event_bytes"`
	Tokens     []TokenQuota `json:"tokens"`
}

// QuotasOf is the quotas of st.
func QuotasOf(st *state.State) Quotas {
	out := Quotas{Default: quotaOf(st.Quotas.Of("")), StateBudget: st.Quotas.StateBudget(), StateBytes: st.SpecBytes() + st.Events.Bytes(),
		EventBytes: st.Events.Bytes(), Tokens: []TokenQuota{}}
	for _, t := range st.ACL.Tokens() {
		if t.Revoked {
			continue
		}
		u := st.UsageOf(t.Accessor)
		tq := TokenQuota{Accessor: t.Accessor, Name: t.Name, Quota: quotaOf(st.Quotas.Of(t.Accessor)), Jobs: u.Jobs, SpecBytes: u.SpecBytes}
		if own, ok := st.Quotas.Set(t.Accessor); ok {
			o := quotaOf(own)
			tq.Own = &o
		}
		out.Tokens = append(out.Tokens, tq)
	}
	return out
}

func (a *API) listQuotas(w http.ResponseWriter, r *http.Request) {
	st, stale, err := a.state(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	w.Header().Set(HeaderStale, strconv.FormatBool(stale))
	writeJSON(w, http.StatusOK, QuotasOf(st))
}

func (a *API) setQuota(w http.ResponseWriter, r *http.Request) {
	var body SetQuota
	if err := decodeBody(r, &body, false); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("api: quota body: %v (want {\"accessor\": ..., \"quota\": {\"jobs\": N, \"spec_bytes\": N, \"rate\": R, \"burst\": N}})", err)})
		return
	}
	p := principalOf(r)
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	c := &state.SetQuota{Accessor: body.Accessor, Quota: body.Quota.state(), Budget: body.StateBudget, By: p.accessor()}
	if err := a.cfg.Backend.ApplyCommand(ctx, c); err != nil {
		a.writeRefusal(w, r, p, err)
		return
	}
	a.limits.forget(body.Accessor)
	a.cfg.Logger.Info("api: quota set", "accessor", body.Accessor, "quota", body.Quota, "state_budget", body.StateBudget, "by", p.String())
	writeJSON(w, http.StatusOK, body)
}

// limiters are the submitters' token buckets on this server, made from
// their quotas (Rate, Burst) as the local state has them.
type limiters struct {
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	// quotas are the local state's quotas, read again when older than
	// quotaRefresh (reading copies the state).
	quotas state.Quotas
	read   time.Time
}

// quotaRefresh is how long a server keeps the quotas it read before
// reading them again.
const quotaRefresh = time.Second

// maxBuckets bounds the buckets kept; past it, the full ones are
// dropped (a full bucket is what a new one would be).
const maxBuckets = 4096

// reserve takes one submission from accessor's bucket at now; past the
// bucket it returns how long until one is there (and takes nothing).
func (l *limiters) reserve(a *API, accessor string, now time.Time) (time.Duration, state.Quota) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.read.IsZero() || now.Sub(l.read) >= quotaRefresh || now.Before(l.read) {
		l.quotas, l.read = a.cfg.Backend.LocalState().Quotas, now
	}
	q := l.quotas.Of(accessor)
	b := l.buckets[accessor]
	if b == nil || b.Limit() != rate.Limit(q.Rate) || b.Burst() != q.Burst {
		if l.buckets == nil {
			l.buckets = map[string]*rate.Limiter{}
		}
		if len(l.buckets) >= maxBuckets {
			for k, v := range l.buckets {
				if v.TokensAt(now) >= float64(v.Burst()) {
					delete(l.buckets, k)
				}
			}
		}
		b = rate.NewLimiter(rate.Limit(q.Rate), q.Burst)
		l.buckets[accessor] = b
	}
	res := b.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, q
	}
	return 0, q
}

// forget drops accessor's bucket (its quota changed) and the quotas read.
func (l *limiters) forget(accessor string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.buckets, accessor)
	l.read = time.Time{}
}

// quotaRetry is the Retry-After of a refusal by the state's quota (jobs
// or spec bytes held): the submitter waits for jobs to finish.
const quotaRetry = 30 * time.Second

// retryAfter formats d as a Retry-After header value (whole seconds, at
// least 1).
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// admitRate refuses a submission past its submitter's token bucket: 429
// and Retry-After, and one log line naming the submitter. It reports
// whether the submission may go on.
func (a *API) admitRate(w http.ResponseWriter, r *http.Request, p principal) bool {
	if p.anonymous {
		return true
	}
	wait, q := a.limits.reserve(a, p.accessor(), a.cfg.Now())
	if wait == 0 {
		return true
	}
	w.Header().Set("Retry-After", retryAfter(wait))
	a.refuse(w, r, http.StatusTooManyRequests, p, fmt.Sprintf("api: token %s (%s) submits faster than its quota of %v submissions per second (burst %d): retry in %v (pollux acl quota)",
		p.token.Accessor, p.token.Name, q.Rate, q.Burst, wait.Round(time.Millisecond)))
	return false
}
