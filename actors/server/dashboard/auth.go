package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"pollux/actors/server/api"
	"pollux/consensus/state"
)

// CookieName is the cookie holding the viewer's API token, set when a
// page is opened with ?token= (as Jupyter does), HttpOnly, Secure over
// HTTPS, SameSite=Lax and scoped to Prefix.
const CookieName = "pollux_token"

// QueryToken is the query parameter that hands the page a token.
const QueryToken = "token"

// Errors of token decoding.
var (
	ErrNoToken  = errors.New("dashboard: no token")
	ErrBadToken = errors.New("dashboard: malformed token")
)

// ParseToken checks a token as it comes from a query, a cookie or an
// Authorization header: 1 to api.MaxSecret characters of printable ASCII
// that a cookie value may hold (no space, quote, comma, semicolon or
// backslash). The API checks it against the token table.
func ParseToken(s string) (string, error) {
	if s == "" {
		return "", ErrNoToken
	}
	if len(s) > api.MaxSecret {
		return "", fmt.Errorf("%w: %d characters (at most %d)", ErrBadToken, len(s), api.MaxSecret)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '"' || c == ',' || c == ';' || c == '\\' {
			return "", fmt.Errorf("%w: character %q at byte %d", ErrBadToken, c, i)
		}
	}
	return s, nil
}

// tokenOf finds the request's token: its ?token= query, else its
// cookie, else its Authorization: Bearer header (for scripts). fromQuery
// says the query held it. No token at all is ErrNoToken.
func tokenOf(r *http.Request) (tok string, fromQuery bool, err error) {
	if q, ok := r.URL.Query()[QueryToken]; ok {
		if len(q) != 1 {
			return "", true, fmt.Errorf("%w: %d token parameters", ErrBadToken, len(q))
		}
		tok, err := ParseToken(q[0])
		return tok, true, err
	}
	if c, err := r.Cookie(CookieName); err == nil {
		tok, err := ParseToken(c.Value)
		return tok, false, err
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(strings.TrimSpace(h), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", false, fmt.Errorf("%w: authorization scheme %.16q (want Bearer)", ErrBadToken, scheme)
		}
		tok, err := ParseToken(strings.TrimSpace(secret))
		return tok, false, err
	}
	return "", false, ErrNoToken
}

// withoutToken is the URL of r without its token parameter, as a path
// under Prefix and query (never another host: the redirect after a
// token exchange stays on this server).
func withoutToken(r *http.Request) string {
	q := r.URL.Query()
	q.Del(QueryToken)
	path := r.URL.EscapedPath()
	if !strings.HasPrefix(path, Prefix) || strings.HasPrefix(path, "//") {
		path = Prefix
	}
	if enc := q.Encode(); enc != "" {
		return path + "?" + enc
	}
	return path
}

// tokenCookie is the cookie that carries tok.
func tokenCookie(r *http.Request, tok string) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: tok, Path: Prefix, HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteLaxMode}
}

// clearCookie removes the token cookie.
func clearCookie(r *http.Request) *http.Cookie {
	c := tokenCookie(r, "")
	c.MaxAge = -1
	return c
}

// How long whoami waits for a follower to learn a token it does not
// know: whoamiRetries times whoamiWait.
const (
	whoamiRetries = 10
	whoamiWait    = 100 * time.Millisecond
)

// refusal is why a request was not let in: an HTTP status and the
// API's words.
type refusal struct {
	code int
	msg  string
	// leader is the leader's URL when this server does not know the
	// token yet (a follower that has not applied its creation).
	leader string
}

func (e *refusal) Error() string { return e.msg }

// whoami asks the API, in process, who tok is (GET /v1/acl/self with
// it, or with no token in an insecure cluster): the dashboard is behind
// exactly the API's authentication. A refusal is a *refusal.
func (d *Dashboard) whoami(r *http.Request, tok string) (Viewer, error) {
	rec := d.callAPI(r.Context(), r, http.MethodGet, api.PathACLSelf, tok)
	// A follower that does not know the token redirects to the leader:
	// a token made a moment ago (as pollux demo --ui does just before it
	// prints its URL) reaches it within a few heartbeats, so wait a
	// little for it rather than refuse at once.
	for i := 0; i < whoamiRetries && rec.code == http.StatusTemporaryRedirect; i++ {
		select {
		case <-r.Context().Done():
			return Viewer{}, &refusal{code: http.StatusServiceUnavailable, msg: "dashboard: " + r.Context().Err().Error()}
		case <-time.After(whoamiWait):
		}
		rec = d.callAPI(r.Context(), r, http.MethodGet, api.PathACLSelf, tok)
	}
	switch rec.code {
	case http.StatusOK:
	case http.StatusTemporaryRedirect:
		return Viewer{}, &refusal{code: http.StatusUnauthorized, leader: rec.header.Get("Location"),
			msg: "this server does not know the token (yet): a token made a moment ago may not have reached it"}
	default:
		return Viewer{}, &refusal{code: rec.code, msg: rec.errorText()}
	}
	var t api.Token
	if err := json.Unmarshal(rec.body.Bytes(), &t); err != nil {
		return Viewer{}, &refusal{code: http.StatusInternalServerError, msg: "dashboard: unreadable token answer: " + err.Error()}
	}
	v := Viewer{Name: t.Name, Role: t.Role, Accessor: t.Accessor}
	role, err := state.ParseRole(t.Role)
	if err == nil {
		v.CancelAny = role.Allows(state.RoleAdmin)
		v.CancelOwn = role.Allows(state.RoleSubmit)
	}
	return v, nil
}

// callAPI sends one request to the API in process, with tok as its
// bearer token, on behalf of r (its peer and TLS state).
func (d *Dashboard) callAPI(ctx context.Context, r *http.Request, method, path, tok string) *recorder {
	req, err := http.NewRequestWithContext(ctx, method, (&url.URL{Path: path}).String(), http.NoBody)
	rec := &recorder{header: http.Header{}}
	if err != nil {
		rec.code = http.StatusBadRequest
		_ = json.NewEncoder(&rec.body).Encode(api.Error{Error: "dashboard: " + err.Error()})
		return rec
	}
	req.RemoteAddr, req.TLS, req.Host = r.RemoteAddr, r.TLS, r.Host
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	d.cfg.API.ServeHTTP(rec, req)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return rec
}

// recorder is the answer of an in-process API call.
type recorder struct {
	code   int
	header http.Header
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	if r.body.Len() > 1<<20 {
		return 0, errors.New("dashboard: API answer too large")
	}
	return r.body.Write(b)
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

// errorText is the API's error message (or the body as text).
func (r *recorder) errorText() string {
	var e api.Error
	if json.Unmarshal(r.body.Bytes(), &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(r.body.String())
}
