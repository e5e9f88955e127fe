package dashboard

import (
	"errors"
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

func TestTokenOfPrefersQueryThenCookieThenHeader(t *testing.T) {
	r := httptest.NewRequest("GET", "/ui/?token=q", nil)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: "c"})
	r.Header.Set("Authorization", "Bearer h")
	if tok, q, err := tokenOf(r); tok != "q" || !q || err != nil {
		t.Errorf("query: %q %v %v", tok, q, err)
	}
	r.URL.RawQuery = ""
	if tok, q, err := tokenOf(r); tok != "c" || q || err != nil {
		t.Errorf("cookie: %q %v %v", tok, q, err)
	}
	r.Header.Del("Cookie")
	if tok, q, err := tokenOf(r); tok != "h" || q || err != nil {
		t.Errorf("header: %q %v %v", tok, q, err)
	}
	r.Header.Del("Authorization")
	if _, _, err := tokenOf(r); !errors.Is(err, ErrNoToken) {
		t.Errorf("none: %v", err)
	}
}

func TestRedirectStaysOnThisServer(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"/ui/?token=x", "/ui/"},
		{"/ui/jobs/a%2Fb?token=x&y=1", "/ui/jobs/a%2Fb?y=1"},
		{"/ui/jobs?token=x&token=y", "/ui/jobs"},
	} {
		r := httptest.NewRequest("GET", tc.target, nil)
		if got := withoutToken(r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.target, got, tc.want)
		}
	}
	// A request that is somehow not under the prefix goes to the prefix.
	r := httptest.NewRequest("GET", "/x?token=1", nil)
	r.URL.Path = "//evil.example/ui/"
	if got := withoutToken(r); got != Prefix {
		t.Errorf("foreign path: %q", got)
	}
}

// FuzzTokenOf feeds arbitrary queries, cookies and headers to the
// token decoding: it never panics, and a token it accepts survives the
// cookie it is put in and the redirect it is removed by.
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
			r.Header.Set("Cookie", CookieName+"="+cookie)
		}
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		tok, fromQuery, err := tokenOf(r)
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
		got, err := back.Cookie(CookieName)
		if err != nil || got.Value != tok {
			t.Fatalf("token %q through its cookie: %v %v", tok, got, err)
		}
		if fromQuery {
			loc := withoutToken(r)
			u, err := url.Parse(loc)
			if err != nil || u.Host != "" || !strings.HasPrefix(u.Path, Prefix) || u.Query().Has(QueryToken) {
				t.Fatalf("redirect %q after the exchange", loc)
			}
		}
	})
}
