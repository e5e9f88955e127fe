package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
)

// Paths of the token API: POST PathACLBootstrap makes the first admin
// token (once); PathACLTokens lists (GET) and creates (POST) tokens,
// PathACLTokens/{accessor}/revoke revokes one; PathACLSelf shows the
// caller's own token.
const (
	PathACLBootstrap = "/v1/acl/bootstrap"
	PathACLTokens    = "/v1/acl/tokens"
	PathACLSelf      = "/v1/acl/self"
)

// BootstrapName is the name of the bootstrap token.
const BootstrapName = "bootstrap"

// Token is an API token as the API shows it. Secret is set only in the
// answer that created it (it is stored nowhere else).
type Token struct {
	Accessor   string  `json:"accessor"`
	Name       string  `json:"name"`
	Role       string  `json:"role"`
	CreateTime float64 `json:"create_time"`
	Revoked    bool    `json:"revoked"`
	RevokeTime float64 `json:"revoke_time,omitempty"`
	Bootstrap  bool    `json:"bootstrap,omitempty"`
	Secret     string  `json:"secret,omitempty"`
}

// Bootstrap is the (optional) body of POST PathACLBootstrap: the secret
// the bootstrap token gets, made by the administrator (at least MinSecret
// characters). Without it the server makes one and answers it once.
type Bootstrap struct {
	Secret string `json:"secret,omitempty"`
}

// NewToken is the body of POST PathACLTokens.
type NewToken struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

func tokenOf(t state.Token, bootstrap string) Token {
	return Token{Accessor: t.Accessor, Name: t.Name, Role: t.Role.String(), CreateTime: t.CreateTime,
		Revoked: t.Revoked, RevokeTime: t.RevokeTime, Bootstrap: t.Accessor == bootstrap && bootstrap != ""}
}

// decodeBody decodes a small JSON body into v, refusing unknown fields;
// an empty body leaves v as it is when empty is true.
func decodeBody(r *http.Request, v any, empty bool) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) && empty {
		return nil
	}
	return err
}

func (a *API) now() float64 { return float64(a.cfg.Now().UnixNano()) / 1e9 }

// bootstrap makes the cluster's first admin token, once. Without
// Insecure it needs a client (or server) certificate of the cluster CA,
// so that nobody who merely reaches the API can take a new cluster
// before its administrator.
func (a *API) bootstrap(w http.ResponseWriter, r *http.Request) {
	if !a.cfg.Insecure {
		id, ok := peerIdentity(r)
		if !ok || (id.Role != pki.RoleClient && id.Role != pki.RoleServer) {
			a.refuse(w, r, http.StatusForbidden, principal{},
				"api: bootstrapping the tokens needs a client certificate of the cluster CA (pollux acl bootstrap --cert FILE --key FILE; pollux tls cert create --role client)")
			return
		}
	}
	var body Bootstrap
	if err := decodeBody(r, &body, true); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("api: bootstrap body: %v (want {\"secret\": \"...\"} or nothing)", err)})
		return
	}
	secret, made := body.Secret, false
	if secret == "" {
		var err error
		if secret, err = NewSecret(); err != nil {
			writeJSON(w, http.StatusInternalServerError, Error{err.Error()})
			return
		}
		made = true
	} else if err := checkSecret(secret, MinSecret); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{"api: bootstrap secret: " + err.Error()})
		return
	}
	acc, err := newAccessor()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, Error{err.Error()})
		return
	}
	tok := state.Token{Accessor: acc, Name: BootstrapName, Role: state.RoleAdmin, Hash: state.HashSecret(secret), CreateTime: a.now()}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	err = a.cfg.Backend.ApplyCommand(ctx, &state.BootstrapACL{Token: tok})
	if errors.Is(err, state.ErrACLBootstrapped) && !made {
		// A retry of a bootstrap with the same secret (the first attempt
		// may have committed without its answer arriving) succeeds.
		if t, ok := a.awaitToken(ctx, secret); ok {
			out := tokenOf(t, t.Accessor)
			out.Bootstrap = true
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	if err != nil {
		code := writeStatus(err)
		if errors.Is(err, state.ErrACLBootstrapped) {
			a.refuse(w, r, code, principal{}, "api: this cluster's tokens were bootstrapped already (once in a cluster's life); ask an admin for a token")
			return
		}
		if code == http.StatusServiceUnavailable {
			err = fmt.Errorf("%w (the bootstrap may have committed: retry with a secret of your own, pollux acl bootstrap --secret-file)", err)
		}
		writeJSON(w, code, Error{err.Error()})
		return
	}
	id, _ := peerIdentity(r)
	a.cfg.Logger.Info("api: tokens bootstrapped", "accessor", acc, "peer", r.RemoteAddr, "cert", id.String())
	out := tokenOf(tok, acc)
	if made {
		out.Secret = secret
	}
	writeJSON(w, http.StatusCreated, out)
}

// awaitToken authenticates secret against the local table, waiting for
// a follower that has not applied the bootstrap yet.
func (a *API) awaitToken(ctx context.Context, secret string) (state.Token, bool) {
	for {
		t, boot, err := a.cfg.Backend.Authenticate(secret)
		if err == nil && t.Role == state.RoleAdmin {
			return t, true
		}
		if boot {
			return state.Token{}, false
		}
		select {
		case <-ctx.Done():
			return state.Token{}, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (a *API) listTokens(w http.ResponseWriter, r *http.Request) {
	st, stale, err := a.state(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
		return
	}
	w.Header().Set(HeaderStale, fmt.Sprint(stale))
	out := []Token{}
	for _, t := range st.ACL.Tokens() {
		out = append(out, tokenOf(t, st.ACL.BootstrapAccessor()))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request) {
	var body NewToken
	if err := decodeBody(r, &body, false); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("api: token body: %v (want {\"name\": ..., \"role\": \"read|submit|admin\"})", err)})
		return
	}
	role, err := state.ParseRole(body.Role)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("api: unknown role %q (want read, submit or admin)", body.Role)})
		return
	}
	secret, err := NewSecret()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, Error{err.Error()})
		return
	}
	acc, err := newAccessor()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, Error{err.Error()})
		return
	}
	p := principalOf(r)
	tok := state.Token{Accessor: acc, Name: body.Name, Role: role, Hash: state.HashSecret(secret), CreateTime: a.now()}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := a.cfg.Backend.ApplyCommand(ctx, &state.CreateToken{Token: tok, By: p.accessor()}); err != nil {
		a.writeRefusal(w, r, p, err)
		return
	}
	a.cfg.Logger.Info("api: token created", "accessor", acc, "name", body.Name, "role", role.String(), "by", p.String())
	out := tokenOf(tok, "")
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request) {
	acc := r.PathValue("accessor")
	p := principalOf(r)
	// Answered from the local table first, so that the usual mistakes
	// never reach the log.
	st := a.cfg.Backend.LocalState()
	t, ok := st.ACL.Token(acc)
	switch {
	case !ok:
		writeJSON(w, http.StatusNotFound, Error{fmt.Sprintf("api: no token with accessor %q", acc)})
		return
	case t.Revoked:
		writeJSON(w, http.StatusConflict, Error{fmt.Sprintf("api: token %s (%s) is already revoked", acc, t.Name)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	now := a.now()
	if err := a.cfg.Backend.ApplyCommand(ctx, &state.RevokeToken{Accessor: acc, By: p.accessor(), Time: now}); err != nil {
		a.writeRefusal(w, r, p, err)
		return
	}
	a.cfg.Logger.Info("api: token revoked", "accessor", acc, "name", t.Name, "by", p.String())
	t.Revoked, t.RevokeTime = true, now
	writeJSON(w, http.StatusOK, tokenOf(t, st.ACL.BootstrapAccessor()))
}

func (a *API) self(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	if p.anonymous {
		writeJSON(w, http.StatusOK, Token{Name: "anonymous", Role: state.RoleAdmin.String()})
		return
	}
	writeJSON(w, http.StatusOK, tokenOf(p.token, a.cfg.Backend.LocalState().ACL.BootstrapAccessor()))
}

// writeRefusal answers a write the backend refused; a refusal of the
// request (the state machine's check, in log order: the token, the
// tenancy rules, the quotas) is logged like the middleware's, naming
// the token.
func (a *API) writeRefusal(w http.ResponseWriter, r *http.Request, p principal, err error) {
	code := writeStatus(err)
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		a.refuse(w, r, code, p, "api: "+err.Error())
		return
	case http.StatusTooManyRequests:
		wait, ok := consensus.RetryAfter(err)
		if !ok {
			wait = quotaRetry
		}
		w.Header().Set("Retry-After", retryAfter(wait))
		a.refuse(w, r, code, p, err.Error())
		return
	case http.StatusConflict, http.StatusInsufficientStorage, http.StatusBadRequest:
		a.refuse(w, r, code, p, err.Error())
		return
	case http.StatusServiceUnavailable:
		a.cfg.Logger.Warn("api: write failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, Error{err.Error()})
}
