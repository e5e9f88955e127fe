package node

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"pollux/internal/rootgate"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/actors/pb"
)

func TestAllowCommands(t *testing.T) {
	def, err := ParseAllowCommands(nil)
	if err != nil {
		t.Fatal(err)
	}
	custom, err := ParseAllowCommands([]string{"emulated:cifar*", "/usr/bin/python3 /srv/jobs/*/train.py **", "/opt/bin/exact --flag"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		patterns []CommandPattern
		app      string
		argv     []string
		ok       bool
	}{
		{"default: emulated", def, "imagenet", nil, true},
		{"default: worker library", def, "", []string{"/usr/bin/python3", "/opt/pollux/worker/train_digits.py", "--model", "cnn"}, true},
		{"default: no arguments after the script", def, "", []string{"/usr/bin/python3", "/opt/pollux/worker/train_digits.py"}, true},
		{"default: shell", def, "", []string{"/bin/sh", "-c", "id"}, false},
		{"default: python -c", def, "", []string{"/usr/bin/python3", "-c", "import os"}, false},
		{"default: script elsewhere", def, "", []string{"/usr/bin/python3", "/tmp/x.py"}, false},
		{"default: .. out of the directory", def, "", []string{"/usr/bin/python3", "/opt/pollux/worker/../../../tmp/x.py"}, false},
		{"default: subdirectory", def, "", []string{"/usr/bin/python3", "/opt/pollux/worker/sub/x.py"}, false},
		{"default: bare python", def, "", []string{"python3", "/opt/pollux/worker/train_digits.py"}, false},
		{"default: interpreter only", def, "", []string{"/usr/bin/python3"}, false},
		{"custom: app glob", custom, "cifar10", nil, true},
		{"custom: other app", custom, "imagenet", nil, false},
		{"custom: script", custom, "", []string{"/usr/bin/python3", "/srv/jobs/a/train.py", "x"}, true},
		{"custom: script two levels down", custom, "", []string{"/usr/bin/python3", "/srv/jobs/a/b/train.py"}, false},
		{"custom: exact", custom, "", []string{"/opt/bin/exact", "--flag"}, true},
		{"custom: exact plus one", custom, "", []string{"/opt/bin/exact", "--flag", "more"}, false},
		{"custom: exact minus one", custom, "", []string{"/opt/bin/exact"}, false},
		{"none", nil, "", []string{"/bin/true"}, false},
		{"none, emulated", nil, "cifar10", nil, false},
	}
	for _, tc := range tests {
		err := allowed(tc.patterns, tc.app, tc.argv)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errDenied)) {
			t.Errorf("%s: %v, want allowed %v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--allow-command") {
			t.Errorf("%s: %v does not say how to allow it", tc.name, err)
		}
	}
	for _, bad := range []string{"", "   ", "**", "emulated:", "emulated:[", "/bin/[ x", "/bin/x ** y"} {
		if _, err := ParseAllowCommands([]string{bad}); !errors.Is(err, ErrPattern) {
			t.Errorf("pattern %q: %v, want ErrPattern", bad, err)
		}
	}
	if ps, err := ParseAllowCommands([]string{}); err != nil || len(ps) != 0 {
		t.Errorf("an empty allow-list: %v, %v", ps, err)
	}
}

func TestCheckpointDirMustBeUnderTheRoot(t *testing.T) {
	tests := []struct {
		root, dir, mention string
	}{
		{"/ck", "/ck/j", ""},
		{"/ck", "/ck/a/b", ""},
		{"/", "/j", ""},
		{"", "/ck/j", "no checkpoint root"},
		{"/ck", "/ck", "outside"},
		{"/ck", "/ckpt/j", "outside"},
		{"/ck", "/etc", "outside"},
		{"/ck", "ck/j", "absolute path"},
		{"/ck", "/ck/../etc", `".."`},
		{"/ck", "/ck/j/..", `".."`},
		{"/ck", "/ck//j", "not a clean path"},
		{"/ck", "/ck/j/", "not a clean path"},
		{"/ck", "/ck/./j", "not a clean path"},
		{"ck", "ck/j", "root"},
		{"/ck/", "/ck/j", "root"},
	}
	for _, tc := range tests {
		err := checkCheckpointDir(tc.root, tc.dir)
		if tc.mention == "" {
			if err != nil {
				t.Errorf("%q under %q: %v", tc.dir, tc.root, err)
			}
			continue
		}
		if !errors.Is(err, errDenied) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%q under %q: %v, want a denial mentioning %s", tc.dir, tc.root, err, tc.mention)
		}
	}
}

func TestPrepareCheckpointDirStaysInTheRoot(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "real")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(root, "escape")))
	must(os.Symlink("real", filepath.Join(root, "inside")))
	must(os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "absolute")))
	must(os.Symlink("../outside", filepath.Join(root, "relative")))
	must(os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(root, "dangling")))
	must(os.WriteFile(filepath.Join(root, "file"), nil, 0o644))

	// Created, and kept in the root through a link that stays inside.
	for _, dir := range []string{filepath.Join(root, "j1"), filepath.Join(root, "a", "b", "j2"), filepath.Join(root, "inside", "j3")} {
		if err := prepareCheckpointDir(root, dir, nil, "", false); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Errorf("%s not made: %v", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "real", "j3")); err != nil {
		t.Errorf("through the inside link: %v", err)
	}
	for _, tc := range []struct{ dir, mention string }{
		{filepath.Join(root, "escape", "j"), "outside the checkpoint root"},
		{filepath.Join(root, "escape"), "outside the checkpoint root"},
		{filepath.Join(root, "relative", "j"), "outside the checkpoint root"},
		{filepath.Join(root, "dangling", "j"), "dangling"},
		{filepath.Join(root, "file", "j"), "not a directory"},
		{filepath.Join(root, "file"), "not a directory"},
		{filepath.Join(root, "absolute", "j"), "must be relative"},
	} {
		err := prepareCheckpointDir(root, tc.dir, nil, "", false)
		if !errors.Is(err, errDenied) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v, want a denial mentioning %q", tc.dir, err, tc.mention)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("created outside the root: %v", ents)
	}
	if _, err := os.Lstat(filepath.Join(base, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
}

// nobody is the unprivileged user of the run-as tests (they need root).
func nobody(t *testing.T) *RunAs {
	t.Helper()
	rootgate.NeedRoot(t, "runs workers as another user")
	u, err := user.Lookup("nobody")
	if err != nil {
		rootgate.Skip(t, "no user nobody: %v", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &RunAs{User: "nobody", UID: uint32(uid), GID: uint32(gid)}
}

func TestPrepareCheckpointDirGivesItToTheWorkersUser(t *testing.T) {
	owner := nobody(t)
	root := t.TempDir()
	dir := filepath.Join(root, "a", "j")
	if err := prepareCheckpointDir(root, dir, owner, "", false); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint32{dir: owner.UID, filepath.Join(root, "a"): uint32(os.Geteuid())} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid != want {
			t.Errorf("%s owned by %d, want %d", p, uid, want)
		}
	}
}

// TestNodeRunsWorkersAsTheRunAsUser: a real worker process (a shell
// command in the allow-list) runs as the run-as user, with only the
// protocol's variables and the passed ones in its environment, and can
// write its checkpoint directory.
func TestNodeRunsWorkersAsTheRunAsUser(t *testing.T) {
	owner := nobody(t)
	f := newFixture(t, 1, time.Second)
	// The root is shared storage the workers' user reaches.
	for _, d := range []string{filepath.Dir(f.root), f.root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.allow = []string{"/bin/sh -c **"}
	f.env = []string{"PASSED=yes"}
	f.restartWith(func(c *Config) { c.RunAs = owner })
	t.Setenv("SECRET_OF_THE_AGENT", "x")
	rj := f.run("shell", 1, 1, "")
	rj.Application, rj.Command = "", []string{"/bin/sh", "-c", `id -u > "$POLLUX_CHECKPOINT_DIR/uid"; env > "$POLLUX_CHECKPOINT_DIR/env"`}
	if ack := f.assign(1, rj); !ack.Ok || len(ack.Runs) != 1 || ack.Runs[0].Denied != "" {
		t.Fatalf("ack %v\n%s", ack, f.log)
	}
	if m, ok := f.next(5 * time.Second).(*pb.WorkerExited); !ok || m.ExitCode != 0 {
		t.Fatalf("exit %v", m)
	}
	uid, err := os.ReadFile(filepath.Join(rj.CheckpointDir, "uid"))
	if err != nil || strings.TrimSpace(string(uid)) != strconv.Itoa(int(owner.UID)) {
		t.Errorf("worker ran as uid %q (%v), want %d", uid, err, owner.UID)
	}
	env, _ := os.ReadFile(filepath.Join(rj.CheckpointDir, "env"))
	checkCleanEnv(t, strings.Split(strings.TrimSpace(string(env)), "\n"))
}

// checkCleanEnv checks a worker's environment: the protocol's variables,
// PASSED=yes, and only what a shell adds by itself.
func checkCleanEnv(t *testing.T, env []string) {
	t.Helper()
	passed := false
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case kv == "PASSED=yes":
			passed = true
		case strings.HasPrefix(k, "POLLUX_"), k == "RANK", k == "LOCAL_RANK", k == "WORLD_SIZE", k == "MASTER_ADDR",
			k == "MASTER_PORT", k == "CUDA_VISIBLE_DEVICES":
		case k == "PWD", k == "SHLVL", k == "_", k == "OLDPWD": // the shell's own
		default:
			t.Errorf("worker environment has %s", kv)
		}
	}
	if !passed {
		t.Errorf("worker environment lacks PASSED=yes: %v", env)
	}
}

func TestWorkerEnvironmentIsClean(t *testing.T) {
	t.Setenv("SECRET_OF_THE_AGENT", "x")
	f := newFixture(t, 1, time.Second)
	f.env = []string{"PASSED=yes"}
	f.restartWith(nil)
	rj := f.run("envcheck", 1, 1, "env")
	if ack := f.assign(1, rj); !ack.Ok {
		t.Fatal(ack.Error)
	}
	f.reports(1)
	b, err := os.ReadFile(filepath.Join(rj.CheckpointDir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	checkCleanEnv(t, strings.Split(string(b), "\n"))
}

// FuzzAllowCommands: no pattern or command panics; a parsed pattern
// allows only commands whose every matched word is a path.Match of its
// word (a '*' never matches a '/').
func FuzzAllowCommands(f *testing.F) {
	f.Add("/usr/bin/python3 /opt/pollux/worker/*.py **", "/usr/bin/python3\x00/opt/pollux/worker/a.py\x00x")
	f.Add("emulated:c*", "")
	f.Add("/bin/[a-z]* -c", "/bin/sh\x00-c")
	f.Fuzz(func(t *testing.T, pattern, command string) {
		ps, err := ParseAllowCommands([]string{pattern})
		if err != nil {
			return
		}
		argv := strings.Split(command, "\x00")
		if allowed(ps, "", argv) == nil && !ps[0].isApp {
			for i, w := range ps[0].words {
				if strings.Count(argv[i], "/") != strings.Count(w, "/") && !strings.ContainsAny(w, "[\\") {
					t.Fatalf("pattern %q allowed %q: word %q matched %q", pattern, argv, w, argv[i])
				}
			}
		}
		_ = allowed(ps, command, nil)
	})
}

// FuzzCheckpointDir: no path panics; an accepted one is strictly below
// the root and holds no "..".
func FuzzCheckpointDir(f *testing.F) {
	f.Add("/ck", "/ck/j")
	f.Add("/ck", "/ck/../etc")
	f.Add("/", "/a")
	f.Fuzz(func(t *testing.T, root, dir string) {
		if checkCheckpointDir(root, dir) != nil {
			return
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || strings.Contains(dir, "/../") || filepath.Clean(dir) != dir {
			t.Fatalf("accepted %q under %q (relative %q, %v)", dir, root, rel, err)
		}
	})
}

// A run that names its own checkpoint root (a borrower's, set by the
// lender's leader) is admitted under that root, not the Assign's, and
// refused outside it.
func TestRunCheckpointRootOverridesTheAssigns(t *testing.T) {
	f := newFixture(t, 2, time.Second)
	borrowerRoot := t.TempDir()
	in := f.run("borrowed", 1, 1, "serve")
	in.CheckpointDir, in.CheckpointRoot = filepath.Join(borrowerRoot, "borrowed"), borrowerRoot
	out := f.run("escaped", 1, 1, "serve")
	out.CheckpointRoot = borrowerRoot // its directory is under the Assign's root only
	ack := f.assign(1, in, out)
	if !ack.Ok || len(ack.Runs) != 2 {
		t.Fatalf("ack %v\n%s", ack, f.log)
	}
	for _, rs := range ack.Runs {
		switch rs.Job {
		case "borrowed":
			if rs.Denied != "" {
				t.Errorf("a run under its own root refused: %s", rs.Denied)
			}
		case "escaped":
			if !strings.Contains(rs.Denied, "outside the cluster's checkpoint root "+borrowerRoot) {
				t.Errorf("a run outside its own root: %v", rs)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(borrowerRoot, "borrowed")); err != nil {
		t.Errorf("the borrowed run's checkpoint directory was not prepared: %v", err)
	}
}
