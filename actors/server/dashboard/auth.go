package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"pollux/actors/server/api"
	"pollux/consensus/state"
)

// Sign-in: a browser signs in by POSTing the token as the form field
// FormToken to PathLogin, from this dashboard's own page; the page at
// PathLogin posts a token it finds in the URL's fragment (#token=SECRET,
// which never reaches a server or a log). A token in a query is refused:
// a GET that another site can trigger must not sign a browser in.
const (
	PathLogin = Prefix + "login"
	FormToken = "token"
	FormNext  = "next"
	// QueryToken is the query parameter that older URLs handed the page a
	// token in; it is refused with the way to sign in.
	QueryToken = "token"
)

// CookieName is the name of the cookie that holds the viewer's token on
// the dashboard r reaches: one per port (servers on one machine do not
// share or overwrite each other's cookies) and, over HTTPS,
// "__Host-" prefixed, which a browser keeps to this host, path / and
// secure connections.
func CookieName(r *http.Request) string {
	port := ""
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		_, port, _ = net.SplitHostPort(a.String())
	}
	if port == "" {
		_, port, _ = net.SplitHostPort(r.Host)
	}
	if port == "" {
		port = "80"
		if r.TLS != nil {
			port = "443"
		}
	}
	if r.TLS != nil {
		return "__Host-pollux_token_" + port
	}
	return "pollux_token_" + port
}

// Errors of token decoding.
var (
	ErrNoToken  = errors.New("dashboard: no token")
	ErrBadToken = errors.New("dashboard: malformed token")
	// ErrQueryToken is a token in the URL's query, which no longer
	// signs in (see PathLogin).
	ErrQueryToken = errors.New("dashboard: a token in the URL's query does not sign in: open " + PathLogin + "#token=SECRET or sign in on " + PathLogin)
)

// ParseToken checks a token as it comes from the sign-in form, a cookie
// or an Authorization header: 1 to api.MaxSecret characters of printable ASCII
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

// tokenOf finds the request's token: its cookie, else its
// Authorization: Bearer header (for scripts). No token at all is
// ErrNoToken; a token in the query is ErrQueryToken.
func tokenOf(r *http.Request) (string, error) {
	if r.URL.Query().Has(QueryToken) {
		return "", ErrQueryToken
	}
	if c, err := r.Cookie(CookieName(r)); err == nil {
		return ParseToken(c.Value)
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(strings.TrimSpace(h), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", fmt.Errorf("%w: authorization scheme %.16q (want Bearer)", ErrBadToken, scheme)
		}
		return ParseToken(strings.TrimSpace(secret))
	}
	return "", ErrNoToken
}

// nextPage is where a sign-in goes on to: next if it is a path under
// Prefix (never another host, nor the sign-in page), else Prefix.
func nextPage(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, Prefix) ||
		strings.HasPrefix(u.Path, "//") || strings.Contains(u.Path, "\\") || u.Path == PathLogin || u.Query().Has(QueryToken) {
		return Prefix
	}
	u.Fragment = ""
	return u.String()
}

// tokenCookie is the cookie that carries tok.
func tokenCookie(r *http.Request, tok string) *http.Cookie {
	c := &http.Cookie{Name: CookieName(r), Value: tok, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteLaxMode}
	if r.TLS != nil {
		c.Secure, c.Path = true, "/"
	}
	return c
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
