package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pollux/actors/pb"
	"pollux/internal/poll"
)

// needRoot skips a test that switches uids when not run as root, or
// fails it when POLLUX_REQUIRE_ROOT=1 (CI jobs that run as root).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("POLLUX_REQUIRE_ROOT") == "1" {
		t.Fatal("needs root (runs workers as uids of their own) and POLLUX_REQUIRE_ROOT=1")
	}
	t.Skip("needs root: runs workers as uids of their own (set POLLUX_REQUIRE_ROOT=1 to fail instead)")
}

func TestParseUIDRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want UIDRange
		err  string
	}{
		{in: "900000-900999", want: UIDRange{900000, 900999}},
		{in: "5-5", want: UIDRange{5, 5}},
		{in: "0-10", err: "never root"},
		{in: "10-5", err: "FIRST <= LAST"},
		{in: "10", err: "FIRST-LAST"},
		{in: "a-b", err: "FIRST-LAST"},
		{in: "1-4294967295", err: "4294967295"},
		{in: "-1-5", err: "FIRST-LAST"},
	} {
		got, err := ParseUIDRange(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: %v, want an error mentioning %q", tc.in, err, tc.err)
		}
	}
}

// TestUIDPool: each run gets a free uid, a uid given back is reused only
// after the others, and a full range refuses.
func TestUIDPool(t *testing.T) {
	p := newUIDPool(UIDRange{100, 102})
	var got []uint32
	users := map[string]*RunAs{}
	for _, j := range []string{"a", "b", "c"} {
		u, err := p.take(runKey{j, 1})
		if err != nil {
			t.Fatal(err)
		}
		users[j] = u
		got = append(got, u.UID)
	}
	if fmt.Sprint(got) != "[100 101 102]" || users["a"].GID != 100 || len(users["a"].Groups) != 0 {
		t.Fatalf("uids %v, user %+v", got, users["a"])
	}
	if _, err := p.take(runKey{"d", 1}); !errors.Is(err, errNoUID) {
		t.Fatalf("full range: %v", err)
	}
	p.give(users["b"])
	if u, err := p.take(runKey{"d", 1}); err != nil || u.UID != 101 {
		t.Fatalf("after a give back: %v %v", u, err)
	}
}

// TestJobsRunAsUIDsOfTheirOwn: two jobs on one node run as two uids of
// the range; each one's checkpoint directory is its uid's, mode 0700;
// the report token is in a file only that uid reads, never in the
// environment; a worker of one job can read neither the other's token
// file, nor its checkpoints, nor its environment, nor signal it. Once
// the runs are dropped their uids are free and their token files gone.
func TestJobsRunAsUIDsOfTheirOwn(t *testing.T) {
	needRoot(t)
	f := newFixture(t, 2, time.Second)
	tokens := t.TempDir()
	for _, d := range []string{filepath.Dir(f.root), f.root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(tokens, 0o711); err != nil {
		t.Fatal(err)
	}
	f.allow = []string{"/bin/sh -c **"}
	r := UIDRange{First: 900100, Last: 900101}
	f.restartWith(func(c *Config) { c.UIDs, c.TokenDir = &r, tokens })

	// The victim writes its pid and sleeps; the thief tries what a
	// worker of another tenant would.
	victim := f.run("victim", 1, 1, "")
	victim.Application, victim.Command = "", []string{"/bin/sh", "-c",
		`id -u > "$POLLUX_CHECKPOINT_DIR/uid"; echo $$ > "$POLLUX_CHECKPOINT_DIR/pid"; echo secret > "$POLLUX_CHECKPOINT_DIR/ckpt"; env > "$POLLUX_CHECKPOINT_DIR/env"; exec sleep 30`}
	if ack := f.assign(1, victim); !ack.Ok || len(ack.Runs) != 1 || ack.Runs[0].Denied != "" || ack.Runs[0].Refused != "" {
		t.Fatalf("ack %v\n%s", ack, f.log)
	}
	vdir := victim.CheckpointDir
	waitFile(t, filepath.Join(vdir, "env"))
	pid := strings.TrimSpace(readFile(t, filepath.Join(vdir, "pid")))
	vtok := filepath.Join(tokens, "victim.1.0")

	thief := f.run("thief", 1, 1, "")
	out := `"$POLLUX_CHECKPOINT_DIR/out"`
	thief.Application, thief.Command = "", []string{"/bin/sh", "-c", fmt.Sprintf(
		`id -u > "$POLLUX_CHECKPOINT_DIR/uid"; `+
			`cat %[1]s >/dev/null 2>&1; echo token $? >> %[2]s; `+
			`cat %[3]s/ckpt >/dev/null 2>&1; echo ckpt $? >> %[2]s; `+
			`ls %[3]s >/dev/null 2>&1; echo list $? >> %[2]s; `+
			`cat /proc/%[4]s/environ >/dev/null 2>&1; echo environ $? >> %[2]s; `+
			`kill -0 %[4]s 2>/dev/null; echo signal $? >> %[2]s; `+
			`touch %[3]s/planted 2>/dev/null; echo plant $? >> %[2]s; `+
			`cat "$POLLUX_REPORT_TOKEN_FILE" >/dev/null 2>&1; echo own $? >> %[2]s`,
		vtok, out, vdir, pid)}
	if ack := f.assign(2, victim, thief); !ack.Ok || len(ack.Runs) != 2 {
		t.Fatalf("ack %v\n%s", ack, f.log)
	}
	if m, ok := f.next(10 * time.Second).(*pb.WorkerExited); !ok || m.Job != "thief" || m.ExitCode != 0 {
		t.Fatalf("thief exit %v\n%s", m, f.log)
	}
	got := readFile(t, filepath.Join(thief.CheckpointDir, "out"))
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		what, code, _ := strings.Cut(line, " ")
		if (what == "own") != (code == "0") {
			t.Errorf("the thief's %s: exit %s (want 0 only for its own token file)", what, code)
		}
	}
	if n := strings.Count(got, "\n"); n != 7 {
		t.Errorf("thief's tries: %q", got)
	}

	uids := map[string]string{}
	for _, rj := range []*pb.RunJob{victim, thief} {
		uid := strings.TrimSpace(readFile(t, filepath.Join(rj.CheckpointDir, "uid")))
		uids[uid] = rj.Job
		st := stat(t, rj.CheckpointDir)
		if strconv.Itoa(int(st.Uid)) != uid || st.Mode&0o777 != 0o700 {
			t.Errorf("%s: checkpoint directory owned by %d mode %o, want uid %s mode 700", rj.Job, st.Uid, st.Mode&0o777, uid)
		}
		tf := stat(t, filepath.Join(tokens, rj.Job+".1.0"))
		if strconv.Itoa(int(tf.Uid)) != uid || tf.Mode&0o777 != 0o400 {
			t.Errorf("%s: token file owned by %d mode %o, want uid %s mode 400", rj.Job, tf.Uid, tf.Mode&0o777, uid)
		}
	}
	if len(uids) != 2 || uids["900100"] == "" || uids["900101"] == "" {
		t.Errorf("the jobs ran as %v, want 900100 and 900101", uids)
	}
	env := readFile(t, filepath.Join(vdir, "env"))
	if strings.Contains(env, "POLLUX_REPORT_TOKEN=") || strings.Contains(env, victim.ReportTokens[0]) || !strings.Contains(env, "POLLUX_REPORT_TOKEN_FILE="+vtok) {
		t.Errorf("the victim's environment carries its token, or not the file:\n%s", env)
	}

	// Dropped: uids and token files given back.
	if ack := f.assign(3); !ack.Ok {
		t.Fatalf("ack %v", ack)
	}
	poll.Until(t, 10*time.Second, "the condition", func() bool {
		_, err1 := os.Stat(vtok)
		_, err2 := os.Stat(filepath.Join(tokens, "thief.1.0"))
		return errors.Is(err1, os.ErrNotExist) && errors.Is(err2, os.ErrNotExist)
	})
	next := f.run("next", 1, 1, "")
	next.Application, next.Command = "", []string{"/bin/sh", "-c", `id -u > "$POLLUX_CHECKPOINT_DIR/uid"`}
	next2 := f.run("next2", 1, 1, "")
	next2.Application, next2.Command = next.Application, next.Command
	if ack := f.assign(4, next, next2); !ack.Ok || len(ack.Runs) != 2 || ack.Runs[0].Refused != "" || ack.Runs[1].Refused != "" {
		t.Fatalf("after the give back: ack %v\n%s", ack, f.log)
	}
}

// TestCheckpointSymlinkSwap: while a directory of the path to a job's
// checkpoint directory is swapped between a real directory and a link
// out of the root, preparing the directory never creates, chowns or
// chmods anything outside the root.
func TestCheckpointSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := stat(t, outside)
	swap := filepath.Join(root, "swap")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmp := filepath.Join(root, "swap.tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.RemoveAll(tmp)
			if i%2 == 0 {
				_ = os.Symlink(outside, tmp)
			} else {
				_ = os.Mkdir(tmp, 0o755)
			}
			_ = os.Rename(tmp, swap) // atomic replacement, as an attacker would
			if fi, err := os.Lstat(swap); err == nil && fi.IsDir() {
				_ = os.RemoveAll(swap)
			}
		}
	}()
	var owner *RunAs
	if os.Geteuid() == 0 {
		owner = &RunAs{User: "uid 900200", UID: 900200, GID: 900200}
	}
	okRuns := 0
	for i := 0; i < 300; i++ {
		if prepareCheckpointDir(root, filepath.Join(swap, "j"), owner, "", false) == nil {
			okRuns++
		}
	}
	close(stop)
	wg.Wait()
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 || ents[0].Name() != "victim" {
		t.Errorf("created outside the root: %v", ents)
	}
	after := stat(t, outside)
	if after.Uid != before.Uid || after.Mode != before.Mode {
		t.Errorf("the directory outside changed owner or mode: %d %o, was %d %o", after.Uid, after.Mode, before.Uid, before.Mode)
	}
	if v := stat(t, filepath.Join(outside, "victim")); v.Uid != before.Uid {
		t.Errorf("a file outside was given to uid %d", v.Uid)
	}
	t.Logf("%d of 300 preparations succeeded (in the real directory) while the link was swapped", okRuns)
}

// TestCheckpointDirContentsGiven: a resumed job's directory, with what
// an earlier uid wrote in it, is given to the new uid, links in it
// included (the links themselves, never their targets).
func TestCheckpointDirContentsGiven(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	dir := filepath.Join(root, "j")
	for _, d := range []string{filepath.Join(dir, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "ckpt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	owner := &RunAs{User: "uid 900300", UID: 900300, GID: 900300}
	if err := prepareCheckpointDir(root, dir, owner, "", false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "sub"), filepath.Join(dir, "sub", "ckpt")} {
		if st := stat(t, p); st.Uid != owner.UID || st.Gid != owner.GID {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}
	var l syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dir, "out"), &l); err != nil || l.Uid != owner.UID {
		t.Errorf("the link in it: %v uid %d", err, l.Uid)
	}
	if st := stat(t, outside); st.Uid == owner.UID {
		t.Errorf("the link's target outside was given away")
	}
	if st := stat(t, dir); st.Mode&0o777 != 0o700 {
		t.Errorf("mode %o", st.Mode&0o777)
	}
}

func stat(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	poll.Until(t, 10*time.Second, "the condition", func() bool { _, err := os.Stat(p); return err == nil })
}
