package dashboard

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		in  string
		err error
	}{
		{"plx_abcDEF-_0123456789", nil},
		{"!#$%&'()*+-./:<=>?@[]^_`{|}~", nil},
		{"", ErrNoToken},
		{"a b", ErrBadToken},
		{"a;b", ErrBadToken},
		{"a,b", ErrBadToken},
		{`a"b`, ErrBadToken},
		{`a\b`, ErrBadToken},
		{"a\nb", ErrBadToken},
		{"é", ErrBadToken},
		{"\x7f", ErrBadToken},
		{strings.Repeat("x", 256), nil},
		{strings.Repeat("x", 257), ErrBadToken},
	}
	for _, tc := range tests {
		got, err := ParseToken(tc.in)
		if !errors.Is(err, tc.err) || (err == nil && got != tc.in) {
			t.Errorf("ParseToken(%q) = %q, %v; want %v", tc.in, got, err, tc.err)
		}
	}
}

func TestTokenOfPrefersCookieThenHeader(t *testing.T) {
	r := httptest.NewRequest("GET", "/ui/", nil)
	r.AddCookie(&http.Cookie{Name: CookieName(r), Value: "c"})
	r.AddCookie(&http.Cookie{Name: "pollux_token_8080", Value: "another port's"})
	r.Header.Set("Authorization", "Bearer h")
	if tok, err := tokenOf(r); tok != "c" || err != nil {
		t.Errorf("cookie: %q %v", tok, err)
	}
	r.Header.Del("Cookie")
	if tok, err := tokenOf(r); tok != "h" || err != nil {
		t.Errorf("header: %q %v", tok, err)
	}
	r.Header.Del("Authorization")
	if _, err := tokenOf(r); !errors.Is(err, ErrNoToken) {
		t.Errorf("none: %v", err)
	}
	r.URL.RawQuery = "token=q"
	if _, err := tokenOf(r); !errors.Is(err, ErrQueryToken) {
		t.Errorf("query: %v", err)
	}
}

func TestCookieNamePerPort(t *testing.T) {
	for _, tc := range []struct {
		host string
		tls  bool
		want string
	}{
		{"127.0.0.1:8080", false, "pollux_token_8080"},
		{"127.0.0.1:8081", true, "__Host-pollux_token_8081"},
		{"example.com", true, "__Host-pollux_token_443"},
		{"[::1]:9000", false, "pollux_token_9000"},
	} {
		r := httptest.NewRequest("GET", "/ui/", nil)
		r.Host = tc.host
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if got := CookieName(r); got != tc.want {
			t.Errorf("%s (tls %v): %q, want %q", tc.host, tc.tls, got, tc.want)
		}
	}
	// The listener's own port wins over the Host header.
	r := httptest.NewRequest("GET", "/ui/", nil)
	r.Host = "127.0.0.1:1"
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7000}))
	if got := CookieName(r); got != "pollux_token_7000" {
		t.Errorf("local address: %q", got)
	}
}

func TestNextPageStaysOnThisServer(t *testing.T) {
	for _, tc := range []struct{ next, want string }{
		{"", "/ui/"},
		{"/ui/jobs/a%2Fb?y=1", "/ui/jobs/a%2Fb?y=1"},
		{"/ui/jobs?token=x", "/ui/"},
		{"/ui/login", "/ui/"},
		{"//evil.example/ui/", "/ui/"},
		{"https://evil.example/ui/", "/ui/"},
		{"/v1/jobs", "/ui/"},
		{"/ui/#x", "/ui/"},
	} {
		if got := nextPage(tc.next); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.next, got, tc.want)
		}
	}
}

// FuzzTokenOf feeds arbitrary queries, cookies and headers to the
// token decoding: it never panics, and a token it accepts survives the
// cookie it is put in; nextPage never leaves the dashboard.
func FuzzTokenOf(f *testing.F) {
	for _, s := range []string{"token=plx_abc", "token=a%20b", "token=%00", "token=x&token=y", "a=b", "token=" + strings.Repeat("z", 300)} {
		f.Add(s, "plx_cookie", "Bearer plx_h")
	}
	f.Add("", "a;b", "Basic x")
	f.Add("", "", "bearer  spaced ")
	f.Fuzz(func(t *testing.T, query, cookie, header string) {
		r := httptest.NewRequest("GET", "/ui/jobs", nil)
		r.URL.RawQuery = query
		if cookie != "" {
			r.Header.Set("Cookie", CookieName(r)+"="+cookie)
		}
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		if u, err := url.Parse(nextPage(query)); err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(u.Path, Prefix) {
			t.Fatalf("nextPage(%q) = %q", query, nextPage(query))
		}
		tok, err := tokenOf(r)
		if err != nil {
			if tok != "" {
				t.Fatalf("error %v with token %q", err, tok)
			}
			return
		}
		if _, perr := ParseToken(tok); perr != nil {
			t.Fatalf("accepted %q that ParseToken refuses: %v", tok, perr)
		}
		// The cookie carries it unchanged.
		c := tokenCookie(r, tok)
		back := httptest.NewRequest("GET", "/ui/", nil)
		back.Header.Set("Cookie", strings.SplitN(c.String(), ";", 2)[0])
		got, err := back.Cookie(CookieName(back))
		if err != nil || got.Value != tok {
			t.Fatalf("token %q through its cookie: %v %v", tok, got, err)
		}
	})
}
