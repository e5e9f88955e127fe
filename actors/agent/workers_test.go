package agent

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"pollux/actors/node"
)

func TestPassEnv(t *testing.T) {
	t.Setenv("POLLUX_PASS_A", "1")
	t.Setenv("POLLUX_PASS_EMPTY", "")
	env, err := passEnv([]string{"POLLUX_PASS_A", "POLLUX_PASS_EMPTY", "POLLUX_PASS_UNSET"})
	if err != nil || strings.Join(env, " ") != "POLLUX_PASS_A=1 POLLUX_PASS_EMPTY=" {
		t.Errorf("passEnv = %q, %v", env, err)
	}
	for _, bad := range []string{"", "A=B", "A\x00"} {
		if _, err := passEnv([]string{bad}); err == nil {
			t.Errorf("passEnv(%q) accepted", bad)
		}
	}
}

// --run-as resolves the agent's own user by name and by uid, with its
// groups; another user needs root.
func TestLookupRunAs(t *testing.T) {
	if r, err := lookupRunAs(""); r != nil || err != nil {
		t.Errorf("no --run-as: %+v, %v", r, err)
	}
	me, err := user.Current()
	if err != nil {
		t.Skip(err)
	}
	for _, name := range []string{me.Username, me.Uid} {
		r, err := lookupRunAs(name)
		if err != nil {
			t.Fatal(err)
		}
		if r.User != me.Username || strconv.Itoa(int(r.UID)) != me.Uid || strconv.Itoa(int(r.GID)) != me.Gid || len(r.Groups) == 0 {
			t.Errorf("lookupRunAs(%q) = %+v, want %s", name, r, me.Username)
		}
	}
	if os.Geteuid() != 0 {
		if _, err := lookupRunAs("0"); err == nil || !strings.Contains(err.Error(), "needs the agent to run as root") {
			t.Errorf("root's uid as another user: %v", err)
		}
	}
}

// The CA given to workers of another user is a readable copy.
func TestWorkerCA(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, err := workerCA(ca)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := os.Stat(filepath.Join(dir, "ca.pem"))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("copy %v, %v", st, err)
	}
	if d, err := os.Stat(dir); err != nil || d.Mode().Perm() != 0o755 {
		t.Errorf("directory %v, %v", d, err)
	}
	if _, err := workerCA(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Error("a missing CA copied")
	}
}

// TestRunAsRange: an agent running as root gets the default range
// unless --run-as says one user; a range needs root and excludes
// --run-as.
func TestRunAsRange(t *testing.T) {
	for _, tc := range []struct {
		name, s, runAs string
		euid           int
		want           string // "" nil
		err            string
	}{
		{name: "root default", euid: 0, want: node.DefaultUIDRange.String()},
		{name: "root with run-as", runAs: "nobody", euid: 0},
		{name: "not root", euid: 1000},
		{name: "given", s: "5000-5009", euid: 0, want: "5000-5009"},
		{name: "given, not root", s: "5000-5009", euid: 1000, err: "needs the agent to run as root"},
		{name: "both", s: "5000-5009", runAs: "nobody", euid: 0, err: "want one"},
		{name: "bad", s: "0-9", euid: 0, err: "never root"},
	} {
		r, err := runAsRange(tc.s, tc.runAs, tc.euid)
		got := ""
		if r != nil {
			got = r.String()
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v %v, want an error mentioning %q", tc.name, r, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.name, got, err, tc.want)
		}
	}
}
