package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
)

// Token limits. A secret the API makes is SecretPrefix and 43 base64url
// characters (256 random bits); a secret an administrator supplies (to
// bootstrap) must be at least MinSecret printable ASCII characters.
const (
	SecretPrefix = "plx_"
	MinSecret    = 32
	MaxSecret    = 256
)

// RoleBootstrap marks the one route that takes no token: the bootstrap
// of the token table (it needs a client certificate of the cluster CA
// instead, unless the cluster runs --insecure).
const roleBootstrap state.Role = 0

// principal is who sent a request: the token it showed, or nobody
// (Insecure: every request acts as an admin).
type principal struct {
	token     state.Token
	anonymous bool
}

func (p principal) accessor() string { return p.token.Accessor }

func (p principal) role() state.Role {
	if p.anonymous {
		return state.RoleAdmin
	}
	return p.token.Role
}

func (p principal) String() string {
	if p.anonymous {
		return "anonymous (insecure)"
	}
	return fmt.Sprintf("token %s (%s, %v)", p.token.Accessor, p.token.Name, p.token.Role)
}

type principalKey struct{}

func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// route is one endpoint and the role it needs.
type route struct {
	pattern string
	need    state.Role
	h       http.HandlerFunc
}

// handle mounts rt behind the token check.
func (a *API) handle(rt route) {
	a.routes = append(a.routes, rt)
	a.mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
		if rt.need == roleBootstrap {
			rt.h(w, r)
			return
		}
		p, code, msg := a.authenticate(r, rt.need)
		if code == http.StatusTemporaryRedirect {
			w.Header().Set("Location", msg)
			writeJSON(w, code, Error{"api: this server does not know the token (yet): ask the leader at " + msg})
			return
		}
		if code != 0 {
			a.refuse(w, r, code, p, msg)
			return
		}
		rt.h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// bearer extracts the secret of the request's Authorization header.
func bearer(r *http.Request) (string, error) {
	vals := r.Header.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", errors.New("no token: pass --token or $POLLUX_TOKEN (HTTP header Authorization: Bearer TOKEN)")
	case len(vals) > 1:
		return "", fmt.Errorf("%d Authorization headers (want one: Bearer TOKEN)", len(vals))
	}
	scheme, secret, _ := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("authorization scheme %.16q (want Bearer TOKEN)", scheme)
	}
	secret = strings.TrimSpace(secret)
	return secret, checkSecret(secret, 1)
}

// checkSecret accepts 1..MaxSecret (at least min) printable ASCII
// characters without spaces.
func checkSecret(s string, min int) error {
	if len(s) < min || len(s) > MaxSecret {
		if len(s) == 0 {
			return errors.New("empty token")
		}
		return fmt.Errorf("token of %d characters (want %d to %d)", len(s), min, MaxSecret)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("token with a character outside printable ASCII at byte %d", i)
		}
	}
	return nil
}

// authenticate finds the request's token in the local copy of the
// replicated table and checks its role against need. A refusal is a
// status (401 or 403) and why. A follower that does not know the token
// (it may not have applied its creation yet) answers a redirect to the
// leader's API (307 and the URL), whose table is the authority once its
// state is current; a server that cannot tell (a follower that knows no
// leader, a leader that cannot confirm its state) answers 503: retry.
func (a *API) authenticate(r *http.Request, need state.Role) (principal, int, string) {
	if a.cfg.Insecure {
		return principal{anonymous: true}, 0, ""
	}
	secret, err := bearer(r)
	if err != nil {
		return principal{}, http.StatusUnauthorized, "api: " + err.Error()
	}
	tok, bootstrapped, err := a.cfg.Backend.Authenticate(secret)
	if err != nil && !errors.Is(err, state.ErrTokenRevoked) {
		if _, leader := a.cfg.Backend.Leadership(); !leader {
			if _, loc := a.leaderURL(r); loc != "" {
				return principal{}, http.StatusTemporaryRedirect, loc
			}
			return principal{}, http.StatusServiceUnavailable, "api: this server does not know the token and knows no leader to ask (an election is under way, or its state is catching up): retry"
		}
		// A leader elected a moment ago may not have applied its
		// predecessors' entries (a token among them) yet: its table is
		// the authority once a linearizable read has caught it up.
		ctx, cancel := context.WithTimeout(r.Context(), authCatchUp)
		_, rerr := a.cfg.Backend.Read(ctx)
		cancel()
		if rerr != nil {
			return principal{}, http.StatusServiceUnavailable, "api: cannot check the token now (" + rerr.Error() + "): retry"
		}
		tok, bootstrapped, err = a.cfg.Backend.Authenticate(secret)
	}
	switch {
	case errors.Is(err, state.ErrTokenRevoked):
		return principal{token: tok}, http.StatusUnauthorized, fmt.Sprintf("api: token %s (%s) was revoked", tok.Accessor, tok.Name)
	case err != nil && !bootstrapped:
		return principal{}, http.StatusUnauthorized, "api: unknown token: this cluster has no tokens yet; make its first admin token with `pollux acl bootstrap` (docs/security.md)"
	case err != nil:
		return principal{}, http.StatusUnauthorized, "api: unknown token"
	}
	p := principal{token: tok}
	if !tok.Role.Allows(need) {
		return p, http.StatusForbidden, fmt.Sprintf("api: token %s (%s) has role %v; %s %s needs %v", tok.Accessor, tok.Name, tok.Role, r.Method, r.URL.Path, need)
	}
	return p, 0, ""
}

// authCatchUp bounds the linearizable read a leader makes before it
// calls a token it does not know unknown.
const authCatchUp = 2 * time.Second

// refuse answers a refused request and logs it once, naming the peer.
func (a *API) refuse(w http.ResponseWriter, r *http.Request, code int, p principal, msg string) {
	attrs := []any{"peer", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "status", code, "reason", msg}
	if id, ok := peerIdentity(r); ok {
		attrs = append(attrs, "cert", id.String())
	}
	if p.token.Accessor != "" {
		attrs = append(attrs, "accessor", p.token.Accessor, "token_name", p.token.Name)
	}
	a.cfg.Logger.Warn("api: refused request", attrs...)
	switch code {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="pollux"`)
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, Error{msg})
}

// peerIdentity is the identity of the request's client certificate, if
// it showed one (the API's TLS listener has verified it against the
// cluster CA).
func peerIdentity(r *http.Request) (pki.Identity, bool) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return pki.Identity{}, false
	}
	id, err := pki.IdentityOf(r.TLS.PeerCertificates[0])
	return id, err == nil
}

// NewSecret returns a new token secret: SecretPrefix and 256 random bits
// in base64url.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("api: random secret: %w", err)
	}
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// newAccessor returns a new public token id: 128 random bits in hex.
func newAccessor() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("api: random accessor: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeStatus maps a write's error to an HTTP status: the state
// machine's refusals are the client's (4xx), the rest unavailability.
func writeStatus(err error) int {
	switch {
	case errors.Is(err, state.ErrUnknownToken), errors.Is(err, state.ErrTokenRevoked):
		return http.StatusUnauthorized
	case errors.Is(err, state.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, state.ErrJobExists), errors.Is(err, state.ErrACLBootstrapped), errors.Is(err, state.ErrTokenExists),
		errors.Is(err, state.ErrCheckpointHeld):
		return http.StatusConflict
	case errors.Is(err, state.ErrQuota), errors.Is(err, consensus.ErrRateLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, state.ErrLimit), errors.Is(err, consensus.ErrNoSpace), errors.Is(err, state.ErrStateFull):
		return http.StatusInsufficientStorage
	case errors.Is(err, state.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}
