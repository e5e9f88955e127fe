package client_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pollux/actors/server/api/client"
)

// TestExportsEvaluate evaluates the line in a shell and reads it back
// with FromEnv: the addresses, the CA and the token file's secret (or
// the secret itself), for paths and secrets with spaces, quotes and shell
// syntax too.
func TestExportsEvaluate(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := filepath.Join(t.TempDir(), "it's a dir")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "admin token")
	if err := os.WriteFile(tokenFile, []byte("plx_secret-of-the-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		servers   []string
		ca, token string
		// secret: token is the secret itself (ExportsSecret), not its file.
		secret bool
		want   []string // POLLUX_SERVERS, POLLUX_CA, POLLUX_TOKEN
	}{
		{"all", []string{"127.0.0.1:8080", "127.0.0.1:8081"}, filepath.Join(dir, "ca.pem"), tokenFile, false,
			[]string{"127.0.0.1:8080,127.0.0.1:8081", filepath.Join(dir, "ca.pem"), "plx_secret-of-the-test"}},
		{"insecure", []string{"http://127.0.0.1:8080"}, "", "", false, []string{"http://127.0.0.1:8080", "", ""}},
		{"secret", []string{"127.0.0.1:8080"}, filepath.Join(dir, "ca.pem"), "plx_it's-$(true)-a `secret`", true,
			[]string{"127.0.0.1:8080", filepath.Join(dir, "ca.pem"), "plx_it's-$(true)-a `secret`"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := client.Exports(tt.servers, tt.ca, tt.token)
			if tt.secret {
				line = client.ExportsSecret(tt.servers, tt.ca, tt.token)
			} else if strings.Contains(line, "plx_secret") {
				t.Fatalf("the line shows the secret: %s", line)
			}
			out, err := exec.Command(sh, "-c", line+`; printf '%s\n%s\n%s' "$POLLUX_SERVERS" "$POLLUX_CA" "$POLLUX_TOKEN"`).Output()
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			if got := strings.Split(string(out), "\n"); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("%s\ngives %q, want %q", line, got, tt.want)
			}
		})
	}
}

func ExampleExports() {
	fmt.Println(client.Exports([]string{"127.0.0.1:8080", "127.0.0.1:8081"}, "/tmp/demo/tls/pollux-ca.pem", "/tmp/demo/admin.token"))
	// Output:
	// export POLLUX_SERVERS=127.0.0.1:8080,127.0.0.1:8081 POLLUX_CA=/tmp/demo/tls/pollux-ca.pem POLLUX_TOKEN="$(cat /tmp/demo/admin.token)"
}
