package client

import (
	"fmt"
	"strings"
)

// Exports is the shell line that points the CLI at a cluster: its
// servers' API addresses, its CA file and, read from tokenFile when the
// line is evaluated (so that the secret is never printed), a token.
// Empty parts are left out.
func Exports(servers []string, ca, tokenFile string) string {
	token := ""
	if tokenFile != "" {
		token = fmt.Sprintf(`"$(cat %s)"`, shellQuote(tokenFile))
	}
	return exports(servers, ca, token)
}

// ExportsSecret is Exports with the token's secret itself in the line,
// for a command that shows the secret anyway (pollux acl bootstrap
// without a secret file).
func ExportsSecret(servers []string, ca, secret string) string {
	token := ""
	if secret != "" {
		token = shellQuote(secret)
	}
	return exports(servers, ca, token)
}

// exports is the export line of servers, ca and token, the last already
// quoted for the shell.
func exports(servers []string, ca, token string) string {
	parts := []string{"export"}
	if len(servers) > 0 {
		parts = append(parts, EnvServers+"="+shellQuote(strings.Join(servers, ",")))
	}
	if ca != "" {
		parts = append(parts, EnvCA+"="+shellQuote(ca))
	}
	if token != "" {
		parts = append(parts, EnvToken+"="+token)
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell: bare when it is made of safe
// characters, else in single quotes.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:,@+=", r)) {
			safe = false
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
