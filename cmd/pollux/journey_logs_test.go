package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"pollux/actors/server/api"
	"pollux/consensus/state"
)

// followed is one line `pollux logs -f` printed, with when the test read
// it from the command's stdout.
type followed struct {
	at   time.Time
	line api.LogLine
}

// follow starts `pollux logs -f ID --json` as a process of its own, as a
// user would, and returns the lines it prints as they come (the channel
// closes when it exits) and a function that stops it and returns its
// stderr.
func (j *journey) follow(ctx context.Context, id string) (<-chan followed, func() string) {
	j.t.Helper()
	var hs []string
	for _, m := range j.c.Servers {
		hs = append(hs, m.HTTP)
	}
	args := append(slices.Clone(selfExec), "logs", "-f", id, "--json",
		"--server", strings.Join(hs, ","), "--ca", j.c.TLS().CA, "--token", j.c.AdminToken())
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POLLUX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "POLLUX_TEST_PROCESS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		j.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		j.t.Fatal(err)
	}
	lines := make(chan followed, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			at := time.Now()
			var l api.LogLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l = api.LogLine{Line: "(not a JSON log line) " + sc.Text()}
			}
			lines <- followed{at: at, line: l}
		}
	}()
	return lines, func() string {
		_ = cmd.Process.Kill()
		for range lines { // the reader ends at the pipe's EOF
		}
		_ = cmd.Wait()
		return stderr.String()
	}
}

// workerTime is the time an emulated worker's slog line says it was
// written (time=RFC 3339).
var workerTime = regexp.MustCompile(`^time=(\S+) `)

// cliAs runs `pollux ARGS` with the cluster's servers and CA and token.
func (j *journey) cliAs(token string, args ...string) (int, string) {
	j.t.Helper()
	var hs []string
	for _, m := range j.c.Servers {
		hs = append(hs, m.HTTP)
	}
	return runOut(append(args, "--server", strings.Join(hs, ","), "--ca", j.c.TLS().CA, "--token", token, "--timeout", "30s")...)
}

// logSteps are the logs steps of TestOperatorJourney, on a job of its
// own, id (cifar10, one or two replicas), followed from its submission:
// `pollux logs -f` prints a line the worker wrote within 1 s (the median
// over the lines it printed, each measured from the time the worker's
// own line carries to the time the command printed it); after the job's
// next incarnation has started (a resize), the earlier incarnation's log
// is still readable; a read token is refused with 403.
func (j *journey) logSteps(ctx context.Context, id string) {
	t := j.t
	began := time.Now()
	lines, stop := j.follow(ctx, id)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	j.submit(id, "cifar10", 1, 2)

	// The emulated worker writes a line when it exits, so an incarnation
	// that ends (a resize, the job's end) writes one. Each line written
	// after the follower started is measured; one written before (none,
	// the job is newer) would come from the file, not as it is written.
	var seen []followed
	var latencies []time.Duration
	var earlier *api.LogLine // a measured line of an incarnation before the job's newest
	var now api.Job
	take := func(f followed) {
		seen = append(seen, f)
		m := workerTime.FindStringSubmatch(f.line.Line)
		if m == nil {
			t.Logf("followed (no worker time): %+v", f.line)
			return
		}
		wrote, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Logf("followed (bad worker time %q): %+v", m[1], f.line)
			return
		}
		if wrote.Before(began) {
			t.Logf("followed (written before the follower started, not measured): %+v", f.line)
			return
		}
		d := f.at.Sub(wrote)
		latencies = append(latencies, d)
		t.Logf("followed: worker wrote at %s, agent read at %s, pollux logs -f printed at %s: %s after the worker (%s after the agent): %q",
			wrote.Format(time.StampMilli), f.line.Time.Format(time.StampMilli), f.at.Format(time.StampMilli),
			d.Round(time.Millisecond), f.at.Sub(f.line.Time).Round(time.Millisecond), f.line.Line)
	}
	for deadline := time.Now().Add(3 * time.Minute); earlier == nil; {
		if job := j.job(id); job != nil {
			now = *job
		}
		for _, f := range seen {
			if f.line.Incarnation < now.Incarnation && workerTime.MatchString(f.line.Line) {
				earlier = &f.line
				break
			}
		}
		if earlier != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: within 3 min, no line of an incarnation before its newest (%d, %s) followed: %+v", id, now.Incarnation, now.State, seen)
		}
		wait := time.After(time.Second)
	drain:
		for lines != nil {
			select {
			case f, ok := <-lines:
				if !ok {
					t.Logf("pollux logs -f %s ended (the job ended: %s)", id, now.State)
					lines = nil
					break drain
				}
				take(f)
			case <-wait:
				break drain
			}
		}
		if lines == nil {
			time.Sleep(time.Second) // the job's state, again
		}
	}
	// More lines to measure: the follower goes on through the job's next
	// incarnations until the job ends (cifar10 at the launcher's time
	// scale: well within a minute), or a minute has passed.
	for more := time.After(time.Minute); lines != nil; {
		select {
		case f, ok := <-lines:
			if ok {
				take(f)
			} else {
				lines = nil
			}
		case <-more:
			t.Logf("pollux logs -f %s still follows after a minute more", id)
			lines = nil
		}
	}
	if len(latencies) == 0 {
		t.Fatalf("pollux logs -f %s printed no line the worker wrote after it started: %+v", id, seen)
	}
	slices.Sort(latencies)
	median := latencies[len(latencies)/2]
	t.Logf("pollux logs -f: %d lines measured, median %s after the worker wrote them (all: %v)", len(latencies), median, latencies)
	if median > time.Second {
		t.Errorf("pollux logs -f printed the worker's lines %s after it wrote them (median of %d), want within 1 s", median, len(latencies))
	}
	stopped = true
	t.Logf("pollux logs -f stopped; its stderr: %q", stop())

	// The earlier incarnation's log, read after the next one started.
	inc := fmt.Sprint(earlier.Incarnation)
	code, out := j.again("logs of an earlier incarnation", func() (int, string) { return j.cli("logs", id, "--incarnation", inc, "--json") })
	if code != 0 {
		t.Fatalf("logs %s --incarnation %s (now at %d): exit %d: %s", id, inc, now.Incarnation, code, out)
	}
	var found bool
	for _, raw := range strings.Split(strings.TrimSpace(out), "\n") {
		var l api.LogLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("logs %s --incarnation %s --json: %q: %v", id, inc, raw, err)
		}
		if l.Incarnation != earlier.Incarnation || l.Rank != 0 {
			t.Errorf("logs %s --incarnation %s: a line of incarnation %d rank %d", id, inc, l.Incarnation, l.Rank)
		}
		found = found || l.Line == earlier.Line
	}
	if !found {
		t.Errorf("logs %s --incarnation %s (now at %d) lacks the line followed, %q:\n%s", id, inc, now.Incarnation, earlier.Line, out)
	}
	t.Logf("logs %s --incarnation %s, read with the job at incarnation %d:\n%s", id, inc, now.Incarnation, out)

	// A read token sees the job, not its logs.
	code, out = j.again("acl token create", func() (int, string) {
		return j.cli("acl", "token", "create", "--name", "journey-reader", "--role", "read", "--json")
	})
	var reader api.Token
	if code != 0 || json.Unmarshal([]byte(out), &reader) != nil || reader.Secret == "" {
		t.Fatalf("acl token create --role read: %d %s", code, out)
	}
	if code, out := j.again("job as a reader", func() (int, string) { return j.cliAs(reader.Secret, "job", id) }); code != 0 {
		t.Fatalf("job %s with a read token: %d %s", id, code, out)
	}
	code, out = j.again("logs as a reader", func() (int, string) { return j.cliAs(reader.Secret, "logs", id) })
	if code != 2 || !strings.Contains(out, "403") {
		t.Errorf("logs %s with a read token: exit %d, want 2 with 403: %s", id, code, out)
	}
	t.Logf("logs with a read token: exit %d: %s", code, out)
}

// eventSteps is the events step of TestOperatorJourney, on job id (the
// logs steps' job, which was resized): once it has completed, `pollux
// events --job ID --json` lists it submitted, placed, resized and
// completed, in that order, each with its reason, and a checkpointed
// event between its placement and its completion.
func (j *journey) eventSteps(id string) {
	t := j.t
	if job := j.waitJob(id, "ended", 3*time.Minute, terminal); job.State != state.Completed.String() {
		t.Fatalf("%s ended %s (%s), want completed", id, job.State, job.Reason)
	}
	code, out := j.again("events", func() (int, string) { return j.cli("events", "--job", id, "--json") })
	var evs api.Events
	if code != 0 || json.Unmarshal([]byte(out), &evs) != nil {
		t.Fatalf("events --job %s --json: exit %d: %s", id, code, out)
	}
	var types []string
	for i, ev := range evs.Events {
		t.Logf("event %d: %s %s: %s", ev.Seq, ev.Type, ev.Job, ev.Reason)
		types = append(types, ev.Type)
		switch {
		case ev.Job != id:
			t.Errorf("events --job %s lists an event of %q: %+v", id, ev.Job, ev)
		case ev.Reason == "":
			t.Errorf("event %d (%s) has no reason", ev.Seq, ev.Type)
		case i > 0 && ev.Seq <= evs.Events[i-1].Seq:
			t.Errorf("event %d after event %d", ev.Seq, evs.Events[i-1].Seq)
		}
	}
	placedAt, resizedAt := slices.Index(types, "placed"), slices.Index(types, "resized")
	if len(types) < 4 || types[0] != "submitted" || placedAt < 0 || resizedAt < placedAt ||
		types[len(types)-1] != "completed" || slices.Contains(types, "failed") || slices.Contains(types, "cancelled") {
		t.Errorf("events of %s: %v, want submitted, placed, resized, completed in that order", id, types)
	}
	// Its workers' checkpoints (the emulated worker saves one at every
	// epoch's end) show between its placement and its completion.
	ck := slices.IndexFunc(evs.Events, func(ev api.Event) bool {
		return ev.Type == "checkpointed" && strings.Contains(ev.Reason, "checkpoint at epoch") && strings.Contains(ev.Reason, "incarnation")
	})
	if ck <= placedAt || ck >= len(types)-1 {
		t.Errorf("events of %s: %v, want a checkpointed event (with its epoch and incarnation) between placed and completed", id, types)
	}
}
