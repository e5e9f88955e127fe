package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// need returns the path of tool, or skips the test naming the Debian
// package that has it; under CI (CI=true) a missing tool of ci fails.
func need(t *testing.T, tool, pkg string, ci bool) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	if ci && os.Getenv("CI") == "true" {
		t.Fatalf("%s not found: CI installs Debian package %s (.ci/run)", tool, pkg)
	}
	t.Skipf("%s not found: install Debian package %s to check these files", tool, pkg)
	return ""
}

var units = []string{"pollux-server.service", "pollux-agent.service"}

// TestSystemdUnitsAreHardened: each unit has the usual hardening, runs
// pollux with its configuration file, and reloads on SIGHUP.
func TestSystemdUnitsAreHardened(t *testing.T) {
	want := map[string][]string{
		"pollux-server.service": {"User=pollux", "ExecStart=/usr/local/bin/pollux server --config /etc/pollux/server.yaml",
			"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "CapabilityBoundingSet=",
			"LimitNOFILE=", "StateDirectory=pollux", "ExecReload=/bin/kill -HUP $MAINPID"},
		"pollux-agent.service": {"ExecStart=/usr/local/bin/pollux agent --config /etc/pollux/agent.yaml",
			"NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "CapabilityBoundingSet=CAP_SETUID",
			"LimitNOFILE=", "ReadWritePaths=", "KillMode=mixed", "ExecReload=/bin/kill -HUP $MAINPID"},
	}
	for _, u := range units {
		b, err := os.ReadFile(filepath.Join("systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for _, w := range want[u] {
			found := false
			for _, l := range lines {
				found = found || strings.HasPrefix(l, w)
			}
			if !found {
				t.Errorf("%s has no line %q", u, w)
			}
		}
	}
}

// TestSystemdUnitsVerify runs systemd-analyze verify on the units, with
// the binary's path pointed at an executable (verify checks it exists),
// where systemd is installed.
func TestSystemdUnitsVerify(t *testing.T) {
	tool := need(t, "systemd-analyze", "systemd", false)
	dir := t.TempDir()
	var paths []string
	for _, u := range units {
		b, err := os.ReadFile(filepath.Join("systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/pollux"), []byte("/bin/true"))
		p := filepath.Join(dir, u)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(tool, append([]string{"verify"}, paths...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// rules is the alert rules file.
var rules = filepath.Join("prometheus", "pollux-alerts.yml")

// TestAlertRulesCheck runs promtool check rules on the alert rules.
func TestAlertRulesCheck(t *testing.T) {
	tool := need(t, "promtool", "prometheus", true)
	out, err := exec.Command(tool, "check", "rules", rules).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

var (
	metricRef = regexp.MustCompile(`\bpollux_[a-z_]+\b`)
	// registered finds the names of metrics in Go source: the first
	// argument of prometheus.NewDesc, or the Name of prometheus options.
	registered = regexp.MustCompile(`(?:NewDesc\(|Name:\s*)"(pollux_[a-z_]+)"`)
)

// TestAlertRulesUseRealMetrics: every metric an alert reads is one the
// servers register, and the four alerts of docs/deploy.md are there.
func TestAlertRulesUseRealMetrics(t *testing.T) {
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	files, err := filepath.Glob(filepath.Join("..", "actors", "server", "api", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range registered.FindAllSubmatch(src, -1) {
			have[string(m[1])] = true
		}
	}
	if len(have) == 0 {
		t.Fatal("no metric registrations found in actors/server/api")
	}
	var alerts []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, name := range metricRef.FindAllString(r.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if trimmed, ok := strings.CutSuffix(name, suffix); ok && have[trimmed] {
						base = trimmed
					}
				}
				if !have[base] {
					t.Errorf("alert %s reads %s, which no server registers", r.Alert, name)
				}
			}
		}
	}
	sort.Strings(alerts)
	want := []string{"PolluxJobCrashLooping", "PolluxNoLeader", "PolluxRoundsSlowerThanInterval", "PolluxServerDown"}
	if strings.Join(alerts, " ") != strings.Join(want, " ") {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}
