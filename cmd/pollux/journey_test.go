package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"pollux/actors/server/api"
	"pollux/cluster/pki"
	"pollux/consensus/state"
	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

// journey is an operator's view of a cluster in TestOperatorJourney:
// the CLI as a user runs it, with the cluster's addresses, CA and admin
// token.
type journey struct {
	t   *testing.T
	c   *testCluster
	dir string // the operator's files (specs, backup)
}

// cli runs `pollux ARGS` with the cluster's servers, CA and admin token.
func (j *journey) cli(args ...string) (int, string) {
	j.t.Helper()
	return j.cliAs(j.c.AdminToken(), args...)
}

// unavailable is the exit status of the CLI when no server could answer
// (none reachable, or each answered 5xx: no leader, say).
const unavailable = 1

// again runs f, as an operator would run a command again, while it exits
// with status unavailable (elections on a loaded machine), for at most
// two minutes, and returns its last exit status and output.
func (j *journey) again(what string, f func() (int, string)) (int, string) {
	j.t.Helper()
	code, out, _ := j.runs(what, f)
	return code, out
}

// runs is again that also says whether f ran more than once. Within one
// run the CLI's retries are idempotent (a write committed by a server
// whose answer was lost succeeds on the next server); a second run is a
// new request, which may find the first one's job.
func (j *journey) runs(what string, f func() (int, string)) (int, string, bool) {
	j.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for n := 1; ; n++ {
		code, out := f()
		if code != unavailable || time.Now().After(deadline) {
			return code, out, n > 1
		}
		j.t.Logf("%s, to be run again: %s", what, out)
		time.Sleep(time.Second)
	}
}

// spec writes a job spec of name, app and replica limits only, and
// returns its file.
func (j *journey) spec(name, app string, minReplicas, maxReplicas int) string {
	j.t.Helper()
	f := filepath.Join(j.dir, name+".yaml")
	body := fmt.Sprintf("name: %s\napplication: %s\nmin_replicas: %d\nmax_replicas: %d\n", name, app, minReplicas, maxReplicas)
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		j.t.Fatal(err)
	}
	return f
}

// submit is `pollux submit` of a spec of name, app and replica limits.
// A submission whose answer is lost (a slow server) is retried by the
// CLI on the next server, which answers as the first would have: only
// when the operator had to run the command again (every server failed
// the first run) may it find that the job exists (the names here are
// new, so it is this one).
func (j *journey) submit(name, app string, minReplicas, maxReplicas int) {
	j.t.Helper()
	f := j.spec(name, app, minReplicas, maxReplicas)
	code, out, rerun := j.runs("submit "+name, func() (int, string) { return j.cli("submit", f) })
	switch {
	case code == 0:
	case rerun && strings.Contains(out, fmt.Sprintf("job already exists: %q", name)):
		j.t.Logf("submit %s, run again after every server failed, found the first run's job: %s", name, out)
	default:
		j.t.Fatalf("submit %s: %d %s", name, code, out)
	}
}

// job is `pollux job ID --json`, nil when the servers do not answer it.
func (j *journey) job(id string) *api.Job {
	j.t.Helper()
	code, out := j.cli("job", id, "--json")
	var job api.Job
	if code != 0 || json.Unmarshal([]byte(out), &job) != nil {
		return nil
	}
	return &job
}

// jobs is `pollux jobs --json` by ID, nil when the servers do not answer.
func (j *journey) jobs() map[string]api.Job {
	j.t.Helper()
	code, out := j.cli("jobs", "--json")
	var js []api.Job
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil {
		return nil
	}
	byID := map[string]api.Job{}
	for _, job := range js {
		byID[job.ID] = job
	}
	return byID
}

// waitJob polls job id until ok holds, failing after within.
func (j *journey) waitJob(id, what string, within time.Duration, ok func(api.Job) bool) api.Job {
	j.t.Helper()
	var last *api.Job
	for deadline := time.Now().Add(within); ; time.Sleep(300 * time.Millisecond) {
		if last = cmp.Or(j.job(id), last); last != nil && ok(*last) {
			return *last
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("job %s not %s within %s; last seen %+v", id, what, within, last)
		}
	}
}

// placed reports whether a job runs with its workers placed.
func placed(job api.Job) bool {
	return job.State == state.Running.String() && len(job.Placement) > 0
}

// terminal reports whether a job has ended.
func terminal(job api.Job) bool {
	return slices.Contains([]string{state.Completed.String(), state.Failed.String(), state.Cancelled.String()}, job.State)
}

// bootstrapLine runs `pollux acl bootstrap` with the launcher's secret
// file and the client certificate, retrying while no leader takes it,
// and returns the export line it ends with.
func (j *journey) bootstrapLine(within time.Duration) string {
	j.t.Helper()
	cert, key, err := j.c.TLS().Files(pki.DevClient)
	if err != nil {
		j.t.Fatal(err)
	}
	for deadline := time.Now().Add(within); ; time.Sleep(300 * time.Millisecond) {
		code, out := runOut("acl", "bootstrap", "--server", httpAddrs(j.c.Servers), "--ca", j.c.TLS().CA,
			"--cert", cert, "--key", key, "--secret-file", j.c.TokenFile(), "--timeout", "10s")
		if code == 0 {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			line := lines[len(lines)-1]
			if !strings.HasPrefix(line, "export POLLUX_SERVERS=") || strings.Contains(out, j.c.AdminToken()) {
				j.t.Fatalf("acl bootstrap does not end with an export line, or shows the file's secret:\n%s", out)
			}
			return line
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("acl bootstrap: exit %d: %s", code, out)
		}
	}
}

// TestOperatorJourney runs a secure cluster (TLS, tokens, encrypted
// gossip; 3 servers and 2 agents, loopback) whose every process takes
// its settings from a config file alone, and checks from outside, as an
// operator and a user would: `pollux acl bootstrap` ends with a line
// that, evaluated in a shell, lets `pollux status` and `pollux submit`
// of a spec of only name, application and replica limits work with no
// other flag; a SIGHUP after an application is revoked from the agents'
// allow-list stops new workers of it while others run on; and `pollux
// operator snapshot save`, a wipe of every server's data and `snapshot
// restore` bring every job back, running again; and, on a job of its
// own (journey_logs_test.go), `pollux logs -f` prints the worker's lines
// within 1 s, an earlier incarnation's log stays readable after a
// resize, a read token gets 403 on the logs, and `pollux events --job
// ID --json` lists that job submitted, placed, resized and completed.
func TestOperatorJourney(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a multi-process cluster")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to evaluate the export line in")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	c := startCluster(ctx, t, launch.Options{Dir: filepath.Join(t.TempDir(), "cluster"), Servers: 3, Agents: 2, GPUsPerAgent: 4,
		Interval: 500 * time.Millisecond, LogLevel: "info", ConfigFiles: true,
		AgentArgs: []string{"--allow-command", "emulated:cifar10", "--allow-command", "emulated:imagenet"}})
	defer c.finish()
	j := &journey{t: t, c: c, dir: t.TempDir()}

	t.Run("config files only", func(t *testing.T) {
		for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", m.PID()))
			if err != nil {
				t.Fatalf("%s: %v", m.ID, err)
			}
			args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
			args = args[slices.Index(args, "--")+1:]
			if want := []string{string(m.Role), "--config", c.ConfigFile(m)}; !slices.Equal(args, want) {
				t.Errorf("%s runs with %q, want %q", m.ID, args, want)
			}
		}
	})

	var firstInit int
	t.Run("eval the bootstrap line, then status and submit without flags", func(t *testing.T) {
		line := j.bootstrapLine(time.Minute)
		t.Logf("acl bootstrap ends with: %s", line)
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "POLLUX_") {
				env = append(env, kv)
			}
		}
		// pollux ARGS in a shell that evaluated the line first.
		shell := func(args ...string) (int, string) {
			sh := exec.CommandContext(ctx, "sh", append(append([]string{"-c", `eval "$JOURNEY_EXPORTS" && exec "$@"`, "sh"}, selfExec...), args...)...)
			sh.Env = append(env, "POLLUX_TEST_PROCESS=1", "JOURNEY_EXPORTS="+line)
			out, err := sh.CombinedOutput()
			var exit *exec.ExitError
			switch {
			case errors.As(err, &exit):
				return exit.ExitCode(), string(out)
			case err != nil:
				t.Fatalf("sh: %v", err)
			}
			return 0, string(out)
		}
		if code, out := j.again("status after eval", func() (int, string) { return shell("status") }); code != 0 || !strings.Contains(out, "leader") {
			t.Fatalf("status after eval of %s: exit %d\n%s", line, code, out)
		}
		// A submission whose answer is lost (a slow server) is retried by
		// the CLI on the next server, which answers as the first would
		// have; only a second run of the command may find the job.
		spec := j.spec("first", "cifar10", 1, 2)
		code, out, rerun := j.runs("submit after eval", func() (int, string) { return shell("submit", spec) })
		switch {
		case code == 0 && strings.Contains(out, "submitted first"):
		case rerun && strings.Contains(out, `job already exists: "first"`):
			t.Logf("submit after eval, run again after every server failed, found the first run's job: %s", out)
		default:
			t.Fatalf("submit after eval of %s: exit %d\n%s", line, code, out)
		}
		job := j.waitJob("first", "placed", 2*time.Minute, placed)
		catalog, err := builtin.Catalog()
		if err != nil {
			t.Fatal(err)
		}
		limits, _ := appLimits(catalog)("cifar10")
		if job.Submitter != api.BootstrapName || job.App != "cifar10" || job.InitBatch != limits.InitBatch {
			t.Errorf("first: submitter %q, application %q, init batch %d; want the bootstrap token's, cifar10's default %d",
				job.Submitter, job.App, job.InitBatch, limits.InitBatch)
		}
		firstInit = job.InitBatch
	})
	if t.Failed() {
		return
	}

	t.Run("SIGHUP after revoking an allow-list entry stops new workers of it", func(t *testing.T) {
		j.submit("imagenet-before", "imagenet", 1, 1)
		j.waitJob("imagenet-before", "placed", 2*time.Minute, placed)
		// A cancel whose answer is lost (a slow server) is retried by the
		// CLI on the next server, which answers as the first would have;
		// only a second run of the command may find the job cancelled.
		if code, out, rerun := j.runs("cancel", func() (int, string) { return j.cli("cancel", "imagenet-before") }); code != 0 && !(rerun && strings.Contains(out, `"imagenet-before" is cancelled`)) {
			t.Fatalf("cancel imagenet-before: %d %s", code, out)
		}
		j.waitJob("imagenet-before", "cancelled", time.Minute, func(job api.Job) bool { return job.State == state.Cancelled.String() })
		for _, m := range c.Agents {
			file := c.ConfigFile(m)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			settings := map[string]any{}
			if err := yaml.Unmarshal(data, &settings); err != nil {
				t.Fatal(err)
			}
			settings["allow-command"] = []string{"emulated:cifar10"}
			if data, err = yaml.Marshal(settings); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, data, 0o600); err != nil {
				t.Fatal(err)
			}
			reloads := func() int {
				b, _ := os.ReadFile(m.Log)
				return strings.Count(string(b), "agent: allow-list reloaded")
			}
			before := reloads()
			if err := c.Signal(m, syscall.SIGHUP, "", 0); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(30 * time.Second); reloads() == before; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s logged no reload of its allow-list within 30 s of SIGHUP", m.ID)
				}
			}
		}
		j.submit("imagenet-after", "imagenet", 1, 1)
		job := j.waitJob("imagenet-after", "ended", 2*time.Minute, terminal)
		if job.State != state.Failed.String() || !strings.Contains(job.Reason, "not in this agent's allow-list") {
			t.Errorf("imagenet-after: %s (%s), want failed: not in the allow-list", job.State, job.Reason)
		}
		// The other application's job runs on (resized, perhaps).
		j.waitJob("first", "running after the revocation", 2*time.Minute, placed)
	})
	if t.Failed() {
		return
	}

	t.Run("snapshot save, wipe every server, restore: every job back", func(t *testing.T) {
		saved := j.jobs()
		for deadline := time.Now().Add(2 * time.Minute); saved == nil && time.Now().Before(deadline); time.Sleep(time.Second) {
			saved = j.jobs() // no server answered: again
		}
		if len(saved) != 3 {
			t.Fatalf("jobs before the backup: %v", slices.Sorted(maps.Keys(saved)))
		}
		backup := filepath.Join(j.dir, "pollux.snap")
		if code, out := j.again("snapshot save", func() (int, string) { return j.cli("operator", "snapshot", "save", backup) }); code != 0 || !strings.Contains(out, "saved") {
			t.Fatalf("snapshot save: %d %s", code, out)
		}
		for _, m := range c.Servers {
			if err := c.Signal(m, syscall.SIGTERM, "", 0); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range c.Servers {
			for deadline := time.Now().Add(45 * time.Second); m.Running(); time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s still runs 45 s after SIGTERM", m.ID)
				}
			}
			if err := os.RemoveAll(m.DataDir); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(m.DataDir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range c.Servers {
			if err := c.Start(ctx, m, "", 0); err != nil {
				t.Fatal(err)
			}
		}
		// The wiped cluster knows no token: it has to be bootstrapped
		// again before the backup can be restored.
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
			code, out := j.cli("jobs")
			if code == 2 && strings.Contains(out, "no tokens yet") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("jobs on the wiped cluster: %d %s", code, out)
			}
		}
		j.bootstrapLine(2 * time.Minute)
		if code, out := j.again("snapshot restore", func() (int, string) { return j.cli("operator", "snapshot", "restore", backup) }); code != 0 || !strings.Contains(out, "3 jobs") {
			t.Fatalf("snapshot restore: %d %s", code, out)
		}
		var got map[string]api.Job
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
			if got = j.jobs(); len(got) == len(saved) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("jobs after the restore: %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(saved)))
			}
		}
		for id, was := range saved {
			now, ok := got[id]
			switch {
			case !ok:
				t.Errorf("job %s is not back", id)
			case now.Submitter != was.Submitter || now.App != was.App || now.InitBatch != was.InitBatch:
				t.Errorf("job %s back as %+v, was %+v", id, now, was)
			case terminal(was) && (now.State != was.State || now.Reason != was.Reason):
				t.Errorf("job %s back %s (%s), was %s (%s)", id, now.State, now.Reason, was.State, was.Reason)
			}
		}
		if job := j.waitJob("first", "placed again", 2*time.Minute, placed); job.InitBatch != firstInit {
			t.Errorf("first after the restore: init batch %d, was %d", job.InitBatch, firstInit)
		}
	})

	// The logs steps run last, on a job of their own (the snapshot step
	// counts the jobs, the SIGHUP step needs "first" running).
	t.Run("logs: followed within 1 s, an earlier incarnation's after a resize, none for a read token", func(t *testing.T) {
		steps := *j
		steps.t = t
		steps.logSteps(ctx, "chatty")
	})
	t.Run("events: submitted, placed, resized, completed, each with its reason", func(t *testing.T) {
		steps := *j
		steps.t = t
		steps.eventSteps("chatty")
	})
}
