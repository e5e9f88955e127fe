package attack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"time"

	"pollux/actors/server/dashboard"
)

// loginAttacks are another site's attempts to sign a victim's browser in
// to the dashboard with the attacker's token (login CSRF), as a browser
// would send them.
var loginAttacks = []attack{
	{name: "login-csrf-get-with-a-token", run: loginCSRF(http.MethodGet, dashboard.Prefix+"?"+dashboard.QueryToken+"=", "",
		http.StatusBadRequest, "refused a token in a URL's query")},
	{name: "login-csrf-cross-site-form", run: loginCSRF(http.MethodPost, dashboard.PathLogin, "https://attacker.example",
		http.StatusForbidden, "sign-in refused")},
}

// loginCSRF sends what another site's page can make a browser send, with
// the attacker's (a read token's) secret: refused if the server answers
// code, sets no cookie and logs a line naming the client.
func loginCSRF(method, path, origin string, code int, logged string) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		secret := t.tokens.reader
		var body io.Reader
		target := "https://" + t.leader.HTTP + path
		if method == http.MethodGet {
			target += url.QueryEscape(secret)
		} else {
			body = strings.NewReader(url.Values{dashboard.FormToken: {secret}}.Encode())
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, target, body)
		if err != nil {
			return err.Error(), false
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Sec-Fetch-Mode", "navigate")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		// A browser's client, without the launcher's admin token.
		hc, err := t.c.TLS().HTTPClient(10 * time.Second)
		if err != nil {
			return err.Error(), false
		}
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		var local string
		req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			local = ci.Conn.LocalAddr().String()
		}}))
		resp, err := hc.Do(req)
		if err != nil {
			return err.Error(), false
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if len(resp.Cookies()) > 0 {
			return fmt.Sprintf("answer %s set the cookie %s", resp.Status, resp.Cookies()[0].Name), false
		}
		if resp.StatusCode != code {
			return fmt.Sprintf("answer %s (want %d): %.200s", resp.Status, code, msg), false
		}
		line, ok := t.logLine(t.leader, logged, "peer="+local)
		if !ok {
			return fmt.Sprintf("answer %s, no cookie, but %s logged no %q line", resp.Status, t.leader.ID, logged), false
		}
		return fmt.Sprintf("answer %s, no cookie; %s logged: %s", resp.Status, t.leader.ID, logMsg(line)), true
	}
}
