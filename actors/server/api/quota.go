package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

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
	a.cfg.Logger.Info("api: quota set", "accessor", body.Accessor, "quota", body.Quota, "state_budget", body.StateBudget, "by", p.String())
	writeJSON(w, http.StatusOK, body)
}

// quotaRetry is the Retry-After of a refusal by the state's quota (jobs
// or spec bytes held): the submitter waits for jobs to finish.
const quotaRetry = 30 * time.Second

// retryAfter formats d as a Retry-After header value (whole seconds, at
// least 1).
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
