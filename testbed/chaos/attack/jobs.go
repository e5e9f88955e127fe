package attack

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// commandSpec is a job spec running argv (batch limits of cifar10).
func (t *target) commandSpec(name string, argv []string) []byte {
	l := t.cat["cifar10"].Limits()
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Appendf(nil, "name: %s\ncommand: [%s]\nmax_replicas: 1\ninit_batch_size: %d\nmax_batch_size: %d\n"+
		"min_local_batch_size: %d\nmax_local_batch_size: %d\naccumulation: %t\n",
		name, strings.Join(quoted, ", "), l.InitBatch, l.MaxBatch, l.MinLocal, l.MaxLocal, l.Accumulation)
}

// deniedJob submits a job the agents' policy forbids: the API takes it
// (it cannot know the agents' allow-lists or the links under the root),
// the agent it is placed on denies it, and the leader fails it with the
// agent's reason. Refused if it ends failed naming mention, no worker of
// it ever runs, and the agent logged the denial.
func deniedJob(name string, spec func(*target) []byte, mention string) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		t.expect[name] = "refuses to run it"
		a := t.c.Client().Submit(ctx, t.leader, name, spec(t), 10*time.Second)
		// Run again (the victim moved during the first run), the case
		// finds its job of the first run and judges that one: a name is
		// taken once.
		again := takenByFirstRun(a.Code, a.Err)
		if !a.OK() && !again {
			return "submission not taken: " + a.Error(), false
		}
		cl := t.c.Client()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if ws := t.findWorkers(name); len(ws) > 0 {
				return fmt.Sprintf("worker process %d of the job runs", ws[0].pid), false
			}
			j, found, _, ans := cl.Job(ctx, t.leader, name, 5*time.Second)
			if ans.OK() && found && j.State == "failed" {
				if !strings.Contains(j.Reason, mention) {
					return fmt.Sprintf("failed, but for another reason: %q", j.Reason), false
				}
				for _, ag := range t.c.Agents {
					if line, ok := t.logLine(ag, "refusing to run a job", "job="+name); ok {
						return fmt.Sprintf("submitted (201); the job failed at once: %q; %s/%s logged: %s", j.Reason, ag.Role, ag.ID, logMsg(line)), true
					}
				}
				return fmt.Sprintf("failed (%q), but no agent logged the denial", j.Reason), false
			}
			if time.Now().After(deadline) {
				return fmt.Sprintf("not failed within 60 s: %+v", j), false
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// takenByFirstRun reports whether a submission's answer (status and
// error text) says its name is taken: run again, a case that submits a
// job meets its own job of the first run, and judges that one.
func takenByFirstRun(code int, msg string) bool {
	return code == http.StatusConflict && strings.Contains(msg, "job already exists")
}

// rejectedSubmit submits a spec the API must refuse with a 400 naming
// mention; the observer checks the job never appears.
func rejectedSubmit(name string, spec func(*target) []byte, mention string) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		a := t.c.Client().Submit(ctx, t.leader, name, spec(t), 10*time.Second)
		if a.Code != http.StatusBadRequest || !strings.Contains(a.Err, mention) {
			return "answer " + a.Error(), false
		}
		return fmt.Sprintf("%d: %s", a.Code, strings.TrimSpace(a.Err)), true
	}
}

// escapeLink makes ROOT/attack-escape a link to the marker directory,
// outside the root, as someone who can write in the root might.
func (t *target) escapeLink() (string, error) {
	if err := os.MkdirAll(t.root, 0o755); err != nil {
		return "", err
	}
	link := filepath.Join(t.root, "attack-escape")
	if err := os.Symlink(t.marker, link); err != nil && !os.IsExist(err) {
		return "", err
	}
	return link, nil
}

func (t *target) appSpec(name, extra string) []byte {
	b, err := t.spec(name, "cifar10", 1, extra)
	if err != nil {
		panic(err) // cifar10 is built in
	}
	return b
}
